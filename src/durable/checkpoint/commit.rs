//! A checkpoint written: each batch appended and recorded, then the finished
//! cache installed onto the output.

use std::ffi::OsStr;
use std::io::{BufWriter, Seek, Write};
use std::path::Path;
use std::sync::Arc;

use sha2::Digest;

use crate::durable::safe_write::replace_in;
use crate::durable::hashing::HashingWriter;
use crate::cache::json::{self};
use crate::cache::cache_io::{self};
use crate::durable::safe_write::{install, remove_stale_temporaries};
use crate::durable::folder::Folder;
use crate::cache::json::starts_sha256;
use crate::util::hex;
use crate::error::{Error, Result};
use super::sink::BatchSink;
use super::state::{STATE, PART, BATCHES, State, BatchRecord, Checkpoint, display};

impl Checkpoint {
    /// The folder and its files, made by the first `append`.
    pub(super) fn create_files(&mut self) -> Result<()> {
        let made = |e| Error::io(display(&self.dir), e);
        self.target.dir.make_dir(&self.dir_name, 0o777).map_err(made)?;
        let folder: Folder = self.target.dir.open_at(Path::new(&self.dir_name), true).map_err(made)?;
        self.folder = Some(Arc::new(folder));
        let mut part = self.create_own(PART)?;
        part.write_all(&self.head()?).map_err(|e| Error::io(display(&self.dir.join(PART)), e))?;
        self.log = Some(self.create_own(BATCHES)?);
        self.part = Some(part);
        Ok(())
    }

    pub(super) fn write_state(&self, state: &State) -> Result<()> {
        let mut text = serde_json::to_vec_pretty(state).map_err(|e| Error::Usage(format!("checkpoint state: {e}")))?;
        text.push(b'\n');
        replace_in(&self.folder()?, OsStr::new(STATE), &text)
    }

    /// The batch's bytes appended and synced, then its record: the commit.
    pub(super) fn commit(&mut self, sequences: &[u32], count: usize) -> Result<()> {
        let (length, done) = (self.state.length, self.state.done);
        let part_name = display(&self.dir.join(PART));
        let log_name = display(&self.dir.join(BATCHES));
        let (Some(part), Some(log)) = (self.part.as_mut(), self.log.as_mut()) else {
            return Err(Error::Usage("checkpoint: sequences.part is not open".into()));
        };
        let mut w = BufWriter::with_capacity(1 << 20, HashingWriter::new(&*part));
        cache_io::write_sequences(self.state.form, &mut w, sequences, length, done).map_err(|e| Error::io(&part_name, e))?;
        let digest = hex(&w.into_inner().map_err(|e| Error::io(&part_name, e.into_error()))?.hasher.finalize());
        part.sync_data().map_err(|e| Error::io(&part_name, e))?;
        let end = part.stream_position().map_err(|e| Error::io(&part_name, e))?;
        let rec = BatchRecord {
            first: done,
            sequences: count,
            end,
            sha256: digest,
            starts_sha256: starts_sha256(&self.starts[done..done + count]),
        };
        let line = serde_json::to_string(&rec).map_err(|e| Error::Usage(format!("checkpoint record: {e}")))? + "\n";
        log.write_all(line.as_bytes()).map_err(|e| Error::io(&log_name, e))?;
        log.sync_data().map_err(|e| Error::io(&log_name, e))?;
        self.state.done += count;
        self.state.bytes = end;
        Ok(())
    }
}

impl Checkpoint {
    /// Commits the next whole sequences (module comment), then the summary.
    pub fn append(&mut self, sequences: &[u32]) -> Result<()> {
        let length = self.state.length;
        json::check_whole(sequences.len(), length)?;
        let count = sequences.len() / length;
        let done = self.state.done;
        if done + count > self.state.starts {
            return Err(Error::Usage(format!("checkpoint: {done} + {count} sequences are more than the job's {}", self.state.starts)));
        }
        if let Some(i) = (0..count).find(|&i| sequences[i * length] != self.starts[done + i]) {
            return Err(Error::Usage(format!(
                "checkpoint: sequence {} starts at {}, not at its start {}: batches out of order",
                done + i,
                sequences[i * length],
                self.starts[done + i]
            )));
        }
        if self.part.is_none() {
            self.create_files()?;
        }
        if count > 0 {
            self.commit(sequences, count)?;
        }
        self.write_state(&self.state)
    }

    /// Once every sequence is committed: closes the sequences, syncs, renames
    /// the file onto OUT (atomically) and removes the checkpoint folder.
    pub fn finish(mut self) -> Result<()> {
        if self.state.done != self.state.starts {
            return Err(Error::Usage(format!(
                "checkpoint: {} of {} sequences are done; the cache cannot be written yet",
                self.state.done, self.state.starts
            )));
        }
        if self.part.is_none() {
            // No sequence at all (an empty job): the header alone.
            self.append(&[])?;
        }
        let part_path = self.dir.join(PART);
        let mut part = self.part.take().ok_or_else(|| Error::Usage("checkpoint: sequences.part is not open".into()))?;
        part.write_all(cache_io::tail(self.state.form)).map_err(|e| Error::io(display(&part_path), e))?;
        let folder = self.folder()?;
        install(&part, &folder, OsStr::new(PART), &self.target)?;
        // The cache is in place; what is left is bookkeeping, and a leftover
        // folder is recognised as finished by the next `open`.
        self.log = None;
        let _ = folder.unlink(OsStr::new(BATCHES));
        let _ = folder.unlink(OsStr::new(STATE));
        remove_stale_temporaries(&folder);
        self.folder = None;
        drop(folder);
        let _ = self.target.dir.remove_dir(&self.dir_name);
        Ok(())
    }

    pub fn done(&self) -> usize {
        self.state.done
    }

    pub fn total(&self) -> usize {
        self.state.starts
    }

    /// The checkpoint folder, `OUT.checkpoint`.
    pub fn path(&self) -> String {
        display(&self.dir)
    }

    pub fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
}

impl BatchSink for Checkpoint {
    fn append(&mut self, sequences: &[u32]) -> Result<()> {
        Checkpoint::append(self, sequences)
    }
    fn finish(self: Box<Self>) -> Result<()> {
        Checkpoint::finish(*self)
    }
    fn done(&self) -> usize {
        Checkpoint::done(self)
    }
    fn total(&self) -> usize {
        Checkpoint::total(self)
    }
    fn path(&self) -> String {
        Checkpoint::path(self)
    }
    fn notes(&self) -> Vec<String> {
        Checkpoint::notes(self)
    }
}
