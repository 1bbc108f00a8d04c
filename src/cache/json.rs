//! `diversity_cache.json` (docs/formats.md#cache-file): written atomically, read back for
//! `verify`.
//!
//! Version 2 records what the file must contain: `starts_count`
//! and `starts_sha256` (the sha256 of the starts as little-endian u32, in
//! order: each sequence's first item), and `divgpu_version`, the divgpu that
//! wrote it. A reader refuses a version 2 cache that lacks a sequence or whose
//! sequences start elsewhere. Version 1 (without them) stays readable. The
//! header is a struct of optional fields, so a later version adds its own.

use std::io::Write;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::durable::atomic::write_atomically;
use crate::error::{Error, Result};
use crate::util::hex;

pub const FORMAT: &str = "divgpu-diversity-cache";
/// The version written.
pub const VERSION: u32 = 2;
/// The versions read.
pub const READABLE: [u32; 2] = [1, 2];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheHeader {
    pub format: String,
    pub version: u32,
    pub contract: String,
    pub num_items: usize,
    pub dim: usize,
    pub length: usize,
    pub embeddings_sha256: String,
    /// Version 2: how many sequences the file holds (one per start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_count: Option<usize>,
    /// Version 2: `starts_sha256` of the starts, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_sha256: Option<String>,
    /// Version 2: the divgpu that wrote the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divgpu_version: Option<String>,
}

impl CacheHeader {
    /// The header divgpu writes (the current version) of a job of `starts`.
    pub fn new(contract: &str, num_items: usize, dim: usize, length: usize, embeddings_sha256: &str, starts: &[u32]) -> Self {
        CacheHeader {
            format: FORMAT.into(),
            version: VERSION,
            contract: contract.into(),
            num_items,
            dim,
            length,
            embeddings_sha256: embeddings_sha256.into(),
            starts_count: Some(starts.len()),
            starts_sha256: Some(starts_sha256(starts)),
            divgpu_version: Some(env!("CARGO_PKG_VERSION").into()),
        }
    }

    /// The same header for another list of starts (a merge: the whole run's).
    pub fn with_starts(&self, count: usize, sha256: &str) -> Self {
        CacheHeader {
            version: VERSION,
            starts_count: Some(count),
            starts_sha256: Some(sha256.into()),
            divgpu_version: Some(env!("CARGO_PKG_VERSION").into()),
            ..self.clone()
        }
    }
}

