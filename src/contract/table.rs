//! Embedding tables: loading `embeddings.json` (docs/formats.md#embeddings-table), validating it,
//! and the host-side part of the fp32 contract (`inv_norm`, docs/contract.md#fp32-chain).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

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

    /// Loads and validates `embeddings.json` (both shapes of docs/formats.md#embeddings-table).
    pub fn load_json(path: &str) -> Result<Table> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Self::parse_json(path, &bytes)
    }

    pub fn parse_json(path: &str, bytes: &[u8]) -> Result<Table> {
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Err(Error::input(path, "the file is empty"));
        }
        let sha256 = hex(&Sha256::digest(bytes));
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let parsed = TopLevel.deserialize(&mut de).and_then(|p| de.end().map(|_| p));
        let parsed = parsed.map_err(|e| {
            let msg = e.to_string();
            let msg = if e.is_eof() { format!("the file is truncated ({msg})") } else { msg };
            Error::input(path, msg)
        })?;
        let rows = parsed.rows.ok_or_else(|| Error::input(path, "the object has no \"embeddings\" array"))?;
        let n = rows.n;
        let dim = rows.dim.unwrap_or(0);
        check_labels(path, n, parsed.ids.as_ref().map(Vec::len), parsed.titles.as_ref().map(Vec::len))?;
        let mut table = Table::from_rows(path, n, dim, rows.data, Some(sha256))?;
        table.model = parsed.model;
        table.ids = parsed.ids;
        table.titles = parsed.titles;
        Ok(table)
    }

    /// Writes the table as an `embeddings.json` object (atomically): its model,
    /// ids and titles where it has them, then the rows. Each value is written
    /// as the shortest decimal that reads back to the same f32.
    pub fn write_json(&self, path: &str) -> Result<()> {
        use std::io::Write;
        crate::contract::atomic::write_atomically(path, |w| {
            write!(w, "{{\"model\": ")?;
            serde_json::to_writer(&mut *w, &self.model)?;
            for (name, list) in [("ids", &self.ids), ("titles", &self.titles)] {
                if let Some(list) = list {
                    write!(w, ", \"{name}\": ")?;
                    serde_json::to_writer(&mut *w, list)?;
                }
            }
            writeln!(w, ", \"embeddings\": [")?;
            for j in 0..self.n {
                write!(w, "[")?;
                for (d, x) in self.row(j).iter().enumerate() {
                    if d > 0 {
                        write!(w, ",")?;
                    }
                    write!(w, "{x:?}")?;
                }
                writeln!(w, "]{}", if j + 1 < self.n { "," } else { "" })?;
            }
            writeln!(w, "]}}")?;
            Ok(())
        })
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

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---- streaming JSON reader -------------------------------------------------
// The table is read straight into one flat Vec<f32> (no Value tree), and each
// problem is reported with its row and column.

#[derive(Default)]
struct Rows {
    data: Vec<f32>,
    n: usize,
    dim: Option<usize>,
}

struct RowsSeed;

impl<'de> DeserializeSeed<'de> for RowsSeed {
    type Value = Rows;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Rows, D::Error> {
        d.deserialize_seq(RowsVisitor)
    }
}

struct RowsVisitor;

impl<'de> Visitor<'de> for RowsVisitor {
    type Value = Rows;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of rows (arrays of numbers)")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Rows, A::Error> {
        let mut rows = Rows::default();
        loop {
            let row = rows.n;
            let before = rows.data.len();
            let seed = RowSeed { rows: &mut rows, row };
            if seq.next_element_seed(seed)?.is_none() {
                break;
            }
            let width = rows.data.len() - before;
            match rows.dim {
                None => rows.dim = Some(width),
                Some(d) if d != width => {
                    return Err(de::Error::custom(format!(
                        "row {row} has {width} values but row 0 has {d} (ragged rows)"
                    )))
                }
                _ => {}
            }
            rows.n += 1;
        }
        Ok(rows)
    }
}

