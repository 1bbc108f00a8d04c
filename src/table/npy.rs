//! NumPy `.npy` tables: little-endian float32 (`'<f4'`), C order, shape
//! (N, D), format version 1.0, 2.0 or 3.0. The header is read by
//! `npy_header` (by hand, for the reasons given there); the values are read
//! straight into the table's f32 buffer (no per-value parsing, no second
//! copy) while one thread hashes them and another validates them, with the
//! rules and messages of the JSON loader (`table::RowCheck`).
//!
//! Titles, ids and the model name come from a sidecar `X.titles.json` next to
//! `X.npy`: `{"model": ..., "ids": [...], "titles": [...],
//! "embeddings_sha256": ...}`, every field optional (ids may be strings or
//! numbers, as in `embeddings.json`); `embeddings_sha256`, when given, must be
//! the sha256 of `X.npy`, so a sidecar left from another table is refused. No
//! sidecar: no titles. The table's `sha256` is that of the `.npy` file's bytes.

use std::io::{self, Read, Write};

use sha2::Digest;

use crate::durable::atomic::write_atomically;
use crate::durable::hashing::{Hashing, HashingWriter};
use crate::table::npy_header;
use crate::contract::table::{check_labels, RowCheck, Table};
use crate::table::json::Id;
use crate::util::hex;
use crate::error::{Error, Result};

/// The values are read and checked in pieces of about this many bytes.
const CHUNK_BYTES: usize = 4 << 20;

/// `X.titles.json` for `X.npy` (the name less its `.npy`, then `.titles.json`).
pub fn sidecar_path(npy_path: &str) -> String {
    let stem = match npy_path.len().checked_sub(4) {
        Some(i) if npy_path.is_char_boundary(i) && npy_path[i..].eq_ignore_ascii_case(".npy") => &npy_path[..i],
        _ => npy_path,
    };
    format!("{stem}.titles.json")
}

/// Loads `path` (a `.npy` file) and its sidecar if there is one.
pub fn load(path: &str) -> Result<Table> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let side_path = sidecar_path(path);
    let sidecar = match std::fs::read(&side_path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(side_path, e)),
    };
    read_table(path, file, size, sidecar.as_deref())
}

/// `load` on bytes in memory: the `.npy` file's and, if any, its sidecar's
/// (the fuzz target's entry point).
pub fn parse(path: &str, npy: &[u8], sidecar: Option<&[u8]>) -> Result<Table> {
    read_table(path, npy, npy.len() as u64, sidecar)
}

/// What the sidecar holds; unknown fields are ignored (as `embeddings.json`'s).
#[derive(serde::Deserialize)]
struct Sidecar {
    model: Option<String>,
    ids: Option<Vec<Id>>,
    titles: Option<Vec<String>>,
    embeddings_sha256: Option<String>,
}

/// The sidecar as it is written (`write`).
#[derive(serde::Serialize)]
struct SidecarOut<'a> {
    model: &'a Option<String>,
    embeddings_sha256: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ids: &'a Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    titles: &'a Option<Vec<String>>,
}

fn read_table<R: Read + Send>(path: &str, reader: R, size: u64, sidecar: Option<&[u8]>) -> Result<Table> {
    if size == 0 {
        return Err(Error::input(path, "the file is empty"));
    }
    let mut src = Hashing::new(reader);
    let (n, dim) = read_header(path, &mut src, size)?;
    // The size first: RowCheck allocates for N rows.
    check_data_size(path, n, dim, size - src.count)?;
    let mut check = RowCheck::new(path, n, dim)?;
    // The sidecar is read before the values, so a wrong one is refused at once.
    let side_path = sidecar_path(path);
    let labels = sidecar.map(|bytes| read_sidecar(&side_path, bytes, path, n)).transpose()?;
    let (data, sha256) = read_rows(path, src, &mut check, n, dim)?;
    let inv_norm = check.finish()?;
    let mut table = Table { path: path.to_string(), n, dim, data, inv_norm, sha256, model: None, ids: None, titles: None };
    if let Some(side) = labels {
        if let Some(expected) = &side.embeddings_sha256 {
            if *expected != table.sha256 {
                // {:?}: the sidecar's text, quoted and escaped, keeps the error on one line.
                return Err(Error::input(
                    side_path,
                    format!("made for another .npy (embeddings_sha256 {expected:?}), not {path} (sha256 {})", table.sha256),
                ));
            }
        }
        table.model = side.model;
        table.ids = side.ids.map(|ids| ids.into_iter().map(Id::into_text).collect());
        table.titles = side.titles;
    }
    Ok(table)
}

