//! Both forms of the cache, streamed (docs/formats.md#binary-cache): `CacheReader` opens either
//! (JSON version 1 or 2, binary) and gives its sequences one at a time or in
//! bounded batches, `CacheWriter` writes either through the one safe write
//! path, `convert` turns one into the other, byte-identical to a run that
//! wrote the other directly. `verify` and `merge` read through here; the
//! checkpoint of `run` writes its bytes with `head`, `write_sequences` and
//! `tail`, as `CacheWriter` does, so a run can finish into either form.
//!
//! Memory: a reader holds its header, a read buffer (1 MiB for JSON, 256 KiB
//! of rows for binary) and the sequences asked for; a writer a 1 MiB buffer
//! and, for the binary index, one block of 64 Ki entries. Nothing grows with
//! the number of sequences.

use std::fs::File;
use std::io::{BufWriter, Chain, Cursor, Read, Write};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cache::binary_cache::{self, BinaryCache, ReadAt, MAGIC};
use crate::cache::json::{self, CacheHeader};
use crate::durable::safe_write::{check_files, stdout_file, Named, Output, STDOUT};
use crate::cache::sample::sample_positions;
use crate::cache::header::{PartHeader, Shard};
use crate::cache::json_reader::{read_head, Sequences};
use crate::util::hex;
use crate::error::{Error, Result};

/// The two forms of a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    /// `diversity_cache.json`: the header, then one sequence per line.
    #[default]
    Json,
    /// The binary cache (`binary_cache`).
    Binary,
}

impl Form {
    /// `json` or `binary` (the CLI's `--format`).
    pub fn parse(name: &str) -> Result<Form> {
        match name {
            "json" => Ok(Form::Json),
            "binary" => Ok(Form::Binary),
            other => Err(Error::Usage(format!("--format {other:?}: the forms are json and binary"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Form::Json => "json",
            Form::Binary => "binary",
        }
    }

    /// The form `convert` writes by default.
    pub fn other(self) -> Form {
        match self {
            Form::Json => Form::Binary,
            Form::Binary => Form::Json,
        }
    }

    pub fn is_json(&self) -> bool {
        *self == Form::Json
    }

    /// The form of the file at `path`, from its first bytes.
    pub fn of_file(path: &str) -> Result<Form> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        form_of(path, &file)
    }
}

/// Binary when the source starts like the magic (a binary cache cut short is
/// then refused as one), JSON otherwise.
fn form_of(path: &str, src: &impl ReadAt) -> Result<Form> {
    let size = src.size().map_err(|e| Error::io(path, e))?;
    let mut first = [0u8; 7];
    if size < first.len() as u64 {
        return Ok(Form::Json);
    }
    src.read_exact_at(&mut first, 0).map_err(|e| Error::io(path, e))?;
    Ok(if first == MAGIC[..7] { Form::Binary } else { Form::Json })
}

/// The bytes before the first sequence of a job whose starts are known (a
/// run's, its checkpoint's): the JSON header line, or the binary head.
pub fn head(form: Form, part: &PartHeader, starts: &[u32]) -> Result<Vec<u8>> {
    match form {
        Form::Json => json::head(part),
        Form::Binary => {
            let mut bytes = Vec::new();
            binary_cache::write_head(&mut bytes, "the binary cache", part, starts)?;
            Ok(bytes)
        }
    }
}

/// Writes whole sequences of `length`; `index` is the position of the first
/// (the JSON form puts a comma before all but the first).
pub fn write_sequences(form: Form, w: &mut impl Write, sequences: &[u32], length: usize, index: usize) -> std::io::Result<()> {
    match form {
        Form::Json => json::write_sequences(w, sequences, length, index),
        Form::Binary => binary_cache::write_u32s(w, sequences),
    }
}

/// The bytes after the last sequence.
pub fn tail(form: Form) -> &'static [u8] {
    match form {
        Form::Json => json::TAIL,
        Form::Binary => b"",
    }
}

/// The starts of a cache given one at a time to the writer (convert, merge).
pub type PushStart<'a> = dyn FnMut(u32) -> Result<()> + 'a;

/// A cache being written to a file (a temporary renamed onto it by `finish`,
/// `safe_write::Output`) or to standard output (`-`), in either form:
/// the head when created, then sequences as they are appended. `finish`
/// refuses a cache that lacks sequences or whose sequences do not start
/// where its header says.
pub struct CacheWriter {
    name: String,
    form: Form,
    /// None: standard output.
    output: Option<Output>,
    w: BufWriter<File>,
    length: usize,
    num_items: usize,
    total: usize,
    done: usize,
    starts_sha256: String,
    firsts: Sha256,
}

impl CacheWriter {
    /// The writer of the cache of `part` (a version 2 header) whose starts are
    /// `starts` (in memory: a run's).
    pub fn create(path: &str, part: &PartHeader, form: Form, starts: &[u32]) -> Result<CacheWriter> {
        let mut cw = CacheWriter::begin(path, part, form)?;
        match form {
            Form::Json => cw.write_json_head(part)?,
            Form::Binary => {
                binary_cache::write_head(&mut cw.w, &cw.name, part, starts)?;
            }
        }
        Ok(cw)
    }

