//! The binary form of the cache (docs/formats.md, "Binary cache"): a 16-byte
//! preamble (magic, layout, header length H), the header as one line of
//! JSON padded with spaces to H bytes, then little-endian u32s: the S starts,
//! the start index (for each of the N items, the position of the first
//! sequence that starts there, or `NO_SEQUENCE`) and the S rows of L items.
//!
//! Written front to back in one pass: `write_head`, then `write_u32s` of the
//! rows as batches arrive. Read with positional reads (`BinaryCache`): one
//! chunk of rows in memory at a time whatever the file's size, and any
//! start's sequence in three small reads once the header is known.
//!
//! A file is determined by its header's fields, its starts and its rows: the
//! header is spelled one way (the fields in order, no spaces, H the smallest
//! multiple of 8 that holds it), the index follows from the starts. A reader
//! refuses any other bytes (`BinaryCache::from_source` checks all but the
//! rows, and each row is checked as it is read), so writing back what was
//! read gives the file's bytes: `convert` is byte-identical to a direct write.
//!
//! The index is built, and checked, a block of `INDEX_BLOCK` items at a time,
//! each block from one pass over the starts: memory stays one block, however
//! many items the table has (the passes read 4·S bytes each).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;

use serde::{Deserialize, Serialize};

use crate::cache::header::PartHeader;
use crate::cache::json::starts_sha256;
use crate::error::{Error, Result};

/// The first 8 bytes of every binary cache.
pub const MAGIC: [u8; 8] = *b"DIVGPUB\0";
/// The layout this module reads and writes (the table of docs/formats.md).
pub const LAYOUT: u32 = 1;
/// The index entry of an item no sequence starts at.
pub const NO_SEQUENCE: u32 = u32::MAX;
/// Magic, layout and header length.
pub const PREAMBLE: u64 = 16;
/// The longest header a reader takes (divgpu's are a few hundred bytes).
pub const HEADER_LIMIT: u64 = 1 << 20;
/// Items of the index built or checked per pass over the starts.
pub(crate) const INDEX_BLOCK: usize = 1 << 16;
/// How many bytes of rows (or starts) one read brings in.
pub(crate) const CHUNK_BYTES: usize = 1 << 18;
pub(crate) const FORM: &str = "binary";

/// Positional reads: a file, or bytes in memory (the fuzz target's).
pub trait ReadAt {
    fn size(&self) -> std::io::Result<u64>;
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
}

impl ReadAt for File {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl ReadAt for &[u8] {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.len() as u64)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let start = usize::try_from(offset).ok().filter(|&s| s <= self.len());
        let range = start.and_then(|s| Some(s..s.checked_add(buf.len()).filter(|&e| e <= self.len())?));
        let range = range.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(&self[range]);
        Ok(())
    }
}

/// Where everything is in a binary cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// H: the header's bytes, padding included.
    pub header_len: u64,
    /// S: sequences (and starts).
    pub count: usize,
    /// N: items of the table (entries of the index).
    pub num_items: usize,
    /// L: items in every sequence.
    pub length: usize,
    pub starts_offset: u64,
    pub index_offset: u64,
    pub rows_offset: u64,
    /// The file's size: `rows_offset + 4·S·L`.
    pub size: u64,
}

impl Layout {
    /// The layout of a header of `header_len` bytes; None where an offset overflows.
    pub(crate) fn new(header_len: u64, count: usize, num_items: usize, length: usize) -> Option<Layout> {
        let words = |n: usize| 4u64.checked_mul(n as u64);
        let starts_offset = PREAMBLE.checked_add(header_len)?;
        let index_offset = starts_offset.checked_add(words(count)?)?;
        let rows_offset = index_offset.checked_add(words(num_items)?)?;
        let size = rows_offset.checked_add(words(count)?.checked_mul(length as u64)?)?;
        Some(Layout { header_len, count, num_items, length, starts_offset, index_offset, rows_offset, size })
    }

    /// Where the sequence at `position` (below `count`) begins.
    pub fn row_offset(&self, position: usize) -> u64 {
        self.rows_offset + 4 * self.length as u64 * position as u64
    }
}

/// The header's JSON: the cache's version 2 header (a part's `shard` with
/// it), then the form and the offsets. `P` is `&PartHeader` to write, `PartHeader` to read.
#[derive(Serialize, Deserialize)]
pub(crate) struct HeaderText<P> {
    #[serde(flatten)]
    pub(crate) part: P,
    pub(crate) form: String,
    pub(crate) starts_offset: u64,
    pub(crate) index_offset: u64,
    pub(crate) rows_offset: u64,
}

/// The first 16 + H bytes of the binary cache of `part` (a version 2
/// header: it gives S), and the layout. H is found by iterating: the header
/// names `starts_offset` = 16 + H, so its length depends on H; the text's
/// length never shrinks as H grows, so the first H that holds it is the smallest.
pub fn preamble(part: &PartHeader) -> Result<(Vec<u8>, Layout)> {
    let h = &part.header;
    let Some(count) = h.starts_count else {
        return Err(Error::Usage("binary cache: the header has no starts_count (a version 2 header is needed)".into()));
    };
    if count > u32::MAX as usize || h.num_items > 1 << 32 {
        return Err(Error::Usage(format!(
            "binary cache: {count} sequences over {} items do not fit its u32 positions and items",
            h.num_items
        )));
    }
    let mut header_len = 8u64;
    loop {
        let layout = Layout::new(header_len, count, h.num_items, h.length).ok_or_else(|| {
            Error::Usage(format!("binary cache: {count} sequences of length {} make a file past 2^64 bytes", h.length))
        })?;
        let text = serde_json::to_string(&HeaderText {
            part,
            form: FORM.into(),
            starts_offset: layout.starts_offset,
            index_offset: layout.index_offset,
            rows_offset: layout.rows_offset,
        })
        .map_err(|e| Error::Usage(format!("binary cache header: {e}")))?;
        let text_len = text.len() as u64;
        if text_len <= header_len {
            let mut bytes = Vec::with_capacity((PREAMBLE + header_len) as usize);
            bytes.extend_from_slice(&MAGIC);
            bytes.extend_from_slice(&LAYOUT.to_le_bytes());
            bytes.extend_from_slice(&(header_len as u32).to_le_bytes());
            bytes.extend_from_slice(text.as_bytes());
            bytes.resize((PREAMBLE + header_len) as usize, b' ');
            return Ok((bytes, layout));
        }
        if text_len > HEADER_LIMIT {
            return Err(Error::Usage(format!("binary cache: a header of {text_len} bytes is past the limit of 1 MiB")));
        }
        header_len = text_len.next_multiple_of(8);
    }
}

