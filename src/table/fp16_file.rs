//! `embeddings_fp16.bin` and its meta file (docs/formats.md#fp16-files): the
//! FP16 rounding of a table (`contract::fp16`) stored, checked and read back.

use std::io::Read;

use half::f16;
use sha2::{Digest, Sha256};

use crate::contract::fp16::{to_fp16, widen};
use crate::contract::table::Table;
use crate::durable::atomic::write_atomically;
use crate::durable::safe_write::{check_files, Named};
use crate::error::{Error, Result};
use crate::table::fp16_shape::json_shape;
use crate::util::hex;

pub const BIN_NAME: &str = "embeddings_fp16.bin";
pub const META_NAME: &str = "embeddings_fp16.meta.json";

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Fp16Meta {
    pub format: String,
    pub num_items: usize,
    pub dim: usize,
    /// sha256 of the embeddings.json the .bin was made from.
    pub embeddings_sha256: String,
    /// `checksum(num_items, dim, .bin)`: binds the shape to the halves, so
    /// an edited shape (1200 x 32 for a 600 x 64 table: the same size) or an
    /// altered .bin is refused on load. Absent in the files of older divgpus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape_and_bin_sha256: Option<String>,
}

/// sha256 of the shape (N, then D, as little-endian u64) followed by the
/// .bin's bytes.
pub fn checksum(num_items: u64, dim: u64, bin: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(num_items.to_le_bytes());
    h.update(dim.to_le_bytes());
    h.update(bin);
    hex(&h.finalize())
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
    let (bin, meta_path) = paths(json_path);
    check_files(
        &[Named { option: "convert-fp16: the .bin", path: &bin }, Named { option: "convert-fp16: the meta file", path: &meta_path }],
        &[Named { option: "the table", path: json_path }],
        false,
    )?;
    let table = crate::table::table_file::load(json_path)?;
    let halves = to_fp16(&table)?;
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
        shape_and_bin_sha256: Some(checksum(table.n as u64, table.dim as u64, &bytes)),
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
    let meta_text = read_meta(json_path, &bin, &meta_path)?;
    let json = std::fs::read(json_path).map_err(|e| Error::io(json_path, e))?;
    let sha = hex(&Sha256::digest(&json));
    let (meta, expected) = check_meta(json_path, &bin, &meta_path, &meta_text, &sha)?;
    let mut file = std::fs::File::open(&bin).map_err(|_| missing(json_path, &bin, "the file is missing"))?;
    let size = file.metadata().map_err(|e| Error::io(&bin, e))?.len();
    check_size(json_path, &bin, &meta, size, expected)?;
    // One copy: straight from the file into the u16 table.
    let mut halves = vec![0u16; meta.num_items * meta.dim];
    file.read_exact(bytemuck::cast_slice_mut(&mut halves)).map_err(|e| Error::io(&bin, e))?;
    check_checksum(json_path, &bin, &meta_path, &meta, bytemuck::cast_slice(&halves))?;
    // After the checksum (an edited shape is said as such): a shape edited
    // with its checksum recomputed is caught only here.
    check_shape(json_path, &meta_path, &meta, &json)?;
    if cfg!(target_endian = "big") {
        halves.iter_mut().for_each(|h| *h = u16::from_le(*h));
    }
    finish(json_path, &bin, &meta, &halves, sha)
}

/// `load` on bytes in memory: the meta file's and the .bin's, for a JSON
/// whose sha256 is `json_sha` (the fuzz targets' entry point).
pub fn parse(json_path: &str, json_sha: &str, meta_text: &[u8], bin_bytes: &[u8]) -> Result<Table> {
    let (bin, meta_path) = paths(json_path);
    let (meta, expected) = check_meta(json_path, &bin, &meta_path, meta_text, json_sha)?;
    check_size(json_path, &bin, &meta, bin_bytes.len() as u64, expected)?;
    check_checksum(json_path, &bin, &meta_path, &meta, bin_bytes)?;
    let halves: Vec<u16> = bin_bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    finish(json_path, &bin, &meta, &halves, json_sha.to_string())
}