    /// The writer of the cache of `part` whose starts `starts` gives, in order,
    /// to its argument (called once, only for the binary form). The binary
    /// index is then built from the starts as written, read back from the
    /// file: a binary cache so made cannot go to standard output.
    pub fn create_streamed(
        path: &str,
        part: &PartHeader,
        form: Form,
        starts: impl FnOnce(&mut PushStart) -> Result<()>,
    ) -> Result<CacheWriter> {
        if form == Form::Binary && path == STDOUT {
            return Err(Error::Usage(
                "--out -: a converted or merged binary cache is built in a file (its index is read back from the \
                 starts written first); name a file, or write --format json"
                    .into(),
            ));
        }
        let mut cw = CacheWriter::begin(path, part, form)?;
        match form {
            Form::Json => cw.write_json_head(part)?,
            Form::Binary => cw.write_streamed_head(part, starts)?,
        }
        Ok(cw)
    }

    fn begin(path: &str, part: &PartHeader, form: Form) -> Result<CacheWriter> {
        let h = &part.header;
        let (Some(total), Some(sha)) = (h.starts_count, h.starts_sha256.clone()) else {
            return Err(Error::Usage(format!("{path}: the cache writer needs a version 2 header (starts_count, starts_sha256)")));
        };
        let (output, file, name) = if path == STDOUT {
            std::io::stdout().flush().map_err(|e| Error::io("standard output", e))?;
            (None, stdout_file()?, "standard output".to_string())
        } else {
            let mut out = Output::create(path)?;
            let file = out.file().try_clone().map_err(|e| Error::io(path, e))?;
            (Some(out), file, path.to_string())
        };
        Ok(CacheWriter {
            name,
            form,
            output,
            w: BufWriter::with_capacity(1 << 20, file),
            length: h.length,
            num_items: h.num_items,
            total,
            done: 0,
            starts_sha256: sha,
            firsts: Sha256::new(),
        })
    }

    fn write_json_head(&mut self, part: &PartHeader) -> Result<()> {
        let head = json::head(part)?;
        self.w.write_all(&head).map_err(|e| Error::io(&self.name, e))
    }

    fn write_streamed_head(&mut self, part: &PartHeader, starts: impl FnOnce(&mut PushStart) -> Result<()>) -> Result<()> {
        let (bytes, layout) = binary_cache::preamble(part)?;
        let name = self.name.clone();
        self.w.write_all(&bytes).map_err(|e| Error::io(&name, e))?;
        let (mut hash, mut count) = (Sha256::new(), 0usize);
        let (w, n) = (&mut self.w, self.num_items);
        starts(&mut |s| {
            if s as usize >= n {
                return Err(Error::Usage(format!("{name}: start {count} is item {s}, but the header says {n} items")));
            }
            hash.update(s.to_le_bytes());
            count += 1;
            binary_cache::write_u32s(w, &[s]).map_err(|e| Error::io(&name, e))
        })?;
        if count != layout.count || hex(&hash.finalize()) != self.starts_sha256 {
            return Err(Error::Usage(format!("{name}: the {count} starts given are not those the header promises")));
        }
        self.w.flush().map_err(|e| Error::io(&name, e))?;
        // A second handle: positional reads leave the writer's position alone.
        let written = self.w.get_ref().try_clone().map_err(|e| Error::io(&name, e))?;
        binary_cache::write_index(&mut self.w, &name, n, &mut |f| {
            binary_cache::for_each_u32_at(&written, &name, layout.starts_offset, layout.count, |_, s| {
                f(s);
                Ok(())
            })
        })
    }