/// Reads and checks the header (`npy_header`) and returns (N, D);
/// `src.count` is then the header's length.
fn read_header<R: Read>(path: &str, src: &mut Hashing<R>, size: u64) -> Result<(usize, usize)> {
    let not_npy = || Error::input(path, "not a .npy file (it does not start with the \\x93NUMPY magic)");
    let mut prefix = [0u8; 12];
    if read_up_to(src, &mut prefix[..8]).map_err(|e| Error::io(path, e))? < 8 || prefix[..6] != npy_header::MAGIC[..] {
        return Err(not_npy());
    }
    let field = npy_header::length_field_size(prefix[6], prefix[7]).map_err(|why| Error::input(path, why))?;
    let truncated = || Error::input(path, format!("the file is truncated inside its header ({size} bytes)"));
    if read_up_to(src, &mut prefix[8..8 + field]).map_err(|e| Error::io(path, e))? < field {
        return Err(truncated());
    }
    // The little-endian u16 or u32 after the version.
    let text_len = prefix[8..8 + field].iter().rev().fold(0u64, |v, &b| v << 8 | u64::from(b));
    // Compared with the file's size before the text is allocated.
    if 8 + field as u64 + text_len > size {
        return Err(truncated());
    }
    let mut text = vec![0u8; usize::try_from(text_len).map_err(|_| truncated())?];
    src.read_exact(&mut text).map_err(|e| Error::io(path, e))?;
    let header = npy_header::parse(&text).map_err(|why| Error::input(path, format!("not a readable .npy header: {why}")))?;
    check_header(path, &header)
}

/// (N, D) of a header that describes a C-order little-endian float32 table.
fn check_header(path: &str, header: &npy_header::Header) -> Result<(usize, usize)> {
    // escape_debug: the file's own text, escaped, keeps the error on one line.
    match header.descr.as_str() {
        "<f4" => {}
        ">f4" => {
            return Err(Error::input(
                path,
                "values are big-endian float32 ('>f4'): only little-endian float32 ('<f4') is read; save a.astype('<f4')",
            ))
        }
        descr => {
            let hint = if descr == "<f8" { " (float64)" } else { "" };
            return Err(Error::input(
                path,
                format!("values are '{}'{hint}: only float32 ('<f4') tables are read; save a.astype('<f4')", descr.escape_debug()),
            ));
        }
    }
    if header.fortran_order {
        return Err(Error::input(
            path,
            "fortran_order is True: only C-order (row-major) tables are read; save np.ascontiguousarray(a)",
        ));
    }
    let shape = &header.shape;
    let &[n, dim] = shape.as_slice() else {
        return Err(Error::input(
            path,
            format!("the array has {} dimension(s), shape {shape:?}: a table is 2-D (items x dimensions)", shape.len()),
        ));
    };
    let too_big = || Error::input(path, format!("shape ({n}, {dim}) does not fit in memory"));
    Ok((usize::try_from(n).map_err(|_| too_big())?, usize::try_from(dim).map_err(|_| too_big())?))
}