/// Writes `values` as little-endian u32s.
pub fn write_u32s(w: &mut impl Write, values: &[u32]) -> std::io::Result<()> {
    if cfg!(target_endian = "little") {
        w.write_all(bytemuck::cast_slice(values))
    } else {
        values.iter().try_for_each(|v| w.write_all(&v.to_le_bytes()))
    }
}

/// Appends the little-endian u32s of `bytes` (a multiple of 4) to `out`.
pub(crate) fn decode_u32s(bytes: &[u8], out: &mut Vec<u32>) {
    out.extend(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
}

/// One pass over a cache's starts, in order: it calls its argument with each.
pub(crate) type StartsPass<'a> = dyn FnMut(&mut dyn FnMut(u32)) -> Result<()> + 'a;

/// The start index of `num_items` items, block by block (module comment):
/// `emit(first item, entries)` for consecutive blocks, each from one `pass`.
pub(crate) fn index_blocks(num_items: usize, pass: &mut StartsPass, mut emit: impl FnMut(usize, &[u32]) -> Result<()>) -> Result<()> {
    let mut block = Vec::with_capacity(INDEX_BLOCK.min(num_items));
    let mut first = 0;
    while first < num_items {
        let end = num_items.min(first + INDEX_BLOCK);
        block.clear();
        block.resize(end - first, NO_SEQUENCE);
        let mut position = 0u32;
        pass(&mut |start| {
            let j = start as usize;
            if (first..end).contains(&j) && block[j - first] == NO_SEQUENCE {
                block[j - first] = position;
            }
            position = position.wrapping_add(1);
        })?;
        emit(first, &block)?;
        first = end;
    }
    Ok(())
}

/// Writes the start index of `num_items` items from passes over the starts;
/// `name` is the output, for the error of a failed write.
pub(crate) fn write_index(w: &mut impl Write, name: &str, num_items: usize, pass: &mut StartsPass) -> Result<()> {
    index_blocks(num_items, pass, |_, block| write_u32s(w, block).map_err(|e| Error::io(name, e)))
}

/// The error for a start that is not an item of the table.
pub(crate) fn start_out_of_range(position: usize, start: u32, num_items: usize) -> String {
    format!("start {position} is item {start}, out of range (the header says {num_items} items)")
}

/// The head of the binary cache of `part` whose starts are `starts` (the
/// header's): preamble, starts, index. `name` is the output, for errors.
pub fn write_head(w: &mut impl Write, name: &str, part: &PartHeader, starts: &[u32]) -> Result<Layout> {
    let (bytes, layout) = preamble(part)?;
    if starts.len() != layout.count || part.header.starts_sha256.as_deref() != Some(&starts_sha256(starts)) {
        return Err(Error::Usage(format!("{name}: the starts given are not those the header promises")));
    }
    if let Some((k, &s)) = starts.iter().enumerate().find(|&(_, &s)| s as usize >= layout.num_items) {
        return Err(Error::Usage(format!("{name}: {}", start_out_of_range(k, s, layout.num_items))));
    }
    w.write_all(&bytes).map_err(|e| Error::io(name, e))?;
    write_u32s(w, starts).map_err(|e| Error::io(name, e))?;
    write_index(w, name, layout.num_items, &mut |f| {
        starts.iter().for_each(|&s| f(s));
        Ok(())
    })?;
    Ok(layout)
}

/// Calls `f(k, value)` for the `count` u32s at `offset` of `src`, read a
/// chunk at a time; `name` is the file, for errors.
pub(crate) fn for_each_u32_at(
    src: &impl ReadAt,
    name: &str,
    offset: u64,
    count: usize,
    mut f: impl FnMut(usize, u32) -> Result<()>,
) -> Result<()> {
    let mut bytes = Vec::new();
    let mut values = Vec::new();
    let mut k = 0;
    while k < count {
        let n = (count - k).min(CHUNK_BYTES / 4);
        bytes.resize(4 * n, 0);
        src.read_exact_at(&mut bytes, offset + 4 * k as u64).map_err(|e| Error::io(name, e))?;
        values.clear();
        decode_u32s(&bytes, &mut values);
        for &v in &values {
            f(k, v)?;
            k += 1;
        }
    }
    Ok(())
}

/// The first item of `row` (at `position`) not below `num_items`, as the error.
pub(crate) fn item_out_of_range(position: usize, row: &[u32], num_items: usize) -> Option<String> {
    let (step, x) = row.iter().enumerate().find(|&(_, &x)| x as usize >= num_items)?;
    Some(format!("sequence {position}, step {step}: item {x} is out of range (the header says {num_items} items)"))
}

#[cfg(test)]
mod tests;