struct RowSeed<'a> {
    rows: &'a mut Rows,
    row: usize,
}

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "row {} to be an array of numbers", self.row)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        let mut col = 0usize;
        while let Some(x) = seq.next_element_seed(NumberSeed { row: self.row, col })? {
            // Nearest f64 (float_roundtrip parser), then one rounding to f32.
            let v = x as f32;
            if !v.is_finite() {
                return Err(de::Error::custom(format!(
                    "row {}, column {col}: value {x:e} overflows f32",
                    self.row
                )));
            }
            self.rows.data.push(v);
            col += 1;
        }
        Ok(())
    }
}

struct NumberSeed {
    row: usize,
    col: usize,
}

impl<'de> DeserializeSeed<'de> for NumberSeed {
    type Value = f64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<f64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NumberSeed {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a number at row {}, column {}", self.row, self.col)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<f64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<f64, E> {
        Ok(v as f64)
    }
}

#[derive(Default)]
struct Parsed {
    rows: Option<Rows>,
    model: Option<String>,
    ids: Option<Vec<String>>,
    titles: Option<Vec<String>>,
}

struct TopLevel;

impl<'de> DeserializeSeed<'de> for TopLevel {
    type Value = Parsed;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Parsed, D::Error> {
        d.deserialize_any(self)
    }
}

/// An id may be a string or a number; both are kept as text.
#[derive(serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum Id {
    Text(String),
    Number(serde_json::Number),
}

impl Id {
    pub(crate) fn into_text(self) -> String {
        match self {
            Id::Text(s) => s,
            Id::Number(n) => n.to_string(),
        }
    }
}

impl<'de> Visitor<'de> for TopLevel {
    type Value = Parsed;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of rows, or an object with an \"embeddings\" array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<Parsed, A::Error> {
        let rows = RowsVisitor.visit_seq(seq)?;
        Ok(Parsed { rows: Some(rows), ..Default::default() })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Parsed, A::Error> {
        let mut parsed = Parsed::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "embeddings" => parsed.rows = Some(map.next_value_seed(RowsSeed)?),
                "model" => parsed.model = map.next_value::<Option<String>>()?,
                "ids" => {
                    let ids: Vec<Id> = map.next_value()?;
                    parsed.ids = Some(ids.into_iter().map(Id::into_text).collect());
                }
                "titles" => parsed.titles = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_to_nearest_f64_then_to_f32() -> Result<()> {
        // Nearest f64 of this decimal is exactly 1 + 2^-24, a tie that rounds
        // to even (1.0) in f32; a direct decimal -> f32 parse gives 1 + 2^-23.
        let t = Table::parse_json("t", b"[[1.00000005960464477539062500000001, 1], [0.1, 2]]")?;
        assert_eq!(t.data[0], 1.0);
        assert_eq!(t.data[2], 0.1f32);
        Ok(())
    }

    #[test]
    fn inv_norm_is_computed_in_f64_and_rounded_once() {
        assert_eq!(inv_norm_of(&[3.0, 4.0]), 0.2f32);
        assert_eq!(inv_norm_of(&[1.0, 1.0]), (1.0 / 2f64.sqrt()) as f32);
    }

    #[test]
    fn bad_tables_name_the_row() {
        let err = |s: &str| Table::parse_json("f.json", s.as_bytes()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err("[[1, 2], [3]]").contains("row 1 has 1 values"));
        assert!(err("[[1, 2], [3, true]]").contains("row 1, column 1"));
        assert!(err("[[1, 2], [0, 0]]").contains("row 1 is all zeros"));
        assert!(err("[[1, 2], [1, 1e39]]").contains("overflows f32"));
        assert!(err("[[1, 2]]").contains("at least 2"));
        assert!(err("  ").contains("empty"));
        assert!(err("[[1, 2], [1,").contains("truncated"));
        assert!(err("[[1, 2], [1, 2]] x").starts_with("f.json: "));
    }
}
