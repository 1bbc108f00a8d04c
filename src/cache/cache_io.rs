//! Both forms of the cache, streamed (docs/formats.md#binary-cache): `Form`,
//! and `CacheWriter`, which writes either through the one safe write path.
//! `cache_reader::CacheReader` opens either, `convert` turns one into the
//! other, byte-identical to a run that wrote the other directly. The
//! checkpoint of `run` writes its bytes with `head`, `write_sequences` and
//! `tail`, as `CacheWriter` does, so a run can finish into either form.
//!
//! Memory: a reader holds its header, a read buffer (1 MiB for JSON, 256 KiB
//! of rows for binary) and the sequences asked for; a writer a 1 MiB buffer
//! and, for the binary index, one block of 64 Ki entries. Nothing grows with
//! the number of sequences.

use std::fs::File;
use std::io::{BufWriter, Write};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cache::binary_cache::{self, ReadAt, MAGIC};
use crate::cache::json::{self};
use crate::durable::safe_write::{is_stream, stream_file, Output, STDOUT};
use crate::cache::header::PartHeader;
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
pub(crate) fn form_of(path: &str, src: &impl ReadAt) -> Result<Form> {
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
        if form == Form::Binary && is_stream(path) {
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
        let (output, file, name) = if is_stream(path) {
            let name = if path == STDOUT { "standard output".to_string() } else { path.to_string() };
            (None, stream_file(path)?, name)
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

#[cfg(test)]
mod tests;
