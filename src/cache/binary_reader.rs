//! The binary cache read back (`BinaryCache`): positional reads, one chunk
//! of rows in memory at a time whatever the file's size, and any start's
//! sequence in three small reads once the header is known. Every byte but
//! the rows is checked on open, each row as it is read
//! (docs/formats.md, "Binary cache"; the layout is `binary_cache`'s).

use std::fs::File;

use sha2::{Digest, Sha256};

use crate::cache::header::PartHeader;
use crate::cache::json::{self, CacheHeader};
use crate::error::{Error, Result};
use crate::util::hex;
use crate::cache::binary_cache::{
    decode_u32s, for_each_u32_at, index_blocks, item_out_of_range, preamble, start_out_of_range, HeaderText, Layout, ReadAt, CHUNK_BYTES, FORM, HEADER_LIMIT,
    LAYOUT, MAGIC, NO_SEQUENCE, PREAMBLE,
};

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

