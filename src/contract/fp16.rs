//! FP16 storage (SPEC section 3): the round-to-nearest-even half of each f32.

use half::f16;

use super::table::Table;
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

// ---- embeddings_fp16.bin and its meta file (SPEC section 4) ----------------

use std::io::Read;

use sha2::{Digest, Sha256};

use super::atomic::write_atomically;
use super::table::hex;

pub const BIN_NAME: &str = "embeddings_fp16.bin";
pub const META_NAME: &str = "embeddings_fp16.meta.json";

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Fp16Meta {
    pub format: String,
    pub num_items: usize,
    pub dim: usize,
    /// sha256 of the embeddings.json the .bin was made from.
    pub embeddings_sha256: String,
}

/// The .bin and .meta.json paths next to `json_path`.
pub fn paths(json_path: &str) -> (String, String) {
    let dir = std::path::Path::new(json_path).parent().unwrap_or_else(|| std::path::Path::new(""));
    let join = |name: &str| dir.join(name).display().to_string();
    (join(BIN_NAME), join(META_NAME))
}

/// Converts `embeddings.json` to `embeddings_fp16.bin` (N×D little-endian
/// halves, row-major, no header) and its meta file, both written atomically.
pub fn convert(json_path: &str) -> Result<(String, String)> {
    let table = Table::load_json(json_path)?;
    let halves = to_fp16(&table)?;
    let (bin, meta_path) = paths(json_path);
    let bytes: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    write_atomically(&bin, |w| {
        std::io::Write::write_all(w, &bytes)?;
        Ok(())
    })?;
    let meta = Fp16Meta {
        format: "divgpu-fp16".into(),
        num_items: table.n,
        dim: table.dim,
        embeddings_sha256: table.sha256.clone(),
    };
    write_atomically(&meta_path, |w| {
        serde_json::to_writer_pretty(&mut *w, &meta)?;
        std::io::Write::write_all(w, b"\n")?;
        Ok(())
    })?;
    Ok((bin, meta_path))
}

/// Loads the FP16 table made from `json_path`, refusing a missing, stale or
/// mis-sized file. Returns the table E' = (f32)E16 (with its own inv_norm),
/// whose `sha256` is the JSON's.
pub fn load(json_path: &str) -> Result<Table> {
    let (bin, meta_path) = paths(json_path);
    let missing = |what: &str| {
        Error::input(&bin, format!("{what}; run 'divgpu convert-fp16 {json_path}' to make it"))
    };
    let meta_text = std::fs::read(&meta_path).map_err(|_| missing(&format!("{META_NAME} is missing")))?;
    let meta: Fp16Meta =
        serde_json::from_slice(&meta_text).map_err(|e| Error::input(&meta_path, format!("not a valid meta file: {e}")))?;
    let json = std::fs::read(json_path).map_err(|e| Error::io(json_path, e))?;
    let sha = hex(&Sha256::digest(&json));
    if sha != meta.embeddings_sha256 {
        return Err(missing(&format!(
            "stale: {json_path} changed after the conversion (sha256 {sha}, the .bin was made from {})",
            meta.embeddings_sha256
        )));
    }
    let expected = meta.num_items as u64 * meta.dim as u64 * 2;
    let mut file = std::fs::File::open(&bin).map_err(|_| missing("the file is missing"))?;
    let size = file.metadata().map_err(|e| Error::io(&bin, e))?.len();
    if size != expected {
        return Err(missing(&format!(
            "{size} bytes, but {} x {} halves need {expected}: mis-sized or truncated",
            meta.num_items, meta.dim
        )));
    }
    // One copy: straight from the file into the u16 table.
    let mut halves = vec![0u16; meta.num_items * meta.dim];
    file.read_exact(bytemuck::cast_slice_mut(&mut halves)).map_err(|e| Error::io(&bin, e))?;
    if cfg!(target_endian = "big") {
        halves.iter_mut().for_each(|h| *h = u16::from_le(*h));
    }
    if let Some(i) = halves.iter().position(|&h| f16::from_bits(h).is_infinite() || f16::from_bits(h).is_nan()) {
        return Err(Error::input(&bin, format!("row {}, column {}: not a finite half", i / meta.dim, i % meta.dim)));
    }
    widen(json_path, meta.num_items, meta.dim, &halves, sha)
}