/// The longest meta file read (divgpu's are about 300 bytes).
const META_LIMIT: u64 = 64 << 10;

/// The meta file's bytes, read with a bound: what is not a regular file (a
/// FIFO, `/dev/zero`, a folder) is refused before a byte is read, and so is
/// one over `META_LIMIT`. Opened without blocking, so a FIFO is not waited on.
fn read_meta(json_path: &str, bin: &str, meta_path: &str) -> Result<Vec<u8>> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(meta_path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => missing(json_path, bin, &format!("{META_NAME} is missing")),
            _ => Error::io(meta_path, e),
        })?;
    let kind = file.metadata().map_err(|e| Error::io(meta_path, e))?.file_type();
    let what = if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a folder")
    } else if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device node")
    } else {
        Some("not a file")
    };
    if let Some(what) = what {
        let msg = format!("{what}, not a regular file: an fp16 meta file is a small JSON file");
        return Err(Error::input(meta_path, msg));
    }
    let mut text = Vec::new();
    file.take(META_LIMIT + 1).read_to_end(&mut text).map_err(|e| Error::io(meta_path, e))?;
    if text.len() as u64 > META_LIMIT {
        return Err(Error::input(meta_path, format!("larger than {META_LIMIT} bytes: not an fp16 meta file")));
    }
    Ok(text)
}

/// The meta file's shape against the JSON table's real one (counted, not
/// stored): the checksum binds the shape to the halves but is unkeyed, so a
/// meta edited to 600 x 8 for a 300 x 16 table, its checksum recomputed, is
/// caught only here.
fn check_shape(json_path: &str, meta_path: &str, meta: &Fp16Meta, json: &[u8]) -> Result<()> {
    // The table a .npy's fp16 files were made from: its header has the shape.
    let (n, dim) = match crate::table::table_file::TableFormat::of(json_path) {
        Some(crate::table::table_file::TableFormat::Npy) => {
            let t = crate::table::npy::parse(json_path, json, None)?;
            (t.n, t.dim)
        }
        _ => json_shape(json_path, json)?,
    };
    if (n, dim) != (meta.num_items, meta.dim) {
        return Err(Error::input(
            meta_path,
            format!(
                "records a table of {} x {}, but {json_path} is {n} x {dim}: edited or damaged; \
                 run 'divgpu convert-fp16 {json_path}' again",
                meta.num_items, meta.dim
            ),
        ));
    }
    Ok(())
}

fn missing(json_path: &str, bin: &str, what: &str) -> Error {
    Error::input(bin, format!("{what}; run 'divgpu convert-fp16 {json_path}' to make it"))
}

/// The meta file, checked against the JSON's sha256, and the .bin size it implies.
fn check_meta(json_path: &str, bin: &str, meta_path: &str, meta_text: &[u8], sha: &str) -> Result<(Fp16Meta, u64)> {
    let meta: Fp16Meta =
        serde_json::from_slice(meta_text).map_err(|e| Error::input(meta_path, format!("not a valid meta file: {e}")))?;
    if !sha.eq_ignore_ascii_case(&meta.embeddings_sha256) {
        // {:?}: the meta file's text, quoted and escaped, keeps the error on one line.
        return Err(missing(
            json_path,
            bin,
            &format!(
                "stale: {json_path} changed after the conversion (sha256 {sha}, the .bin was made from {:?})",
                meta.embeddings_sha256
            ),
        ));
    }
    // Checked: a meta file claiming 2^63 items must not wrap to a small size
    // that a short .bin matches. At most isize::MAX bytes, so n * dim halves
    // can then be allocated without overflow.
    let expected = (meta.num_items as u64)
        .checked_mul(meta.dim as u64)
        .and_then(|halves| halves.checked_mul(2))
        .filter(|&bytes| bytes <= isize::MAX as u64)
        .ok_or_else(|| {
            Error::input(meta_path, format!("{} x {} halves do not fit in memory", meta.num_items, meta.dim))
        })?;
    Ok((meta, expected))
}

