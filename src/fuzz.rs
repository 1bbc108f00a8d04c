//! The checks behind the fuzz targets (`fuzz/fuzz_targets/`, cargo-fuzz) and
//! their stable-toolchain replay (`cargo test` runs every kept corpus file).
//! Each entry feeds bytes to one reader and panics, which the fuzzer reports
//! as a crash, when the reader panics, returns an error that is not one line
//! naming the file, or returns a table or cache that breaks its invariants.

use sha2::Digest;

use crate::cache::binary_cache;
use crate::cache::binary_reader::BinaryCache;
use crate::cache::cache_reader::CacheReader;
use crate::cache::json;
use crate::contract::table::Table;
use crate::error::Error;
use crate::table::{fp16_file, npy};

pub const JSON_PATH: &str = "fuzz/embeddings.json";
pub const CACHE_PATH: &str = "fuzz/diversity_cache.json";
pub const BINARY_PATH: &str = "fuzz/diversity_cache.bin";
pub const NPY_PATH: &str = "fuzz/embeddings.npy";
/// The sha256 the fp16 target's JSON has (that of the empty file): a meta file
/// naming it gets past the staleness check to the size and value checks.
pub const FP16_JSON_SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Panics unless `e` reads as one line that starts with one of `files`.
pub fn check_error(e: &Error, files: &[&str]) {
    let msg = e.to_string();
    assert!(!msg.contains(['\n', '\r']), "the error is not one line: {msg:?}");
    assert!(files.iter().any(|f| msg.starts_with(&format!("{f}: "))), "the error names none of {files:?}: {msg:?}");
}

fn check_table(t: &Table) {
    assert!(t.n >= 2 && t.dim >= 1, "accepted a {}x{} table", t.n, t.dim);
    assert_eq!(t.data.len(), t.n * t.dim, "{}x{} table holds {} values", t.n, t.dim, t.data.len());
    assert_eq!(t.inv_norm.len(), t.n);
    assert!(t.data.iter().chain(&t.inv_norm).all(|x| x.is_finite()), "accepted a non-finite value");
}

/// `embeddings.json` (docs/formats.md#embeddings-table).
pub fn embeddings_json(data: &[u8]) {
    match Table::parse_json(JSON_PATH, data) {
        Ok(t) => check_table(&t),
        Err(e) => check_error(&e, &[JSON_PATH]),
    }
}

/// A `.npy` table and its sidecar: the input is the sidecar's bytes, a NUL
/// byte, then the .npy's (an input that starts with NUL has no sidecar; one
/// with no NUL is all sidecar, with an empty .npy).
pub fn npy(data: &[u8]) {
    let (sidecar, npy_bytes) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let sidecar = (!sidecar.is_empty()).then_some(sidecar);
    match npy::parse(NPY_PATH, npy_bytes, sidecar) {
        Ok(t) => {
            check_table(&t);
            assert!(t.data.len() * 4 < npy_bytes.len(), "{} values in a file of {} bytes", t.data.len(), npy_bytes.len());
            assert_eq!(t.sha256, crate::util::hex(&sha2::Sha256::digest(npy_bytes)), "not the file's sha256");
            for list in [t.ids.as_ref(), t.titles.as_ref()].into_iter().flatten() {
                assert_eq!(list.len(), t.n, "labels of the wrong length accepted");
            }
        }
        Err(e) => check_error(&e, &[NPY_PATH, &npy::sidecar_path(NPY_PATH)]),
    }
}

/// `diversity_cache.json`, through the whole-file parser and the streaming
/// reader of `verify` and `merge`: what the streaming reader accepts, the
/// parser accepts too, with the same sequences.
pub fn cache(data: &[u8]) {
    let parsed = json::parse(CACHE_PATH, data);
    match &parsed {
        Ok((h, flat)) => {
            assert!(h.length > 0 && flat.len() % h.length == 0, "{} values in sequences of {}", flat.len(), h.length);
            if h.version >= 2 {
                assert_eq!(h.starts_count, Some(flat.len() / h.length), "a version 2 cache missing sequences was accepted");
            }
        }
        Err(e) => check_error(e, &[CACHE_PATH]),
    }
    if data.starts_with(&binary_cache::MAGIC[..7]) {
        return; // the binary form: its own target
    }
    match streamed(data) {
        Ok(flat) => match parsed {
            Ok((_, whole)) => assert_eq!(flat, whole, "the streaming reader and the parser read other sequences"),
            Err(e) => panic!("the streaming reader accepted what the parser refuses ({e})"),
        },
        Err(e) => check_error(&e, &[CACHE_PATH]),
    }
}

/// Every sequence of a cache through `CacheReader`, flat.
fn streamed(data: &[u8]) -> crate::error::Result<Vec<u32>> {
    let mut reader = CacheReader::from_bytes(CACHE_PATH, data)?;
    let (mut flat, mut seq) = (Vec::new(), Vec::new());
    while reader.next(&mut seq)?.is_some() {
        assert_eq!(seq.len(), reader.header().length, "a sequence of another length was given");
        flat.extend_from_slice(&seq);
    }
    Ok(flat)
}