/// Refuses a data section that is not exactly N x D float32 values, before
/// anything is allocated for them.
fn check_data_size(path: &str, n: usize, dim: usize, data_bytes: u64) -> Result<()> {
    let expected = (n as u64)
        .checked_mul(dim as u64)
        .and_then(|values| values.checked_mul(4))
        .filter(|&bytes| bytes <= isize::MAX as u64)
        .ok_or_else(|| Error::input(path, format!("shape ({n}, {dim}) does not fit in memory")))?;
    if data_bytes < expected {
        return Err(Error::input(
            path,
            format!("the file is truncated: shape ({n}, {dim}) needs {expected} bytes of values after the header, it has {data_bytes}"),
        ));
    }
    if data_bytes > expected {
        return Err(Error::input(
            path,
            format!("{} bytes follow the ({n}, {dim}) values: not a single float32 array", data_bytes - expected),
        ));
    }
    Ok(())
}

/// Reads the N x D values into one buffer, in pieces, with two scoped
/// threads: one reads piece after piece, one hashes each piece read (going
/// on from the header's hash), while this thread checks them; the three
/// overlap, so a load costs about the slowest of them (the sha256 on a fast
/// disk). Returns the values and the sha256 of the whole file.
fn read_rows<R: Read + Send>(
    path: &str,
    src: Hashing<R>,
    check: &mut RowCheck,
    n: usize,
    dim: usize,
) -> Result<(Vec<f32>, String)> {
    let Hashing { inner: mut reader, mut hasher, .. } = src;
    let mut data = vec![0f32; n * dim];
    let rows_per_chunk = (CHUNK_BYTES / (4 * dim)).max(1);
    let (read, hashed, checked) = std::thread::scope(|scope| {
        let (to_check, pieces) = std::sync::mpsc::sync_channel::<(usize, &[f32])>(2);
        let (to_hash, hash_pieces) = std::sync::mpsc::sync_channel::<&[f32]>(2);
        let chunks = data.chunks_mut(rows_per_chunk * dim);
        let reading = scope.spawn(move || -> io::Result<()> {
            for (k, chunk) in chunks.enumerate() {
                reader.read_exact(bytemuck::cast_slice_mut(chunk))?;
                if cfg!(target_endian = "big") {
                    chunk.iter_mut().for_each(|x| *x = f32::from_bits(u32::from_le(x.to_bits())));
                }
                let piece: &[f32] = chunk;
                // A closed channel: the checker found a bad row and stopped.
                if to_hash.send(piece).is_err() || to_check.send((k * rows_per_chunk, piece)).is_err() {
                    break;
                }
            }
            Ok(())
        });
        let hashing = scope.spawn(move || {
            for piece in hash_pieces {
                if cfg!(target_endian = "little") {
                    hasher.update(bytemuck::cast_slice::<f32, u8>(piece));
                } else {
                    piece.iter().for_each(|x| hasher.update(x.to_le_bytes()));
                }
            }
            hasher
        });
        let mut checked = Ok(());
        for (first_row, piece) in pieces {
            checked = check.rows(first_row, piece);
            if checked.is_err() {
                break;
            }
        }
        (reading.join(), hashing.join(), checked)
    });
    // A bad row comes before any later read failure in the file.
    checked?;
    let thread_failed = |_| Error::input(path, "a reading thread failed");
    read.map_err(thread_failed)?.map_err(|e| Error::io(path, e))?;
    let hasher = hashed.map_err(thread_failed)?;
    Ok((data, hex(&hasher.finalize())))
}

fn read_sidecar(side_path: &str, bytes: &[u8], npy_path: &str, n: usize) -> Result<Sidecar> {
    let side: Sidecar = serde_json::from_slice(bytes)
        .map_err(|e| Error::input(side_path, format!("not a titles file for {npy_path}: {e}")))?;
    check_labels(side_path, n, side.ids.as_ref().map(Vec::len), side.titles.as_ref().map(Vec::len))?;
    Ok(side)
}

