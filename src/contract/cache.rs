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

/// The cache's bytes before its first sequence: the header fields, then the
/// opening of the `sequences` array.
pub fn head(header: &CacheHeader) -> Result<Vec<u8>> {
    let head = serde_json::to_string(header).map_err(|e| Error::Usage(format!("cache header: {e}")))?;
    // `head` is `{...}`: reopen it to append the sequences.
    Ok(format!("{},\n\"sequences\": [", &head[..head.len() - 1]).into_bytes())
}

/// The cache's bytes after its last sequence.
pub const TAIL: &[u8] = b"\n]}\n";

/// Writes whole sequences of `length`, one per line; `index` is the position
/// of the first of them in the file (the first one has no comma before it).
/// The cache and the checkpoint of `run` both write through here, so a
/// resumed run's file has the bytes of an uninterrupted one.
pub fn write_sequences(w: &mut impl Write, sequences: &[u32], length: usize, index: usize) -> std::io::Result<()> {
    for (i, seq) in sequences.chunks_exact(length).enumerate() {
        w.write_all(if index + i == 0 { b"\n[" } else { b",\n[" })?;
        for (k, x) in seq.iter().enumerate() {
            if k > 0 {
                w.write_all(b",")?;
            }
            write!(w, "{x}")?;
        }
        w.write_all(b"]")?;
    }
    Ok(())
}

/// Writes the header fields, then one sequence per line (easy to diff).
pub fn write(path: &str, header: &CacheHeader, sequences: &[u32]) -> Result<()> {
    check_whole(sequences.len(), header.length)?;
    let head = head(header)?;
    write_atomically(path, |w| {
        w.write_all(&head)?;
        write_sequences(w, sequences, header.length, 0)?;
        w.write_all(TAIL)?;
        Ok(())
    })
}

/// `values` make whole sequences of `length`.
pub fn check_whole(values: usize, length: usize) -> Result<()> {
    if length == 0 || values % length != 0 {
        return Err(Error::Usage(format!("{values} values do not make whole sequences of length {length}")));
    }
    Ok(())
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