    /// Appends whole sequences (`[count × length]`), the next in order.
    pub fn append(&mut self, sequences: &[u32]) -> Result<()> {
        json::check_whole(sequences.len(), self.length)?;
        let count = sequences.len() / self.length;
        if self.done + count > self.total {
            return Err(Error::Usage(format!(
                "{}: {} + {count} sequences are more than its header's {}",
                self.name, self.done, self.total
            )));
        }
        for (i, seq) in sequences.chunks_exact(self.length).enumerate() {
            if let Some(msg) = binary_cache::item_out_of_range(self.done + i, seq, self.num_items) {
                return Err(Error::Usage(format!("{}: {msg}", self.name)));
            }
            self.firsts.update(seq[0].to_le_bytes());
        }
        write_sequences(self.form, &mut self.w, sequences, self.length, self.done).map_err(|e| Error::io(&self.name, e))?;
        if self.output.is_none() {
            // Standard output: each batch goes out as it is appended.
            self.w.flush().map_err(|e| Error::io(&self.name, e))?;
        }
        self.done += count;
        Ok(())
    }

    pub fn done(&self) -> usize {
        self.done
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Writes the tail and commits the file (synced, renamed onto its target).
    pub fn finish(mut self) -> Result<()> {
        if self.done != self.total {
            return Err(Error::Usage(format!(
                "{}: {} of {} sequences were written; the cache is not finished",
                self.name, self.done, self.total
            )));
        }
        if hex(&self.firsts.clone().finalize()) != self.starts_sha256 {
            return Err(Error::Usage(format!(
                "{}: the sequences' first items do not hash to its header's starts_sha256",
                self.name
            )));
        }
        let name = self.name.clone();
        self.w.write_all(tail(self.form)).and_then(|()| self.w.flush()).map_err(|e| Error::io(&name, e))?;
        let CacheWriter { output, w, .. } = self;
        drop(w);
        match output {
            Some(out) => out.commit(),
            None => Ok(()),
        }
    }
}

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
                let (part, rest, offset) = read_head(path, &mut src)?;
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
        let mut seq = Vec::with_capacity(length);
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

/// What `convert` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    pub form: Form,
    pub sequences: usize,
    pub length: usize,
    /// The input was version 1: the output is version 2, its starts counted
    /// and hashed and its `divgpu_version` this program's.
    pub upgraded: bool,
}

/// Writes the cache at `input` to `output` in `form`, streaming: the bytes a
/// run writing that form would have written (the header's fields, the
/// writer's version and a part's `shard` included, are kept). A version 1
/// input becomes version 2 (`Converted::upgraded`). The output is checked
/// first (`safe_write::check_files`) and written atomically.
pub fn convert(input: &str, output: &str, form: Form) -> Result<Converted> {
    let outputs = [Named { option: "--out", path: output }];
    check_files(&outputs, &[Named { option: "the input", path: input }], form == Form::Json)?;
    let mut reader = CacheReader::open(input)?;
    let mut part = reader.part().clone();
    let upgraded = part.header.version < 2;
    if upgraded {
        let mut firsts = Sha256::new();
        let count = CacheReader::open(input)?.for_each_start(|_, s| {
            firsts.update(s.to_le_bytes());
            Ok(())
        })?;
        part.header = part.header.with_starts(count, &hex(&firsts.finalize()));
    }
    let mut writer = CacheWriter::create_streamed(output, &part, form, |push| {
        CacheReader::open(input)?.for_each_start(|_, s| push(s)).map(|_| ())
    })?;
    let mut batch = Batch::default();
    while reader.next_batch(batch_sequences(part.header.length), &mut batch)? > 0 {
        writer.append(&batch.sequences)?;
    }
    let sequences = writer.done();
    writer.finish()?;
    Ok(Converted { form, sequences, length: part.header.length, upgraded })
}

#[cfg(test)]
mod tests;
