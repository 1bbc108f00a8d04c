//! What the contract's unit tests share: a small cache header and a fresh
//! temporary folder.

use std::fs;
use std::path::PathBuf;

use crate::cache::json::{self, CacheHeader};

/// The header of a 9 × 3 fp32 table with sha256 `sha`, sequences of `length`.
pub fn header(length: usize, sha: &str) -> CacheHeader {
    CacheHeader {
        format: json::FORMAT.into(),
        version: json::VERSION,
        contract: "fp32".into(),
        num_items: 9,
        dim: 3,
        length,
        embeddings_sha256: sha.into(),
        starts_count: None,
        starts_sha256: None,
        divgpu_version: None,
    }
}

/// A new empty folder `divgpu-{what}-{name}-{pid}` in the temporary folder.
pub fn tmp(what: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("divgpu-{what}-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}