/// sha256 of a list of starts: u32 little-endian, in order.
pub fn starts_sha256(starts: &[u32]) -> String {
    let mut h = Sha256::new();
    for s in starts {
        h.update(s.to_le_bytes());
    }
    hex(&h.finalize())
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[derive(Debug, Deserialize)]
struct CacheFile {
    #[serde(flatten)]
    header: CacheHeader,
    sequences: Vec<Vec<u32>>,
}

/// The cache's bytes before its first sequence: the header fields, then the
/// opening of the `sequences` array. Generic so that a shard's part (a header
/// with one more field, `cache::shard`) is written by the same code.
pub fn head(header: &impl Serialize) -> Result<Vec<u8>> {
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
    parse(path, &bytes)
}

/// The header's format and version, its contract, sha256 and length, as
/// `parse` and `divgpu merge` accept them.
pub fn check_header(path: &str, h: &CacheHeader) -> Result<()> {
    if h.format != FORMAT || !READABLE.contains(&h.version) {
        return Err(Error::input(
            path,
            format!("not a divgpu cache of version 1 or 2 (format {:?}, version {})", h.format, h.version),
        ));
    }
    if h.version >= 2 {
        let (Some(_), Some(sha), Some(by)) = (h.starts_count, &h.starts_sha256, &h.divgpu_version) else {
            return Err(Error::input(path, "a version 2 header needs starts_count, starts_sha256 and divgpu_version"));
        };
        if !is_sha256(sha) {
            return Err(Error::input(path, "starts_sha256 is not a sha256 (64 hex digits)"));
        }
        if by.is_empty() || by.len() > 64 || by.chars().any(char::is_control) {
            return Err(Error::input(path, "divgpu_version is not a version (up to 64 printable characters)"));
        }
    }
    // Both are printed by `verify`: checked here, they keep its lines one line.
    if h.contract != "fp32" && h.contract != "fp16" {
        return Err(Error::input(path, format!("unknown contract {:?} (\"fp32\" or \"fp16\")", h.contract)));
    }
    if !is_sha256(&h.embeddings_sha256) {
        return Err(Error::input(path, "embeddings_sha256 is not a sha256 (64 hex digits)"));
    }
    if h.length == 0 {
        return Err(Error::input(path, "the header says length 0"));
    }
    Ok(())
}

/// The bytes of a cache file named `path` (the fuzz targets' entry point).
pub fn parse(path: &str, bytes: &[u8]) -> Result<(CacheHeader, Vec<u32>)> {
    let file: CacheFile = serde_json::from_slice(bytes).map_err(|e| Error::input(path, e.to_string()))?;
    check_header(path, &file.header)?;
    let length = file.header.length;
    // Every sequence is checked before anything is allocated: the header's
    // length alone (say 1e12) must not size an allocation.
    let num_items = file.header.num_items;
    for (i, seq) in file.sequences.iter().enumerate() {
        if seq.len() != length {
            return Err(Error::input(path, format!("sequence {i} has {} items, the header says length {length}", seq.len())));
        }
        if let Some((k, &x)) = seq.iter().enumerate().find(|&(_, &x)| x as usize >= num_items) {
            return Err(Error::input(
                path,
                format!("sequence {i}, step {k}: item {x} is out of range (the header says {num_items} items)"),
            ));
        }
    }
    let firsts: Vec<u32> = file.sequences.iter().map(|s| s[0]).collect();
    check_contents(path, &file.header, firsts.len(), &starts_sha256(&firsts))?;
    Ok((file.header, file.sequences.concat()))
}

/// A version 2 cache holds exactly the sequences its header promises: as many
/// as `starts_count`, whose first items hash (`firsts_sha256`) to `starts_sha256`.
pub fn check_contents(path: &str, h: &CacheHeader, count: usize, firsts_sha256: &str) -> Result<()> {
    let (Some(want), Some(sha)) = (h.starts_count, &h.starts_sha256) else { return Ok(()) };
    if count != want {
        return Err(Error::input(
            path,
            format!("has {count} sequences, but its header says starts_count {want}: sequences are missing or extra"),
        ));
    }
    if !firsts_sha256.eq_ignore_ascii_case(sha) {
        return Err(Error::input(path, "its sequences' first items do not hash to the header's starts_sha256: altered"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "8f05f88c600019b5e52dadd65706c25050b8ce43dc59ab6b861d899afa7914af";

    fn cache(format: &str, length: &str, sequences: &str) -> String {
        format!(
            r#"{{"format":{format:?},"version":1,"contract":"fp32","num_items":6,"dim":3,"length":{length},"embeddings_sha256":"{SHA}","sequences":{sequences}}}"#
        )
    }

    /// A version 2 cache of starts 0 and 5 (sha256 of their u32 LE bytes), length 2.
    fn cache_v2(count: usize, sequences: &str) -> String {
        let sha = starts_sha256(&[0, 5]);
        format!(
            r#"{{"format":"{FORMAT}","version":2,"contract":"fp32","num_items":6,"dim":3,"length":2,"embeddings_sha256":"{SHA}","starts_count":{count},"starts_sha256":"{sha}","divgpu_version":"0.1.0","sequences":{sequences}}}"#
        )
    }

    #[test]
    fn a_version_2_cache_must_hold_every_sequence_it_promises() -> Result<()> {
        let (h, flat) = parse("c.json", cache_v2(2, "[[0,3],[5,1]]").as_bytes())?;
        assert_eq!((h.version, h.starts_count, flat.len()), (2, Some(2), 4));
        assert!(err(&cache_v2(2, "[[0,3]]")).contains("has 1 sequences, but its header says starts_count 2"));
        assert!(err(&cache_v2(2, "[]")).contains("has 0 sequences"));
        assert!(err(&cache_v2(2, "[[0,3],[4,1]]")).contains("do not hash to the header's starts_sha256"));
        assert!(err(&cache_v2(2, "[[5,1],[0,3]]")).contains("do not hash"), "order counts");
        assert!(err(&cache_v2(2, "[[0,3],[5,1]]").replace(",\"divgpu_version\":\"0.1.0\"", "")).contains("needs starts_count"));
        // Twin: version 1 has no such promise, and reads with a sequence fewer.
        assert_eq!(parse("c.json", cache(FORMAT, "2", "[[0,3]]").as_bytes())?.1, [0, 3]);
        Ok(())
    }

    #[test]
    fn the_written_header_is_version_2_and_reads_back() -> Result<()> {
        let h = CacheHeader::new("fp32", 6, 3, 2, SHA, &[0, 5]);
        let text = String::from_utf8(head(&h)?).unwrap() + "\n[0,3],\n[5,1]" + std::str::from_utf8(TAIL).unwrap();
        assert!(text.contains(&format!("\"starts_count\":2,\"starts_sha256\":\"{}\",\"divgpu_version\":\"{}\",\n\"sequences\": [",
            starts_sha256(&[0, 5]), env!("CARGO_PKG_VERSION"))), "{text}");
        assert_eq!(parse("c.json", text.as_bytes())?.1, [0, 3, 5, 1]);
        Ok(())
    }

    fn err(text: &str) -> String {
        match parse("c.json", text.as_bytes()) {
            Ok(_) => panic!("accepted {text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_good_cache_reads_back() -> Result<()> {
        let (h, flat) = parse("c.json", cache(FORMAT, "2", "[[0,3],[5,1]]").as_bytes())?;
        assert_eq!((h.num_items, h.length), (6, 2));
        assert_eq!(flat, [0, 3, 5, 1]);
        Ok(())
    }

    // Found by review: the header's length sized an allocation before any
    // sequence was read, so 1e12 aborted the process (4 TB) and 2^62 wrapped
    // or overflowed the count x length product.
    #[test]
    fn a_huge_length_in_the_header_is_an_error_not_an_abort() {
        for length in ["1000000000000", "4611686018427387904", "18446744073709551615"] {
            let e = err(&cache(FORMAT, length, "[[0,3,5]]"));
            assert!(e.contains("sequence 0 has 3 items, the header says length"), "{e}");
        }
    }

    // Found by review: a header string with a line break made a two-line error.
    #[test]
    fn a_line_break_in_the_format_stays_escaped() {
        // `cache` writes the format with {:?}: the JSON escape \n, a newline once read.
        let e = err(&cache("divgpu-diversity-cache\n", "2", "[[0,3]]"));
        assert!(!e.contains('\n') && e.contains("format \"divgpu-diversity-cache\\n\""), "{e}");
    }

    #[test]
    fn bad_headers_and_items_are_one_line_errors() {
        assert!(err(&cache(FORMAT, "0", "[]")).contains("length 0"));
        assert!(err(&cache(FORMAT, "2", "[[0,6]]")).contains("sequence 0, step 1: item 6 is out of range"));
        assert!(err(&cache(FORMAT, "2", "[[0,3]]").replace("fp32", "fp32\\n")).contains("unknown contract"));
        assert!(err(&cache(FORMAT, "2", "[[0,3]]").replace(SHA, "abc")).contains("not a sha256"));
    }
}