/// Writes `table` as `path` (.npy, a version 1.0 header) and its
/// sidecar, each atomically. The sidecar is always written (with the npy's
/// sha256), so one left from an earlier table never labels this one.
pub fn write(table: &Table, path: &str) -> Result<()> {
    let mut sha256 = String::new();
    write_atomically(path, |w| {
        let mut out = HashingWriter::new(w);
        out.write_all(&npy_header::format(&[table.n as u64, table.dim as u64]))?;
        if cfg!(target_endian = "little") {
            out.write_all(bytemuck::cast_slice(&table.data))?;
        } else {
            for x in &table.data {
                out.write_all(&x.to_le_bytes())?;
            }
        }
        sha256 = hex(&out.hasher.finalize());
        Ok(())
    })?;
    let sidecar = SidecarOut { model: &table.model, embeddings_sha256: &sha256, ids: &table.ids, titles: &table.titles };
    write_atomically(&sidecar_path(path), |w| {
        serde_json::to_writer(&mut *w, &sidecar)?;
        w.write_all(b"\n")?;
        Ok(())
    })
}

/// Fills `buf` as far as the reader goes (a short file is not an error here).
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Sha256;
    use crate::test_support::tmp;

    /// A `.npy` file made by hand (so versions 2 and 3 and every refusal can
    /// be written): the header dict padded to 64 bytes, then `values`.
    fn npy_file(version: u8, dict: &str, values: &[u8]) -> Vec<u8> {
        let pre = if version == 1 { 10 } else { 12 };
        let mut text = dict.to_string();
        while (pre + text.len() + 1) % 64 != 0 {
            text.push(' ');
        }
        text.push('\n');
        let mut out = b"\x93NUMPY".to_vec();
        out.extend([version, 0]);
        if version == 1 {
            out.extend((text.len() as u16).to_le_bytes());
        } else {
            out.extend((text.len() as u32).to_le_bytes());
        }
        out.extend(text.as_bytes());
        out.extend(values);
        out
    }

    fn dict(descr: &str, fortran: &str, shape: &str) -> String {
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}")
    }

    fn le(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    const VALUES: [f32; 6] = [1.0, -0.5, 0.25, 3.0, 1e-40, -2.0];

    fn good(version: u8) -> Vec<u8> {
        npy_file(version, &dict("<f4", "False", "(3, 2)"), &le(&VALUES))
    }

    fn err(bytes: &[u8]) -> String {
        match parse("t.npy", bytes, None) {
            Ok(t) => panic!("accepted a {}x{} table", t.n, t.dim),
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.starts_with("t.npy: ") && !msg.contains(['\n', '\r']), "{msg:?}");
                msg
            }
        }
    }

    #[test]
    fn versions_1_2_and_3_read_the_same_values_and_hash_the_file() -> Result<()> {
        for version in [1, 2, 3] {
            let bytes = good(version);
            let t = parse("t.npy", &bytes, None)?;
            assert_eq!((t.n, t.dim), (3, 2));
            assert_eq!(t.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), VALUES.map(f32::to_bits).to_vec());
            assert_eq!(t.inv_norm[0], crate::contract::table::inv_norm_of(&VALUES[..2]));
            assert_eq!(t.sha256, hex(&Sha256::digest(&bytes)));
            assert!(t.titles.is_none() && t.ids.is_none() && t.model.is_none());
        }
        Ok(())
    }

    // Twin: one value changed is another table, with another sha256.
    #[test]
    fn one_value_changed_changes_the_sha256() -> Result<()> {
        let mut changed = VALUES;
        changed[3] = f32::from_bits(changed[3].to_bits() + 1);
        let a = parse("t.npy", &good(1), None)?;
        let b = parse("t.npy", &npy_file(1, &dict("<f4", "False", "(3, 2)"), &le(&changed)), None)?;
        assert_ne!(a.sha256, b.sha256);
        assert_ne!(a.data, b.data);
        Ok(())
    }

    #[test]
    fn other_dtypes_orders_and_shapes_are_refused() {
        let v = le(&VALUES);
        assert!(err(&npy_file(1, &dict("<f8", "False", "(3, 1)"), &v)).contains("'<f8' (float64): only float32"));
        assert!(err(&npy_file(1, &dict(">f4", "False", "(3, 2)"), &v)).contains("big-endian"));
        assert!(err(&npy_file(1, &dict("<i4", "False", "(3, 2)"), &v)).contains("'<i4'"));
        assert!(err(&npy_file(1, &dict("<f4", "True", "(3, 2)"), &v)).contains("fortran_order is True"));
        assert!(err(&npy_file(1, &dict("<f4", "False", "(6,)"), &v)).contains("1 dimension(s)"));
        assert!(err(&npy_file(1, &dict("<f4", "False", "(1, 3, 2)"), &v)).contains("3 dimension(s)"));
    }

    #[test]
    fn truncated_padded_and_foreign_files_are_refused() {
        let bytes = good(1);
        assert!(err(&bytes[..bytes.len() - 1]).contains("the file is truncated: shape (3, 2) needs 24 bytes"));
        assert!(err(&[&bytes[..], &[0]].concat()).contains("1 bytes follow"));
        assert!(err(&bytes[..20]).contains("truncated inside its header"));
        assert!(err(b"").contains("the file is empty"));
        assert!(err(b"[[1, 2], [3, 4]]").contains("not a .npy file (it does not start with the \\x93NUMPY magic)"));
        assert!(err(&good(1)[..8]).contains("truncated inside its header"));
        // Found by the fuzzer (npy target, in its first minute): a file of
        // fewer than 8 bytes sliced the header prefix past its end (a panic).
        assert!(err(&good(1)[..5]).contains("not a .npy file"));
        assert!(err(b"\0").contains("not a .npy file"));
        let mut v4 = good(2);
        v4[6] = 4;
        assert!(err(&v4).contains("format version 4.0 is not read (1.0, 2.0 and 3.0 are)"));
        let mut garbled = good(1);
        garbled[20] = b'?';
        assert!(err(&garbled).contains("not a readable .npy header: byte 10 of the header text is '?'"));
        // A header that states 4 GiB of text in a 100-byte file: refused
        // before the text is allocated.
        let mut huge = good(2);
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(err(&huge).contains("truncated inside its header"));
        // A shape of 2^40 rows in a small file: refused on the size, before
        // the values are allocated.
        assert!(err(&npy_file(1, &dict("<f4", "False", "(1099511627776, 384)"), &[])).contains("is truncated"));
        assert!(err(&npy_file(1, &dict("<f4", "False", "(18446744073709551615, 2)"), &[])).contains("does not fit"));
    }

    #[test]
    fn bad_values_are_refused_with_the_json_loaders_messages() {
        let file = |values: &[f32], shape: &str| npy_file(1, &dict("<f4", "False", shape), &le(values));
        assert!(err(&file(&[1.0, 2.0, 3.0, f32::NAN], "(2, 2)")).ends_with("row 1, column 1: value is not finite"));
        assert!(err(&file(&[1.0, f32::INFINITY, 3.0, 1.0], "(2, 2)")).ends_with("row 0, column 1: value is not finite"));
        assert!(err(&file(&[1.0, 2.0, 0.0, -0.0], "(2, 2)")).contains("row 1 is all zeros"));
        assert!(err(&file(&[1.0, 2.0], "(1, 2)")).contains("at least 2 are needed"));
        assert!(err(&file(&[], "(2, 0)")).contains("dimension 0"));
        assert!(err(&file(&[1.0, 3e38], "(2, 1)")).contains("could overflow f32"));
        // The same rules as embeddings.json.
        let json = Table::parse_json("t.npy", b"[[1, 2], [0, 0]]").err().map(|e| e.to_string());
        assert_eq!(json, Some(err(&file(&[1.0, 2.0, 0.0, 0.0], "(2, 2)"))));
    }

    /// Rows of `dim` values, row j = (j + 1, 1, 1, ...): enough rows for
    /// several pieces of CHUNK_BYTES.
    fn many_rows(n: usize, dim: usize) -> Vec<f32> {
        (0..n * dim).map(|i| if i % dim == 0 { (i / dim + 1) as f32 } else { 1.0 }).collect()
    }

    #[test]
    fn a_bad_row_in_a_later_piece_is_named_by_its_row_in_the_file() -> Result<()> {
        let (n, dim) = (8000, 384); // 12 MB: three pieces
        let mut values = many_rows(n, dim);
        let shape = format!("({n}, {dim})");
        let t = parse("t.npy", &npy_file(1, &dict("<f4", "False", &shape), &le(&values)), None)?;
        assert_eq!(t.data, values);
        assert_eq!(t.inv_norm.len(), n);
        assert_eq!(t.inv_norm[7777], crate::contract::table::inv_norm_of(&values[7777 * dim..7778 * dim]));
        // Twin: the same table with one value broken late in the file.
        values[6543 * dim + 17] = f32::NAN;
        let e = err(&npy_file(1, &dict("<f4", "False", &shape), &le(&values)));
        assert!(e.ends_with("row 6543, column 17: value is not finite"), "{e}");
        Ok(())
    }

    #[test]
    fn the_sidecar_gives_titles_ids_and_model() -> Result<()> {
        let side = br#"{"model": "m", "ids": [7, "b", 2.5], "titles": ["x", "y", "z"], "texts": ["ignored"]}"#;
        let t = parse("t.npy", &good(1), Some(side))?;
        assert_eq!(t.model.as_deref(), Some("m"));
        assert_eq!(t.ids, Some(vec!["7".to_string(), "b".to_string(), "2.5".to_string()]));
        assert_eq!(t.titles, Some(vec!["x".to_string(), "y".to_string(), "z".to_string()]));
        Ok(())
    }

    #[test]
    fn a_wrong_sidecar_is_refused_naming_it() {
        let side_err = |side: &str| match parse("d/t.npy", &good(1), Some(side.as_bytes())) {
            Ok(_) => panic!("accepted sidecar {side}"),
            Err(e) => e.to_string(),
        };
        let e = side_err(r#"{"titles": ["x", "y"]}"#);
        assert_eq!(e, "d/t.titles.json: \"titles\" has 2 entries but there are 3 rows");
        assert!(side_err(r#"{"ids": [1, 2, 3, 4]}"#).contains("\"ids\" has 4 entries"));
        assert!(side_err(r#"["x", "y", "z"]"#).starts_with("d/t.titles.json: not a titles file for d/t.npy"));
        assert!(side_err(r#"{"titles": ["x", "y", 3]}"#).starts_with("d/t.titles.json: not a titles file"));
        let e = side_err(r#"{"embeddings_sha256": "00\r11", "titles": ["x", "y", "z"]}"#);
        assert!(e.starts_with("d/t.titles.json: made for another .npy") && !e.contains('\r'), "{e:?}");
        // Twin: the sidecar of this very file is taken.
        let sha = hex(&Sha256::digest(good(1)));
        let ok = format!(r#"{{"embeddings_sha256": "{sha}", "titles": ["x", "y", "z"]}}"#);
        assert!(parse("d/t.npy", &good(1), Some(ok.as_bytes())).is_ok());
    }

    fn fixture(name: &str) -> String {
        format!("{}/tests/data/npy/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    /// The files numpy wrote (tests/data/npy/make_fixtures.py).
    #[test]
    fn numpys_files_read_as_the_json_form_of_the_table() -> Result<()> {
        let json = Table::load_json(&fixture("table.json"))?;
        for name in ["table_v1.npy", "table_v2.npy", "table_v3.npy", "labelled.npy"] {
            let t = load(&fixture(name))?;
            assert_eq!((t.n, t.dim), (5, 3), "{name}");
            let bits = |t: &Table| t.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&t), bits(&json), "{name}");
            assert_eq!(t.inv_norm, json.inv_norm, "{name}");
            let bytes = std::fs::read(fixture(name)).map_err(|e| Error::io(name, e))?;
            assert_eq!(t.sha256, hex(&Sha256::digest(&bytes)));
        }
        // divgpu writes numpy's header byte for byte.
        let numpy = std::fs::read(fixture("table_v1.npy")).map_err(|e| Error::io("table_v1.npy", e))?;
        assert_eq!(npy_header::format(&[5, 3])[..], numpy[..128]);
        let t = load(&fixture("labelled.npy"))?;
        assert_eq!(t.ids.as_ref().map(|ids| ids[4].as_str()), Some("104"));
        assert_eq!(t.titles.as_ref().map(|t| t[0].as_str()), Some("one"));
        assert_eq!(t.model.as_deref(), Some("fixture"));
        Ok(())
    }

    #[test]
    fn numpys_other_files_are_refused() {
        for (name, expected) in [
            ("float64.npy", "values are '<f8' (float64): only float32 ('<f4') tables are read"),
            ("bigendian.npy", "values are big-endian float32 ('>f4')"),
            ("int32.npy", "values are '<i4'"),
            ("object.npy", "values are '|O'"),
            ("fortran.npy", "fortran_order is True"),
            ("one_d.npy", "the array has 1 dimension(s), shape [3]"),
            ("nan.npy", "row 2, column 1: value is not finite"),
            ("zero_row.npy", "row 3 is all zeros"),
            ("truncated.npy", "the file is truncated: shape (5, 3) needs 60 bytes of values after the header, it has 56"),
        ] {
            let path = fixture(name);
            match load(&path) {
                Ok(_) => panic!("{name} was accepted"),
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.starts_with(&format!("{path}: {expected}")), "{name}: {msg}");
                }
            }
        }
    }

    #[test]
    fn sidecar_names() {
        assert_eq!(sidecar_path("a/b/X.npy"), "a/b/X.titles.json");
        assert_eq!(sidecar_path("X.NPY"), "X.titles.json");
        assert_eq!(sidecar_path("é.npy"), "é.titles.json");
        assert_eq!(sidecar_path("X"), "X.titles.json");
    }

    #[test]
    fn write_then_load_gives_the_same_table_and_the_files_sha256() -> Result<()> {
        let dir = tmp("npy", "roundtrip");
        let mut t = Table::from_rows("mem", 3, 2, VALUES.to_vec(), None)?;
        t.model = Some("m".into());
        t.titles = Some(vec!["a".into(), "b\n\"c\"".into(), "δ".into()]);
        t.ids = Some(vec!["1".into(), "x".into(), "3".into()]);
        let path = dir.join("t.npy").display().to_string();
        write(&t, &path)?;
        let back = load(&path)?;
        assert_eq!(back.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), VALUES.map(f32::to_bits).to_vec());
        assert_eq!((back.model, back.ids, back.titles), (t.model.clone(), t.ids.clone(), t.titles.clone()));
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        assert_eq!(back.sha256, hex(&Sha256::digest(&bytes)));
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        // No sidecar: no titles (a hand-made .npy).
        std::fs::remove_file(dir.join("t.titles.json")).map_err(|e| Error::io("sidecar", e))?;
        let bare = load(&path)?;
        assert!(bare.titles.is_none() && bare.model.is_none());
        Ok(())
    }

    // A sidecar left by an earlier table of the same size is replaced by the
    // next write, and one that is stale (the .npy changed) is refused.
    #[test]
    fn a_stale_sidecar_is_refused() -> Result<()> {
        let dir = tmp("npy", "stale");
        let path = dir.join("t.npy").display().to_string();
        let mut t = Table::from_rows("mem", 3, 2, VALUES.to_vec(), None)?;
        t.titles = Some(vec!["a".into(), "b".into(), "c".into()]);
        write(&t, &path)?;
        let side = std::fs::read(sidecar_path(&path)).map_err(|e| Error::io("sidecar", e))?;
        let other = Table::from_rows("mem", 3, 2, VALUES.iter().map(|x| x * 2.0).collect(), None)?;
        write(&other, &path)?;
        assert!(load(&path)?.titles.is_none(), "the new write replaced the old sidecar");
        std::fs::write(sidecar_path(&path), &side).map_err(|e| Error::io("sidecar", e))?;
        let e = load(&path).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("t.titles.json: made for another .npy"), "{e}");
        Ok(())
    }
}
