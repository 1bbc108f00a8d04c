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

use crate::durable::safe_write::write_together;
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
/// sidecar, together (`write_together`: neither is written unless both can
/// be). The sidecar is always written (with the npy's sha256), so one left
/// from an earlier table never labels this one.
pub fn write(table: &Table, path: &str) -> Result<()> {
    write_together(&[path, &sidecar_path(path)], |w| {
        let [npy, side] = w else { return Err("two outputs expected".into()) };
        let mut out = HashingWriter::new(npy);
        out.write_all(&npy_header::format(&[table.n as u64, table.dim as u64]))?;
        if cfg!(target_endian = "little") {
            out.write_all(bytemuck::cast_slice(&table.data))?;
        } else {
            for x in &table.data {
                out.write_all(&x.to_le_bytes())?;
            }
        }
        let sha256 = hex(&out.hasher.finalize());
        let sidecar = SidecarOut { model: &table.model, embeddings_sha256: &sha256, ids: &table.ids, titles: &table.titles };
        serde_json::to_writer(&mut *side, &sidecar)?;
        side.write_all(b"\n")?;
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
mod tests;
