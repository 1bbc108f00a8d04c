//! FP16 storage (docs/contract.md#fp16-storage): the round-to-nearest-even half of each f32.

use half::f16;

use crate::contract::table::Table;
use crate::error::{Error, Result};

/// Converts the table to IEEE half, row-major. Subnormals are kept; a value
/// that rounds to infinity (|x| >= 65520) is an error naming its row and column.
pub fn to_fp16(table: &Table) -> Result<Vec<u16>> {
    let mut out = Vec::with_capacity(table.data.len());
    for (i, &x) in table.data.iter().enumerate() {
        let h = f16::from_f32(x);
        if h.is_infinite() {
            return Err(Error::input(
                &table.path,
                format!("row {}, column {}: value {x} does not fit in half precision (|x| >= 65520)", i / table.dim, i % table.dim),
            ));
        }
        out.push(h.to_bits());
    }
    Ok(out)
}

/// The table `E' = (f32)E16` on which the `fp16` contract runs.
pub fn widen(path: &str, n: usize, dim: usize, halves: &[u16], sha256: String) -> Result<Table> {
    let data = halves.iter().map(|&h| f16::from_bits(h).to_f32()).collect();
    Table::from_rows(path, n, dim, data, Some(sha256))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_nearest_even_keeps_subnormals_and_rejects_overflow() -> Result<()> {
        let tiny = 2f32.powi(-24); // smallest half subnormal
        let data = vec![1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11), tiny, 65504.0, -65504.0, 1.0];
        let t = Table::from_rows("t", 3, 2, data, None)?;
        let h = to_fp16(&t)?;
        assert_eq!(h[0], f16::from_f32(1.0).to_bits()); // tie -> even
        assert_eq!(h[1], f16::from_f32(1.0 + 4.0 * 2f32.powi(-11)).to_bits()); // tie -> even (up)
        assert_eq!(h[2], 1); // subnormal kept
        assert_eq!(f16::from_bits(h[3]).to_f32(), 65504.0);
        let big = Table::from_rows("t", 2, 1, vec![65520.0, 1.0], None)?;
        assert!(to_fp16(&big).is_err_and(|e| e.to_string().contains("row 0, column 0")));
        Ok(())
    }
}
