//! `diversity_cache.json` (SPEC section 4): written atomically, read back for
//! `verify`.

use std::io::Write;

use serde::{Deserialize, Serialize};

use super::atomic::write_atomically;
use crate::error::{Error, Result};

pub const FORMAT: &str = "divgpu-diversity-cache";
pub const VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheHeader {
    pub format: String,
    pub version: u32,
    pub contract: String,
    pub num_items: usize,
    pub dim: usize,
    pub length: usize,
    pub embeddings_sha256: String,
}

#[derive(Debug, Deserialize)]
struct CacheFile {
    #[serde(flatten)]
    header: CacheHeader,
    sequences: Vec<Vec<u32>>,
}

/// Writes the header fields, then one sequence per line (easy to diff).
pub fn write(path: &str, header: &CacheHeader, sequences: &[u32]) -> Result<()> {
    if header.length == 0 || sequences.len() % header.length != 0 {
        return Err(Error::Usage(format!(
            "{} values do not make whole sequences of length {}",
            sequences.len(),
            header.length
        )));
    }
    write_atomically(path, |w| {
        let head = serde_json::to_string(header)?;
        // `head` is `{...}`: reopen it to append the sequences.
        write!(w, "{},\n\"sequences\": [", &head[..head.len() - 1])?;
        for (i, seq) in sequences.chunks_exact(header.length).enumerate() {
            w.write_all(if i == 0 { b"\n[" } else { b",\n[" })?;
            for (k, x) in seq.iter().enumerate() {
                if k > 0 {
                    w.write_all(b",")?;
                }
                write!(w, "{x}")?;
            }
            w.write_all(b"]")?;
        }
        w.write_all(b"\n]}\n")?;
        Ok(())
    })
}

/// Reads a cache; sequences come back flat, `[count × length]`.
pub fn read(path: &str) -> Result<(CacheHeader, Vec<u32>)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let file: CacheFile = serde_json::from_slice(&bytes).map_err(|e| Error::input(path, e.to_string()))?;
    if file.header.format != FORMAT || file.header.version != VERSION {
        return Err(Error::input(
            path,
            format!(
                "not a divgpu cache of version {VERSION} (format '{}', version {})",
                file.header.format, file.header.version
            ),
        ));
    }
    let length = file.header.length;
    let mut flat = Vec::with_capacity(file.sequences.len() * length);
    for (i, seq) in file.sequences.iter().enumerate() {
        if seq.len() != length {
            return Err(Error::input(path, format!("sequence {i} has {} items, the header says length {length}", seq.len())));
        }
        flat.extend_from_slice(seq);
    }
    Ok((file.header, flat))
}