/// A binary cache. Refused: one line naming the file. Opened: every row is
/// read in order (a bad row refused the same way, in order and at random);
/// read whole, each start's sequence is found through the index, and the
/// bytes are exactly those the writer writes for the header, starts and
/// rows read (a file is determined by what it holds).
pub fn binary(data: &[u8]) {
    let mut c = match BinaryCache::from_source(BINARY_PATH, data) {
        Ok(c) => c,
        Err(e) => return check_error(&e, &[BINARY_PATH]),
    };
    let (h, count) = (c.header().clone(), c.count());
    assert_eq!((h.version, h.starts_count), (2, Some(count)), "accepted a header that does not promise its sequences");
    let mut starts = Vec::with_capacity(count);
    if let Err(e) = c.for_each_start(|_, s| Ok(starts.push(s))) {
        panic!("the starts read at opening do not read again: {e}");
    }
    let (mut rows, mut seq) = (Vec::new(), Vec::new());
    loop {
        match c.next_row(&mut seq) {
            Ok(Some(k)) => {
                assert!(seq.len() == h.length && seq[0] == starts[k], "row {k}: {seq:?}");
                assert!(seq.iter().all(|&x| (x as usize) < h.num_items), "row {k} has an item past N: {seq:?}");
                rows.extend_from_slice(&seq);
            }
            Ok(None) => break,
            Err(e) => {
                check_error(&e, &[BINARY_PATH]);
                // Rows are read a chunk at a time: the bad one is in the chunk after those given.
                let given = rows.len() / h.length;
                let bad = (given..count).find(|&k| c.sequence_at(k, &mut seq).is_err());
                assert!(bad.is_some(), "a row refused in order is accepted at random ({e})");
                return;
            }
        }
    }
    for (k, &s) in starts.iter().enumerate() {
        let first = starts.iter().position(|&t| t == s).unwrap_or(k);
        match c.sequence_of(s, &mut seq) {
            Ok(found) => assert_eq!(found, Some(first), "the index of item {s}"),
            Err(e) => panic!("item {s}'s sequence, read in order, is refused at random: {e}"),
        }
        assert_eq!(seq, rows[first * h.length..(first + 1) * h.length]);
    }
    let mut again = Vec::new();
    if let Err(e) = binary_cache::write_head(&mut again, BINARY_PATH, c.part(), &starts) {
        panic!("what was read does not write back: {e}");
    }
    let _ = binary_cache::write_u32s(&mut again, &rows); // into memory: cannot fail
    assert!(again == data, "accepted bytes that the writer does not write for what they hold");
}

/// Where a fuzz input's meta file says `@CHECKSUM@`, the checksum of its shape
/// and .bin goes (a fuzzer cannot find a sha256; this way it reaches the
/// checks past it, and the accepting path).
pub const CHECKSUM_SLOT: &str = "@CHECKSUM@";

fn fill_checksum(meta: &[u8], bin: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(meta);
    if !text.contains(CHECKSUM_SLOT) {
        return meta.to_vec();
    }
    let shape = serde_json::from_slice::<serde_json::Value>(meta).ok().and_then(|v| {
        Some((v.get("num_items")?.as_u64()?, v.get("dim")?.as_u64()?))
    });
    match shape {
        Some((n, d)) => text.replacen(CHECKSUM_SLOT, &fp16_file::checksum(n, d, bin), 1).into_bytes(),
        None => meta.to_vec(),
    }
}

