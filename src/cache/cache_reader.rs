//! A cache of either form read back, streamed (docs/formats.md#binary-cache):
//! `CacheReader` opens either (JSON version 1 or 2, binary) and gives its
//! sequences one at a time or in bounded batches. `verify`, `merge` and
//! `convert` read through here.

use std::fs::File;
use std::io::{Chain, Cursor, Read};

use sha2::{Digest, Sha256};

use crate::cache::binary_cache::ReadAt;
use crate::cache::binary_reader::BinaryCache;
use crate::cache::cache_io::{form_of, Form};
use crate::cache::header::{PartHeader, Shard};
use crate::cache::json::{self, CacheHeader};
use crate::cache::json_reader::{read_head, Sequences};
use crate::cache::sample::sample_positions;
use crate::error::{Error, Result};
use crate::util::hex;

/// What a reader reads from: a file, or bytes (the fuzz targets).
pub trait Source: Read + ReadAt {}
impl<T: Read + ReadAt> Source for T {}

/// The JSON form's sequences, streamed from just past the `[` of `"sequences"`.
struct JsonSequences<R: Read> {
    sequences: Sequences<Chain<Cursor<Vec<u8>>, R>>,
    position: usize,
    /// sha256 of the first items so far (a version 2 header promises it).
    firsts: Sha256,
    ended: bool,
}

enum Sequenced<R: Source> {
    Json(JsonSequences<R>),
    Binary(BinaryCache<R>),
}

/// A batch of sequences: their positions in the file, and the sequences,
/// flat (`[positions.len() × length]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    pub length: usize,
    pub positions: Vec<usize>,
    pub sequences: Vec<u32>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The `i`-th sequence of the batch (its first item is its start).
    pub fn sequence(&self, i: usize) -> &[u32] {
        &self.sequences[i * self.length..(i + 1) * self.length]
    }
}

/// A cache of either form open for reading (module comment). The header is
/// read and checked by `open`; for the binary form the starts and index are
/// too. Sequences come in order, or only those `select`ed; every check a
/// sequence can fail is made as it is read, and the JSON form's promises
/// (`starts_count`, `starts_sha256`) when its end is reached, before the
/// last call returns None.
pub struct CacheReader<R: Source = File> {
    path: String,
    part: PartHeader,
    source: Sequenced<R>,
    /// Positions to give (ascending), and how many are given.
    selection: Option<(Vec<usize>, usize)>,
}

impl CacheReader<File> {
    pub fn open(path: &str) -> Result<CacheReader<File>> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        CacheReader::from_source(path, file)
    }

    /// `select`s the `k` positions `seed` picks (`sample::sample_positions`)
    /// among the file's sequences (`verify --sample K --seed S`); returns
    /// how many the file holds.
    pub fn select_sample(&mut self, k: usize, seed: u64) -> Result<usize> {
        let count = match self.count() {
            Some(count) => count,
            None => count_sequences(&self.path)?,
        };
        self.select(sample_positions(count, k, seed))?;
        Ok(count)
    }
}

/// How many sequences the cache at `path` holds: its header's count, or for
/// a version 1 JSON cache, which does not say, a pass over the file (every
/// sequence read and checked).
pub fn count_sequences(path: &str) -> Result<usize> {
    let reader = CacheReader::open(path)?;
    match reader.count() {
        Some(count) => Ok(count),
        None => reader.for_each_start(|_, _| Ok(())),
    }
}