/// The shape and the .bin's bytes against the meta file's checksum.
fn check_checksum(json_path: &str, bin: &str, meta_path: &str, meta: &Fp16Meta, bin_bytes: &[u8]) -> Result<()> {
    let again = format!("run 'divgpu convert-fp16 {json_path}' again");
    let Some(recorded) = &meta.shape_and_bin_sha256 else {
        return Err(Error::input(meta_path, format!("made by an older divgpu (no shape_and_bin_sha256): {again}")));
    };
    if checksum(meta.num_items as u64, meta.dim as u64, bin_bytes) != *recorded {
        return Err(Error::input(
            meta_path,
            format!(
                "the shape it records ({} x {}) and {bin} do not match its shape_and_bin_sha256: one of them was edited \
                 or damaged; {again}",
                meta.num_items, meta.dim
            ),
        ));
    }
    Ok(())
}

fn check_size(json_path: &str, bin: &str, meta: &Fp16Meta, size: u64, expected: u64) -> Result<()> {
    if size != expected {
        return Err(missing(
            json_path,
            bin,
            &format!("{size} bytes, but {} x {} halves need {expected}: mis-sized or truncated", meta.num_items, meta.dim),
        ));
    }
    Ok(())
}

/// Refuses a non-finite half, then widens.
fn finish(json_path: &str, bin: &str, meta: &Fp16Meta, halves: &[u16], sha: String) -> Result<Table> {
    if let Some(i) = halves.iter().position(|&h| f16::from_bits(h).is_infinite() || f16::from_bits(h).is_nan()) {
        return Err(Error::input(bin, format!("row {}, column {}: not a finite half", i / meta.dim, i % meta.dim)));
    }
    widen(json_path, meta.num_items, meta.dim, halves, sha)
}

#[cfg(test)]
mod file_tests {
    use super::*;

    const SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    /// A meta file whose checksum is that of the shape `n` x `dim` and `bin`
    /// (where both are numbers; "x" where they are not).
    fn meta_of(n: &str, dim: &str, sha: &str, bin: &[u8]) -> String {
        let sum = match (n.parse::<u64>(), dim.parse::<u64>()) {
            (Ok(n), Ok(d)) => checksum(n, d, bin),
            _ => "x".into(),
        };
        format!(r#"{{"format":"divgpu-fp16","num_items":{n},"dim":{dim},"embeddings_sha256":"{sha}","shape_and_bin_sha256":"{sum}"}}"#)
    }

    fn meta(n: &str, dim: &str, sha: &str) -> String {
        meta_of(n, dim, sha, &[])
    }

    fn halves(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|&x| f16::from_f32(x).to_bits().to_le_bytes()).collect()
    }