/// `embeddings_fp16.meta.json` and `embeddings_fp16.bin`: the input is the
/// meta file's bytes, a NUL byte, then the .bin's bytes.
pub fn fp16(data: &[u8]) {
    let (meta, bin) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let meta = fill_checksum(meta, bin);
    match fp16_file::parse(JSON_PATH, FP16_JSON_SHA, &meta, bin) {
        Ok(t) => {
            check_table(&t);
            assert_eq!(t.data.len() * 2, bin.len());
        }
        Err(e) => {
            let (bin_path, meta_path) = fp16_file::paths(JSON_PATH);
            check_error(&e, &[&bin_path, &meta_path, JSON_PATH])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of the kept corpus `fuzz/corpus/<target>/` through its
    /// target: the short fuzz run of `make test`, on the stable toolchain.
    fn replay(target: &str, check: fn(&[u8])) {
        let dir = format!("{}/fuzz/corpus/{target}", env!("CARGO_MANIFEST_DIR"));
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
        let mut count = 0;
        for entry in entries {
            let path = entry.expect("a corpus entry").path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let r = std::panic::catch_unwind(|| check(&bytes));
            assert!(r.is_ok(), "{target}: {} fails", path.display());
            count += 1;
        }
        // An empty or missing corpus would make this test pass vacuously.
        assert!(count >= 10, "{dir}: only {count} files");
    }

    #[test]
    fn corpus_embeddings_json() {
        replay("embeddings_json", embeddings_json);
    }

    #[test]
    fn corpus_cache() {
        replay("cache", cache);
    }

    #[test]
    fn corpus_fp16() {
        replay("fp16", fp16);
    }

    #[test]
    fn corpus_npy() {
        replay("npy", npy);
    }

    #[test]
    fn corpus_binary() {
        replay("binary", binary);
    }

    /// `fuzz/seeds/binary/`: the binary form of every cache of the kept
    /// `cache` corpus that reads, and of a few made here (a repeated start,
    /// no sequence, a part, fp16, sequences of one item, the longest
    /// version): the seeds of the binary target, which `cargo fuzz cmin`
    /// folds into its corpus. Run by hand, with `--ignored`.
    #[test]
    #[ignore = "writes the binary target's seeds"]
    fn write_binary_seeds() {
        use crate::cache::cache_io::{CacheWriter, Form};
        use crate::cache::cache_reader::read_all;
        use crate::cache::header::{PartHeader, Shard};
        use crate::cache::json::CacheHeader;
        let root = env!("CARGO_MANIFEST_DIR");
        let out = format!("{root}/fuzz/seeds/binary");
        std::fs::create_dir_all(&out).unwrap();
        let write = |name: &str, mut part: PartHeader, flat: &[u32]| {
            let starts: Vec<u32> = flat.iter().step_by(part.header.length).copied().collect();
            part.header = part.header.with_starts(starts.len(), &json::starts_sha256(&starts));
            let mut w = CacheWriter::create(&format!("{out}/{name}.bin"), &part, Form::Binary, &starts).unwrap();
            w.append(flat).unwrap();
            w.finish().unwrap();
        };
        let mut written = 0;
        for entry in std::fs::read_dir(format!("{root}/fuzz/corpus/cache")).unwrap() {
            let path = entry.unwrap().path();
            if let Ok((part, flat)) = read_all(&path.display().to_string()) {
                write(&path.file_name().unwrap().to_string_lossy(), part, &flat);
                written += 1;
            }
        }
        const SHA: &str = "8f05f88c600019b5e52dadd65706c25050b8ce43dc59ab6b861d899afa7914af";
        let made: [(&str, usize, &str, &[u32], usize, Option<(usize, usize)>); 7] = [
            ("repeated", 9, "fp32", &[5, 0, 7, 2, 5], 3, None),
            ("empty", 2, "fp32", &[], 1, None),
            ("two", 2, "fp32", &[1, 0], 2, None),
            ("fp16", 50, "fp16", &[3, 14, 15, 9, 26, 5], 5, None),
            ("part", 9, "fp32", &[5, 0, 7, 2, 8, 1, 4], 3, Some((1, 3))),
            ("ones", 3, "fp32", &[0, 1, 2, 2, 1, 0, 0, 0, 1, 2, 1, 1], 1, None),
            ("version", 4, "fp32", &[3, 2], 4, None),
        ];
        for (name, n, contract, all, length, shard) in made {
            let (starts, shard) = match shard {
                Some((i, count)) => {
                    let sh = Shard::new(i, count, all).unwrap();
                    (&all[sh.block().unwrap()], Some(sh))
                }
                None => (all, None),
            };
            let mut header = CacheHeader::new(contract, n, 3, length, SHA, starts);
            if name == "version" {
                header.divgpu_version = Some("9".repeat(64));
            }
            let flat: Vec<u32> = starts.iter().flat_map(|&s| (0..length as u32).map(move |k| (s + k) % n as u32)).collect();
            write(name, PartHeader { header, shard }, &flat);
            written += 1;
        }
        assert!(written >= 10, "only {written} seeds");
    }

    // Twins of the binary target's own checks.
    #[test]
    #[should_panic(expected = "names none")]
    fn a_binary_refusal_naming_another_file_is_caught() {
        check_error(&Error::input(CACHE_PATH, "bad"), &[BINARY_PATH]);
    }

    // Twins: the checks do catch what they are there to catch.
    #[test]
    #[should_panic(expected = "not one line")]
    fn a_two_line_error_is_caught() {
        check_error(&Error::input(JSON_PATH, "first\nsecond"), &[JSON_PATH]);
    }

    #[test]
    #[should_panic(expected = "names none")]
    fn an_error_naming_another_file_is_caught() {
        check_error(&Error::input("other.json", "bad"), &[JSON_PATH]);
    }

    #[test]
    fn the_checksum_slot_is_filled_from_the_meta_files_shape() {
        let bin = [0u8, 0x3c, 0, 0x40];
        let meta = br#"{"num_items":2,"dim":1,"shape_and_bin_sha256":"@CHECKSUM@"}"#;
        let filled = String::from_utf8(fill_checksum(meta, &bin)).unwrap();
        assert!(filled.contains(&fp16_file::checksum(2, 1, &bin)), "{filled}");
        // Twin: without the slot, the meta stays as it was.
        assert_eq!(fill_checksum(br#"{"num_items":2}"#, &bin), br#"{"num_items":2}"#);
    }

    #[test]
    #[should_panic(expected = "table holds")]
    fn a_table_of_the_wrong_size_is_caught() {
        let mut t = Table::from_rows("t", 2, 1, vec![1.0, 2.0], None).expect("a valid table");
        t.n = 3;
        t.inv_norm.push(1.0);
        check_table(&t);
    }
}
