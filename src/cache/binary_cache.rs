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
use sha2::{Digest, Sha256};

use crate::cache::json::{self, starts_sha256, CacheHeader};
use crate::cache::header::PartHeader;
use crate::util::hex;
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
const INDEX_BLOCK: usize = 1 << 16;
/// How many bytes of rows (or starts) one read brings in.
const CHUNK_BYTES: usize = 1 << 18;
const FORM: &str = "binary";

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
    fn new(header_len: u64, count: usize, num_items: usize, length: usize) -> Option<Layout> {
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
struct HeaderText<P> {
    #[serde(flatten)]
    part: P,
    form: String,
    starts_offset: u64,
    index_offset: u64,
    rows_offset: u64,
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
fn decode_u32s(bytes: &[u8], out: &mut Vec<u32>) {
    out.extend(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
}

/// One pass over a cache's starts, in order: it calls its argument with each.
pub(crate) type StartsPass<'a> = dyn FnMut(&mut dyn FnMut(u32)) -> Result<()> + 'a;

/// The start index of `num_items` items, block by block (module comment):
/// `emit(first item, entries)` for consecutive blocks, each from one `pass`.
fn index_blocks(num_items: usize, pass: &mut StartsPass, mut emit: impl FnMut(usize, &[u32]) -> Result<()>) -> Result<()> {
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
fn start_out_of_range(position: usize, start: u32, num_items: usize) -> String {
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

/// Reads the header of a binary cache and checks it (module comment).
fn read_preamble(path: &str, src: &impl ReadAt) -> Result<(PartHeader, Layout)> {
    let bad = |msg: String| Error::input(path, msg);
    let size = src.size().map_err(|e| Error::io(path, e))?;
    if size < PREAMBLE {
        return Err(bad(format!("is {size} bytes: too short for a binary cache (its preamble alone is 16)")));
    }
    let mut pre = [0u8; PREAMBLE as usize];
    src.read_exact_at(&mut pre, 0).map_err(|e| Error::io(path, e))?;
    if pre[..8] != MAGIC {
        return Err(bad("not a binary divgpu cache: its first 8 bytes are not DIVGPUB\\0".into()));
    }
    let word = |i: usize| u32::from_le_bytes([pre[i], pre[i + 1], pre[i + 2], pre[i + 3]]);
    if word(8) != LAYOUT {
        return Err(bad(format!("binary cache layout {}; this divgpu reads layout {LAYOUT}", word(8))));
    }
    let header_len = u64::from(word(12));
    if header_len % 8 != 0 || header_len > HEADER_LIMIT {
        return Err(bad(format!("header length {header_len} is not a multiple of 8 up to 1 MiB")));
    }
    if PREAMBLE + header_len > size {
        return Err(bad(format!("its header ({header_len} bytes) runs past the end of the file ({size} bytes): truncated")));
    }
    let mut text = vec![0u8; header_len as usize];
    src.read_exact_at(&mut text, PREAMBLE).map_err(|e| Error::io(path, e))?;
    let end = text.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    let parsed: HeaderText<PartHeader> =
        serde_json::from_slice(&text[..end]).map_err(|e| bad(format!("its header cannot be read ({e})")))?;
    let h = &parsed.part.header;
    json::check_header(path, h)?;
    if h.version != 2 || parsed.form != FORM {
        return Err(bad(format!("its header says version {} and form {:?}: a binary cache is version 2, form \"binary\"", h.version, parsed.form)));
    }
    let count = h.starts_count.unwrap_or(0);
    let layout = Layout::new(header_len, count, h.num_items, h.length)
        .ok_or_else(|| bad(format!("its header's {count} sequences of length {} overflow a file's size", h.length)))?;
    for (name, said, follows) in [
        ("starts_offset", parsed.starts_offset, layout.starts_offset),
        ("index_offset", parsed.index_offset, layout.index_offset),
        ("rows_offset", parsed.rows_offset, layout.rows_offset),
    ] {
        if said != follows {
            return Err(bad(format!("its header says {name} {said}, but {follows} follows from its length, starts_count and num_items")));
        }
    }
    let (canonical, _) = preamble(&parsed.part).map_err(|e| bad(e.to_string()))?;
    if canonical[..PREAMBLE as usize] != pre || canonical[PREAMBLE as usize..] != text[..] {
        return Err(bad("its header is not spelled as divgpu writes it (the fields in order, no spaces, padded \
                        with spaces to the first multiple of 8 that holds it)"
            .into()));
    }
    if size != layout.size {
        return Err(bad(format!(
            "is {size} bytes, but {count} sequences of length {} over {} items make {} bytes: truncated or extended",
            h.length, h.num_items, layout.size
        )));
    }
    Ok((parsed.part, layout))
}

/// A chunk of rows read ahead by `BinaryCache::next_row`, with their starts.
#[derive(Default)]
struct Chunk {
    first: usize,
    count: usize,
    rows: Vec<u32>,
    starts: Vec<u32>,
    bytes: Vec<u8>,
}

/// A binary cache open for reading: checked on opening (all but the rows),
/// its rows streamed in order (`next_row`) or reached at random
/// (`sequence_at`, `sequence_of`), each row checked as it is read.
pub struct BinaryCache<S: ReadAt = File> {
    path: String,
    src: S,
    part: PartHeader,
    layout: Layout,
    /// The position `next_row` gives next.
    next: usize,
    chunk: Chunk,
}

impl BinaryCache<File> {
    pub fn open(path: &str) -> Result<BinaryCache<File>> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        BinaryCache::from_source(path, file)
    }
}

impl<S: ReadAt> BinaryCache<S> {
    /// Reads and checks the header, the size, the starts (each below N, their
    /// sha256 the header's) and the index (entry by entry, the one the starts give).
    pub fn from_source(path: &str, src: S) -> Result<BinaryCache<S>> {
        let (part, layout) = read_preamble(path, &src)?;
        let cache = BinaryCache { path: path.to_string(), src, part, layout, next: 0, chunk: Chunk::default() };
        cache.check_starts()?;
        cache.check_index()?;
        Ok(cache)
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn part(&self) -> &PartHeader {
        &self.part
    }

    pub fn header(&self) -> &CacheHeader {
        &self.part.header
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// S: the sequences the file holds.
    pub fn count(&self) -> usize {
        self.layout.count
    }

    fn bad(&self, msg: String) -> Error {
        Error::input(&self.path, msg)
    }

    /// Calls `f(position, start)` for every start, in order.
    pub fn for_each_start(&self, f: impl FnMut(usize, u32) -> Result<()>) -> Result<()> {
        for_each_u32_at(&self.src, &self.path, self.layout.starts_offset, self.layout.count, f)
    }

    fn check_starts(&self) -> Result<()> {
        let mut hash = Sha256::new();
        let n = self.layout.num_items;
        self.for_each_start(|k, s| {
            if s as usize >= n {
                return Err(self.bad(start_out_of_range(k, s, n)));
            }
            hash.update(s.to_le_bytes());
            Ok(())
        })?;
        if self.part.header.starts_sha256.as_deref() != Some(&hex(&hash.finalize())) {
            return Err(self.bad("its starts do not hash to the header's starts_sha256: altered".into()));
        }
        Ok(())
    }

    fn check_index(&self) -> Result<()> {
        let (mut bytes, mut entries) = (Vec::new(), Vec::new());
        let mut pass = |f: &mut dyn FnMut(u32)| {
            self.for_each_start(|_, s| {
                f(s);
                Ok(())
            })
        };
        index_blocks(self.layout.num_items, &mut pass, |first, block| {
            bytes.resize(4 * block.len(), 0);
            self.read_at(&mut bytes, self.layout.index_offset + 4 * first as u64)?;
            entries.clear();
            decode_u32s(&bytes, &mut entries);
            match (0..block.len()).find(|&i| entries[i] != block[i]) {
                Some(i) => Err(self.bad(index_error(first + i, entries[i], block[i]))),
                None => Ok(()),
            }
        })
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.src.read_exact_at(buf, offset).map_err(|e| Error::io(&self.path, e))
    }

    fn read_u32(&self, offset: u64) -> Result<u32> {
        let mut b = [0u8; 4];
        self.read_at(&mut b, offset)?;
        Ok(u32::from_le_bytes(b))
    }

    /// The start of the sequence at `position`.
    pub fn start_at(&self, position: usize) -> Result<u32> {
        self.check_position(position)?;
        self.read_u32(self.layout.starts_offset + 4 * position as u64)
    }

    fn check_position(&self, position: usize) -> Result<()> {
        if position >= self.layout.count {
            return Err(self.bad(format!("holds {} sequences: there is no position {position}", self.layout.count)));
        }
        Ok(())
    }

    /// Checks rows read at `first` against their starts.
    fn check_rows(&self, first: usize, rows: &[u32], starts: &[u32]) -> Result<()> {
        let (length, n) = (self.layout.length, self.layout.num_items);
        for (i, (row, &start)) in rows.chunks_exact(length).zip(starts).enumerate() {
            if let Some(msg) = item_out_of_range(first + i, row, n) {
                return Err(self.bad(msg));
            }
            if row[0] != start {
                return Err(self.bad(format!("sequence {} starts at {}, but its start is {start}", first + i, row[0])));
            }
        }
        Ok(())
    }

    /// The sequence at `position`, into `seq`, checked.
    pub fn sequence_at(&self, position: usize, seq: &mut Vec<u32>) -> Result<()> {
        let start = self.start_at(position)?;
        let mut bytes = vec![0u8; 4 * self.layout.length];
        self.read_at(&mut bytes, self.layout.row_offset(position))?;
        seq.clear();
        decode_u32s(&bytes, seq);
        self.check_rows(position, seq, &[start])
    }

    /// The position of the first sequence that starts at item `start`, from the index.
    pub fn position_of(&self, start: u32) -> Result<Option<usize>> {
        if start as usize >= self.layout.num_items {
            return Err(self.bad(format!("item {start} is not below the header's {} items", self.layout.num_items)));
        }
        let entry = self.read_u32(self.layout.index_offset + 4 * u64::from(start))?;
        Ok((entry != NO_SEQUENCE).then_some(entry as usize))
    }

    /// The sequence that starts at item `start`, into `seq`, and its position;
    /// None where no sequence starts there. Three reads: the index entry, the start, the row.
    pub fn sequence_of(&self, start: u32, seq: &mut Vec<u32>) -> Result<Option<usize>> {
        let Some(position) = self.position_of(start)? else { return Ok(None) };
        self.sequence_at(position, seq)?;
        if seq[0] != start {
            return Err(self.bad(format!("its index points item {start} at sequence {position}, which starts at {}", seq[0])));
        }
        Ok(Some(position))
    }

    /// The position `next_row` gives next.
    pub fn next_position(&self) -> usize {
        self.next
    }

    /// The next sequence in order from the first, into `seq`, checked, and its
    /// position; None after the last. Rows are read a chunk at a time.
    pub fn next_row(&mut self, seq: &mut Vec<u32>) -> Result<Option<usize>> {
        let k = self.next;
        if k >= self.layout.count {
            return Ok(None);
        }
        if !(self.chunk.first..self.chunk.first + self.chunk.count).contains(&k) {
            self.load_chunk(k)?;
        }
        let length = self.layout.length;
        let at = (k - self.chunk.first) * length;
        seq.clear();
        seq.extend_from_slice(&self.chunk.rows[at..at + length]);
        self.next += 1;
        Ok(Some(k))
    }

    fn load_chunk(&mut self, first: usize) -> Result<()> {
        let mut chunk = std::mem::take(&mut self.chunk);
        let length = self.layout.length;
        chunk.first = first;
        chunk.count = (CHUNK_BYTES / (4 * length)).max(1).min(self.layout.count - first);
        chunk.bytes.resize(4 * length * chunk.count, 0);
        self.read_at(&mut chunk.bytes, self.layout.row_offset(first))?;
        chunk.rows.clear();
        decode_u32s(&chunk.bytes, &mut chunk.rows);
        chunk.bytes.resize(4 * chunk.count, 0);
        self.read_at(&mut chunk.bytes, self.layout.starts_offset + 4 * first as u64)?;
        chunk.starts.clear();
        decode_u32s(&chunk.bytes, &mut chunk.starts);
        let checked = self.check_rows(first, &chunk.rows, &chunk.starts);
        if checked.is_err() {
            chunk.count = 0;
        }
        self.chunk = chunk;
        checked
    }
}

/// What is wrong with an index entry: `says` where `truth` (both may be NO_SEQUENCE).
fn index_error(item: usize, says: u32, truth: u32) -> String {
    if says == NO_SEQUENCE {
        format!("its start index says no sequence starts at item {item}, but sequence {truth} does")
    } else if truth == NO_SEQUENCE {
        format!("its start index points item {item} at sequence {says}, but no sequence starts at item {item}")
    } else {
        format!("its start index points item {item} at sequence {says}; the first sequence that starts there is {truth}")
    }
}

/// Reads `count` rows of `length` from `r` (a checkpoint's batch), checks each
/// item below `num_items`, and gives each to `f(position, row)` from `first`.
pub(crate) fn read_rows(
    r: &mut impl std::io::Read,
    first: usize,
    count: usize,
    length: usize,
    num_items: usize,
    mut f: impl FnMut(usize, &[u32]) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    let mut bytes = vec![0u8; 4 * length];
    let mut row = Vec::with_capacity(length);
    for position in first..first + count {
        r.read_exact(&mut bytes).map_err(|e| format!("sequence {position} cannot be read ({e}): cut short"))?;
        row.clear();
        decode_u32s(&bytes, &mut row);
        if let Some(msg) = item_out_of_range(position, &row, num_items) {
            return Err(msg);
        }
        f(position, &row)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