impl<'a> CacheReader<&'a [u8]> {
    /// A reader of the bytes of a file named `path`.
    pub fn from_bytes(path: &str, bytes: &'a [u8]) -> Result<CacheReader<&'a [u8]>> {
        CacheReader::from_source(path, bytes)
    }
}

impl<R: Source> CacheReader<R> {
    pub fn from_source(path: &str, mut src: R) -> Result<CacheReader<R>> {
        let (part, source) = match form_of(path, &src)? {
            Form::Binary => {
                let binary = BinaryCache::from_source(path, src)?;
                (binary.part().clone(), Sequenced::Binary(binary))
            }
            Form::Json => {
                let size = src.size().map_err(|e| Error::io(path, e))?;
                let (part, rest, offset) = read_head(path, &mut src)?;
                check_json_sizes(path, &part.header, size)?;
                let sequences = Sequences::new(Cursor::new(rest).chain(src), offset);
                (part, Sequenced::Json(JsonSequences { sequences, position: 0, firsts: Sha256::new(), ended: false }))
            }
        };
        Ok(CacheReader { path: path.to_string(), part, source, selection: None })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn form(&self) -> Form {
        match self.source {
            Sequenced::Json(_) => Form::Json,
            Sequenced::Binary(_) => Form::Binary,
        }
    }

    /// The header and, for a part of a sharded run, its `shard`.
    pub fn part(&self) -> &PartHeader {
        &self.part
    }

    pub fn header(&self) -> &CacheHeader {
        &self.part.header
    }

    pub fn shard(&self) -> Option<&Shard> {
        self.part.shard.as_ref()
    }

    /// The sequences the file holds, where its header says (version 2, binary);
    /// None for a version 1 JSON cache (`count_sequences` counts them).
    pub fn count(&self) -> Option<usize> {
        match &self.source {
            Sequenced::Binary(b) => Some(b.count()),
            Sequenced::Json(_) => self.part.header.starts_count,
        }
    }

    /// The binary form, for random access (`sequence_of` a start).
    pub fn binary(&self) -> Option<&BinaryCache<R>> {
        match &self.source {
            Sequenced::Binary(b) => Some(b),
            Sequenced::Json(_) => None,
        }
    }

    /// From now on only the sequences at `positions` (ascending, distinct;
    /// `sample::sample_positions` gives such) are given: the binary form
    /// reads just those rows, the JSON form reads through the rest (and so
    /// still checks the whole file). Before the first sequence is read.
    pub fn select(&mut self, positions: Vec<usize>) -> Result<()> {
        if self.selection.is_some() || self.started() {
            return Err(Error::Usage(format!("{}: select before reading, and once", self.path)));
        }
        if let Some(w) = positions.windows(2).find(|w| w[0] >= w[1]) {
            return Err(Error::Usage(format!("select: positions must ascend, without repeats ({} then {})", w[0], w[1])));
        }
        if let (Some(&last), Some(count)) = (positions.last(), self.count()) {
            if last >= count {
                return Err(Error::Usage(format!("{}: holds {count} sequences: there is no position {last}", self.path)));
            }
        }
        self.selection = Some((positions, 0));
        Ok(())
    }

    fn started(&self) -> bool {
        match &self.source {
            Sequenced::Json(j) => j.position > 0 || j.ended,
            Sequenced::Binary(b) => b.next_position() > 0,
        }
    }

    /// The next sequence into `seq`, and its position; None after the last.
    pub fn next(&mut self, seq: &mut Vec<u32>) -> Result<Option<usize>> {
        let wanted = match &self.selection {
            None => return self.next_in_order(seq),
            Some((positions, given)) => positions.get(*given).copied(),
        };
        let found = match (&self.source, wanted) {
            (Sequenced::Binary(b), Some(p)) => {
                b.sequence_at(p, seq)?;
                Some(p)
            }
            (Sequenced::Binary(_), None) => None,
            (Sequenced::Json(_), _) => self.read_through_to(wanted, seq)?,
        };
        if let (Some(_), Some((_, given))) = (found, &mut self.selection) {
            *given += 1;
        }
        Ok(found)
    }

    /// The JSON form under a selection: reads on to the sequence at `wanted`,
    /// or, with none wanted, to the end (so the file's own checks are made).
    fn read_through_to(&mut self, wanted: Option<usize>, seq: &mut Vec<u32>) -> Result<Option<usize>> {
        loop {
            match (self.next_in_order(seq)?, wanted) {
                (Some(p), Some(w)) if p == w => return Ok(Some(p)),
                (Some(_), _) => {}
                (None, None) => return Ok(None),
                (None, Some(w)) => {
                    let held = match &self.source {
                        Sequenced::Json(j) => j.position,
                        Sequenced::Binary(b) => b.count(),
                    };
                    return Err(Error::input(&self.path, format!("holds {held} sequences: there is no position {w}")));
                }
            }
        }
    }

    fn next_in_order(&mut self, seq: &mut Vec<u32>) -> Result<Option<usize>> {
        let (length, num_items) = (self.part.header.length, self.part.header.num_items);
        match &mut self.source {
            Sequenced::Binary(b) => b.next_row(seq),
            Sequenced::Json(j) => {
                if j.ended {
                    return Ok(None);
                }
                if j.sequences.next(seq, length, num_items).map_err(|e| Error::input(&self.path, e))? {
                    j.firsts.update(seq[0].to_le_bytes());
                    j.position += 1;
                    return Ok(Some(j.position - 1));
                }
                j.ended = true;
                let firsts = hex(&j.firsts.clone().finalize());
                json::check_contents(&self.path, &self.part.header, j.position, &firsts)?;
                Ok(None)
            }
        }
    }

    /// Up to `max` (at least 1) next sequences into `batch` (replacing what it
    /// held); how many, 0 after the last.
    pub fn next_batch(&mut self, max: usize, batch: &mut Batch) -> Result<usize> {
        let length = self.part.header.length;
        batch.length = length;
        batch.positions.clear();
        batch.sequences.clear();
        // Grown as items are read: a header's length sizes nothing.
        let mut seq = Vec::with_capacity(length.min(1 << 16));
        while batch.positions.len() < max.max(1) {
            let Some(p) = self.next(&mut seq)? else { break };
            batch.positions.push(p);
            batch.sequences.extend_from_slice(&seq);
        }
        Ok(batch.positions.len())
    }

    /// `f(position, start, sequence)` for every sequence given (verify's
    /// loop, in batches of `batch_sequences`); how many there were.
    pub fn for_each(&mut self, mut f: impl FnMut(usize, u32, &[u32]) -> Result<()>) -> Result<usize> {
        let mut batch = Batch::default();
        let mut seen = 0;
        while self.next_batch(batch_sequences(self.part.header.length), &mut batch)? > 0 {
            for (i, &p) in batch.positions.iter().enumerate() {
                let seq = batch.sequence(i);
                f(p, seq[0], seq)?;
            }
            seen += batch.len();
        }
        Ok(seen)
    }

    /// `f(position, start)` for every sequence, in order (the binary form
    /// reads only its starts, the JSON form every sequence, checked); how many.
    pub fn for_each_start(mut self, mut f: impl FnMut(usize, u32) -> Result<()>) -> Result<usize> {
        if let Sequenced::Binary(b) = &self.source {
            b.for_each_start(&mut f)?;
            return Ok(b.count());
        }
        let mut seq = Vec::new();
        let mut count = 0;
        while let Some(p) = self.next_in_order(&mut seq)? {
            f(p, seq[0])?;
            count += 1;
        }
        Ok(count)
    }
}

/// A JSON cache's header against the file's size, before anything is sized
/// by it: a sequence of L items takes at least 2L + 1 bytes (`[`, L digits,
/// L - 1 commas, `]`), so a header promising sequences the file cannot hold
/// (a length of 2^40 in a file of 2 KB) is refused, not allocated. A version
/// 1 header promises no count (an empty cache is refused as such later);
/// whatever the header, `next_batch` sizes nothing by the length.
fn check_json_sizes(path: &str, h: &CacheHeader, size: u64) -> Result<()> {
    if size == 0 || !h.starts_count.is_some_and(|count| count > 0) {
        return Ok(()); // not a regular file (a pipe), or no sequence promised
    }
    let line = (h.length as u64).saturating_mul(2).saturating_add(1);
    if line > size {
        let msg = format!(
            "its header says length {}, but one sequence that long needs {line} bytes and the file has {size}: damaged",
            h.length
        );
        return Err(Error::input(path, msg));
    }
    if let Some(count) = h.starts_count {
        let need = (count as u64).saturating_mul(line);
        if need > size {
            let msg = format!(
                "its header says {count} sequences of length {}, at least {need} bytes, but the file has {size}: \
                 damaged or truncated",
                h.length
            );
            return Err(Error::input(path, msg));
        }
    }
    Ok(())
}

/// A signal caught while the caller catches them (`interrupt::catch`, as
/// `convert` and `merge` do) ends a streamed copy between batches: the
/// writer is dropped, its temporary removed, the output left as it was.
pub fn stop_if_interrupted() -> Result<()> {
    match crate::interrupt::caught() {
        Some(signal) => Err(Error::Refused(format!("interrupted by {signal}; nothing was written"))),
        None => Ok(()),
    }
}

/// Sequences per batch: about 1 MiB of them, at least one.
pub fn batch_sequences(length: usize) -> usize {
    ((1 << 20) / (4 * length.max(1))).max(1)
}

/// A whole cache of either form in memory (small caches: tests, the Lua
/// `read_cache`): its header and its sequences, flat.
pub fn read_all(path: &str) -> Result<(PartHeader, Vec<u32>)> {
    let mut reader = CacheReader::open(path)?;
    let mut flat = Vec::new();
    let mut seq = Vec::new();
    while reader.next(&mut seq)?.is_some() {
        flat.extend_from_slice(&seq);
    }
    Ok((reader.part.clone(), flat))
}

