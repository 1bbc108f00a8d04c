//! The embedding table in memory: its rows validated, and the host-side part
//! of the fp32 contract (`inv_norm`, docs/contract.md#fp32-chain). Reading
//! and writing it as a file is `table/`'s.

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::util::hex;

/// An N×D table of f32 rows with the per-row `inv_norm` of the contract.
#[derive(Debug, Clone)]
pub struct Table {
    pub path: String,
    pub n: usize,
    pub dim: usize,
    /// Row-major, `n * dim` values.
    pub data: Vec<f32>,
    pub inv_norm: Vec<f32>,
    /// sha256 of the file the table came from (hex), or of its values when
    /// it was made in memory.
    pub sha256: String,
    pub model: Option<String>,
    pub ids: Option<Vec<String>>,
    pub titles: Option<Vec<String>>,
}

/// `inv_norm[j] = (f32)(1 / sqrt(sum_d (f64)E[j][d]^2))`, the sum in f64 over
/// d ascending, then one rounding to f32 (docs/contract.md#fp32-chain). The GPU never
/// computes this: its sqrt and division are not correctly rounded.
pub fn inv_norm_of(row: &[f32]) -> f32 {
    let mut sum = 0.0f64;
    for &x in row {
        let x = x as f64;
        sum += x * x;
    }
    (1.0 / sum.sqrt()) as f32
}

/// The validation of a table's rows, fed in order, in pieces of whole rows
/// (the `.npy` reader checks each piece as it arrives): every value finite,
/// no zero row, `inv_norm` finite and non-zero, and no dot product that can
/// overflow f32. The first bad row in file order is the one reported.
pub(crate) struct RowCheck<'a> {
    path: &'a str,
    n: usize,
    dim: usize,
    inv_norm: Vec<f32>,
    max_abs: f32,
}

/// What is wrong with one row (a String only once a row is found bad).
enum RowFault {
    NotFinite(usize),
    Zero,
    NormOutOfRange(f32),
}

/// A row's `inv_norm` and largest |value|, or why the row is refused.
fn row_stats(row: &[f32]) -> std::result::Result<(f32, f32), RowFault> {
    if let Some(d) = row.iter().position(|x| !x.is_finite()) {
        return Err(RowFault::NotFinite(d));
    }
    if row.iter().all(|&x| x == 0.0) {
        return Err(RowFault::Zero);
    }
    let inv = inv_norm_of(row);
    if !inv.is_finite() || inv == 0.0 {
        return Err(RowFault::NormOutOfRange(inv));
    }
    Ok((inv, row.iter().fold(0.0f32, |m, x| m.max(x.abs()))))
}

impl<'a> RowCheck<'a> {
    pub(crate) fn new(path: &'a str, n: usize, dim: usize) -> Result<Self> {
        if n < 2 {
            return Err(Error::input(path, format!("the table has {n} row(s); at least 2 are needed")));
        }
        if dim == 0 {
            return Err(Error::input(path, "rows are empty (dimension 0)"));
        }
        Ok(RowCheck { path, n, dim, inv_norm: Vec::with_capacity(n), max_abs: 0.0 })
    }

    /// Checks the next whole rows (`data.len()` a multiple of D), in parallel
    /// over rows: each row's sum is still one sequential f64 chain.
    pub(crate) fn rows(&mut self, first_row: usize, data: &[f32]) -> Result<()> {
        use rayon::prelude::*;
        debug_assert_eq!(first_row, self.inv_norm.len());
        let stats: Vec<_> = data.par_chunks_exact(self.dim).map(row_stats).collect();
        for (k, s) in stats.into_iter().enumerate() {
            let j = first_row + k;
            let msg = match s {
                Ok((inv, max_abs)) => {
                    self.inv_norm.push(inv);
                    self.max_abs = self.max_abs.max(max_abs);
                    continue;
                }
                Err(RowFault::NotFinite(d)) => format!("row {j}, column {d}: value is not finite"),
                Err(RowFault::Zero) => format!("row {j} is all zeros: its norm is 0 and its cosine distance undefined"),
                Err(RowFault::NormOutOfRange(inv)) => {
                    format!("row {j}: its norm is outside what f32 can invert (1/norm = {inv})")
                }
            };
            return Err(Error::input(self.path, msg));
        }
        Ok(())
    }

    /// The rows' `inv_norm`, once all N rows were checked.
    pub(crate) fn finish(self) -> Result<Vec<f32>> {
        debug_assert_eq!(self.inv_norm.len(), self.n);
        let (n, dim, max_abs) = (self.n, self.dim, self.max_abs);
        // Every partial dot product is bounded by D * N * max|x|^2 (the centroid
        // sums at most N rows); keep that finite in f32 so no score is inf/NaN.
        let bound = (dim as f64) * (n as f64) * (max_abs as f64).powi(2) * 1.01;
        if bound >= f32::MAX as f64 {
            return Err(Error::input(
                self.path,
                format!("values up to {max_abs} are too large: dot products of {n} rows of {dim} values could overflow f32"),
            ));
        }
        Ok(self.inv_norm)
    }
}

impl Table {
    /// Builds a validated table from row-major values.
    pub fn from_rows(path: &str, n: usize, dim: usize, data: Vec<f32>, sha256: Option<String>) -> Result<Table> {
        let mut check = RowCheck::new(path, n, dim)?;
        debug_assert_eq!(data.len(), n * dim);
        check.rows(0, &data)?;
        let inv_norm = check.finish()?;
        let sha256 = sha256.unwrap_or_else(|| {
            let mut h = Sha256::new();
            for x in &data {
                h.update(x.to_le_bytes());
            }
            hex(&h.finalize())
        });
        Ok(Table { path: path.to_string(), n, dim, data, inv_norm, sha256, model: None, ids: None, titles: None })
    }

    pub fn row(&self, j: usize) -> &[f32] {
        &self.data[j * self.dim..(j + 1) * self.dim]
    }
}

/// Refuses `ids` or `titles` (read from `path`, of these lengths) that do
/// not have one entry a row.
pub(crate) fn check_labels(path: &str, n: usize, ids: Option<usize>, titles: Option<usize>) -> Result<()> {
    for (name, len) in [("ids", ids), ("titles", titles)] {
        if let Some(len) = len {
            if len != n {
                return Err(Error::input(path, format!("\"{name}\" has {len} entries but there are {n} rows")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inv_norm_is_computed_in_f64_and_rounded_once() {
        assert_eq!(inv_norm_of(&[3.0, 4.0]), 0.2f32);
        assert_eq!(inv_norm_of(&[1.0, 1.0]), (1.0 / 2f64.sqrt()) as f32);
    }
}