    fn err(meta: &str, bin: &[u8]) -> String {
        match parse("e.json", SHA, meta.as_bytes(), bin) {
            Ok(t) => panic!("accepted a {}x{} table", t.n, t.dim),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_good_pair_reads_back() -> Result<()> {
        let bin = halves(&[1.0, 2.0, -0.5, 4.0]);
        let t = parse("e.json", SHA, meta_of("2", "2", SHA, &bin).as_bytes(), &bin)?;
        assert_eq!((t.n, t.dim, t.data), (2, 2, vec![1.0, 2.0, -0.5, 4.0]));
        Ok(())
    }

    // Once, the meta's N x D was trusted (a meta saying 1200 x 32 for a
    // 600 x 64 table, the same size, gave a cache claiming 1200 x 32).
    #[test]
    fn an_edited_shape_or_bin_is_refused_naming_the_meta_file() {
        let bin = halves(&[1.0, 2.0, -0.5, 4.0, 3.0, 1.5]);
        let good = meta_of("3", "2", SHA, &bin);
        let reshaped = good.replacen("\"num_items\":3,\"dim\":2", "\"num_items\":2,\"dim\":3", 1);
        let e = err(&reshaped, &bin);
        assert!(e.starts_with("embeddings_fp16.meta.json: the shape it records (2 x 3) and embeddings_fp16.bin do not match"), "{e}");
        let mut flipped = bin.clone();
        flipped[3] ^= 0x01;
        assert!(err(&good, &flipped).contains("do not match its shape_and_bin_sha256"));
        let old = good.replacen(&format!(",\"shape_and_bin_sha256\":\"{}\"", checksum(3, 2, &bin)), "", 1);
        assert!(err(&old, &bin).contains("made by an older divgpu"), "{}", err(&old, &bin));
        // Twin: the pair as written reads back as 3 x 2.
        assert_eq!(parse("e.json", SHA, good.as_bytes(), &bin).map(|t| (t.n, t.dim)).ok(), Some((3, 2)));
    }

    // Found by the fuzzer (fp16 target, after 342,722 executions): the meta
    // file's sha256 went into the stale-file error as it was, so a "\r" in it
    // (the JSON escape) split the error in two lines.
    #[test]
    fn a_line_break_in_the_meta_sha256_stays_escaped() {
        let e = err(&meta("3", "384", &format!("{}\\r{}", &SHA[..50], &SHA[51..])), &[]);
        assert!(e.contains("stale") && !e.contains(['\n', '\r']), "{e:?}");
    }

    // Found by review: N x D x 2 was an unchecked u64 product; 2^63 x 2
    // wrapped to 0 bytes, an empty .bin matched it, and sizing a table of
    // 2^63 rows panicked (capacity overflow; an overflow panic where overflow
    // checks are on).
    #[test]
    fn a_size_that_wraps_is_an_error() {
        let e = err(&meta("9223372036854775808", "2", SHA), &[]);
        assert!(e.contains("do not fit in memory"), "{e}");
    }

    // A header claiming 1e12 rows is refused on the size before anything is
    // allocated for them (load() compares the file's size the same way).
    #[test]
    fn a_huge_header_is_refused_before_any_allocation() {
        let e = err(&meta("1000000000000", "384", SHA), &[0; 4]);
        assert!(e.contains("mis-sized or truncated"), "{e}");
    }

    /// A table of 6 x 2 beside its fp16 files, in a new folder; the JSON's path.
    fn converted(test: &str) -> String {
        let dir = crate::test_support::tmp("fp16", test);
        let json = dir.join("embeddings.json").display().to_string();
        let t = Table::from_rows("t", 6, 2, (1..=12).map(|x| x as f32).collect(), None).unwrap();
        t.write_json(&json).unwrap();
        convert(&json).unwrap();
        json
    }

    // Found by an adversary's round: the checksum binds the shape to the halves but is
    // unkeyed; a meta edited to 3 x 4 for a 6 x 2 table, its checksum
    // recomputed, gave a cache of the edited shape. The JSON's real shape decides.
    #[test]
    fn a_meta_of_another_shape_than_the_json_is_refused() {
        let json = converted("shape");
        let (bin, meta_path) = paths(&json);
        assert_eq!(load(&json).map(|t| (t.n, t.dim)).ok(), Some((6, 2)), "twin: the pair as written");
        let bytes = std::fs::read(&bin).unwrap();
        let mut meta: Fp16Meta = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
        (meta.num_items, meta.dim) = (3, 4);
        meta.shape_and_bin_sha256 = Some(checksum(3, 4, &bytes));
        std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
        let e = load(&json).err().expect("refused").to_string();
        assert!(e.contains("records a table of 3 x 4") && e.contains("is 6 x 2"), "{e}");
    }

    // Item 17: the meta file is read with a bound, and only a regular file:
    // /dev/zero was read until memory ran out, a FIFO waited on for ever.
    #[test]
    fn a_meta_that_is_not_a_small_regular_file_is_refused() {
        let json = converted("bounded");
        let (_, meta_path) = paths(&json);
        std::fs::remove_file(&meta_path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &meta_path).unwrap();
        let e = load(&json).err().expect("refused").to_string();
        assert!(e.contains("a device node, not a regular file"), "{e}");
        std::fs::remove_file(&meta_path).unwrap();
        std::fs::write(&meta_path, vec![b' '; (META_LIMIT + 1) as usize]).unwrap();
        let e = load(&json).err().expect("refused").to_string();
        assert!(e.contains("larger than"), "{e}");
    }

}
