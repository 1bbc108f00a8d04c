//! The checkpoint of `run`, so that an interrupted run loses at most the
//! batches in progress (and those the Lua handle's writer thread has not yet
//! committed, `lua_api/checkpoint.rs`). It is the folder `OUT.checkpoint/`
//! beside the output `OUT` (beside a link's target when OUT is a link), and
//! `OUT.lock` beside it keeps it to one writer (`durable::lock`):
//!
//! - `sequences.part`: exactly the bytes the cache will have, up to the last
//!   committed batch, in the run's form (`cache_io::Form`): the JSON header
//!   and one sequence per line, or the binary head (header, starts, index)
//!   and fixed-width rows (docs/formats.md#checkpoint);
//! - `batches.jsonl`: one record per committed batch, appended and synced
//!   after the batch's bytes: its first sequence, its count, the offset where
//!   its bytes end, their sha256, and the sha256 of its starts. The records
//!   are the truth about what is committed;
//! - `state.json`: the job it belongs to (the table's sha256, N, D, the
//!   contract, the length, the starts' count and sha256, the divgpu version:
//!   everything that decides the bytes; method, layout and batch size do not),
//!   and a summary `done`/`bytes` rewritten after each commit for people and
//!   progress polls, never trusted on resume.
//!
//! A resume verifies every committed byte: each batch's sha256, its
//! sequences (length, items, and first items equal to this run's starts at
//! its place) against its record. From the first batch that fails (bytes
//! flipped, cut short, a torn record), the rest is dropped and recomputed, with
//! a note; a `done` in `state.json` that claims more than the records prove is
//! noted and ignored. A kill between appending and recording leaves bytes past
//! the last record, which a resume truncates. The finished cache is
//! `sequences.part` plus the closing bytes, synced and renamed onto OUT: the
//! file is streamed batch by batch (no N × L array in memory) and never
//! copied. The sequences are stored in the order of the starts, so a resume
//! may use another batch size, method or layout. A run of one shard (`run
//! --shard`) has its part's starts here, and its place in the whole run
//! (`shard`, in `state.json` and in the cache header: `cache::shard`).
//!
//! `StdoutCache` is the same interface for `run --out -`: the cache streamed
//! to standard output batch by batch (`cache_io::CacheWriter`), in either
//! form, with no checkpoint (nothing resumes).

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::durable::atomic::write_atomically;
use crate::durable::hashing::{Hashing, HashingWriter};
use crate::cache::binary_reader;
use crate::cache::json::{self, CacheHeader};
use crate::cache::cache_io::{self, CacheWriter, Form};
use crate::durable::lock::{Lock, Taken};
use crate::durable::safe_write::{install, remove_stale_temporaries, resolve, Target};
use crate::cache::header::{PartHeader, Shard};
use crate::cache::json::starts_sha256;
use crate::cache::json_reader::Sequences;
use crate::util::hex;
use crate::error::{Error, Result};

pub const FORMAT: &str = "divgpu-checkpoint";
pub const VERSION: u32 = 2;
const STATE: &str = "state.json";
const PART: &str = "sequences.part";
const BATCHES: &str = "batches.jsonl";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    format: String,
    version: u32,
    contract: String,
    num_items: usize,
    dim: usize,
    length: usize,
    embeddings_sha256: String,
    starts: usize,
    starts_sha256: String,
    /// The divgpu that began the checkpoint (its cache header says so).
    #[serde(default)]
    divgpu_version: String,
    /// Sequences committed: a summary of `batches.jsonl`, not trusted.
    done: usize,
    /// Bytes of `sequences.part` committed: a summary, not trusted.
    bytes: u64,
    /// A run of one shard: its place in the whole run (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shard: Option<Shard>,
    /// The form of the cache (absent: JSON, as before there was another).
    #[serde(default, skip_serializing_if = "Form::is_json")]
    form: Form,
}

/// One committed batch, a line of `batches.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct BatchRecord {
    /// Position of its first sequence among the job's starts.
    first: usize,
    sequences: usize,
    /// Offset in `sequences.part` just past its bytes.
    end: u64,
    /// sha256 of its bytes in `sequences.part`.
    sha256: String,
    /// sha256 of its starts (u32 little-endian).
    starts_sha256: String,
}

/// What the Lua handle drives: the checkpoint, or the stream to standard output.
pub trait BatchSink: Send {
    /// Commits the next whole sequences (`[count × length]`, in the order of the starts).
    fn append(&mut self, sequences: &[u32]) -> Result<()>;
    /// Writes the finished cache.
    fn finish(self: Box<Self>) -> Result<()>;
    fn done(&self) -> usize;
    fn total(&self) -> usize;
    fn path(&self) -> String;
    /// Lines for the user: a stale lock taken over, batches recomputed.
    fn notes(&self) -> Vec<String>;
}

pub struct Checkpoint {
    target: Target,
    dir: PathBuf,
    state: State,
    starts: Vec<u32>,
    /// `sequences.part` and `batches.jsonl`, open for appending; made by the first `append`.
    part: Option<File>,
    log: Option<File>,
    notes: Vec<String>,
    /// Held until the checkpoint is dropped (after `finish`, or on any end).
    _lock: Lock,
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

/// `OUT.lock`, the lock of the output `out`.
pub fn lock_path(out: &str) -> Result<PathBuf> {
    Ok(resolve(out)?.sibling(".lock"))
}

/// The note for a lock taken over, or waited for.
pub fn lock_note(path: &Path, taken: &Taken) -> Option<String> {
    match taken {
        Taken::Free => None,
        Taken::Stale(h) => Some(format!(
            "took over the stale lock {} of pid {} on host {} (that process is gone)",
            path.display(),
            h.pid,
            h.host
        )),
        Taken::Waited(h) => Some(format!("{} was released by pid {} on host {}", path.display(), h.pid, h.host)),
    }
}

/// Opens a file of the checkpoint folder without following a link.
fn open_own(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Creates a file of the checkpoint folder; never an existing one or a link.
fn create_own(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(display(path), e))
}

/// The `count` JSON sequences of a batch from `bytes` (at file offset
/// `start`, the first at position `done`), each given to `check`; nothing
/// but whitespace after them. `shape` is (length, num_items).
fn read_json_batch(
    bytes: &mut impl Read,
    start: u64,
    done: usize,
    count: usize,
    (length, num_items): (usize, usize),
    check: &mut impl FnMut(usize, &[u32]) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    let mut reader = Sequences::after(bytes, start, done);
    let mut seq = Vec::with_capacity(length);
    for i in done..done + count {
        if !reader.next(&mut seq, length, num_items)? {
            return Err(format!("sequence {i} is missing"));
        }
        check(i, &seq)?;
    }
    if !reader.at_end()? {
        return Err("bytes past its last sequence".into());
    }
    Ok(())
}

impl Checkpoint {
    /// The checkpoint of the job (`header`, `starts`) for the output `out`:
    /// the one on disk when it belongs to this job (`done()` sequences are then
    /// kept), else a new, empty one (nothing but the lock is written before
    /// the first `append`). A checkpoint of another job, or an unreadable one,
    /// is an error unless `restart`, which discards it.
    pub fn open(out: &str, header: &CacheHeader, starts: &[u32], restart: bool) -> Result<Checkpoint> {
        Checkpoint::open_shard(out, header, None, starts, restart)
    }

    /// `open` for a run of one shard: `starts` are the part's, `shard` its
    /// place in the whole run; the cache it writes is that part.
    pub fn open_shard(
        out: &str,
        header: &CacheHeader,
        shard: Option<Shard>,
        starts: &[u32],
        restart: bool,
    ) -> Result<Checkpoint> {
        Checkpoint::open_form(out, None, header, shard, starts, restart, Form::Json)
    }

    /// `open_shard` with the output's lock already held (taken by the caller
    /// before reading the table, so that a second run is refused at once).
    pub fn open_locked(
        out: &str,
        lock: Lock,
        header: &CacheHeader,
        shard: Option<Shard>,
        starts: &[u32],
        restart: bool,
    ) -> Result<Checkpoint> {
        Checkpoint::open_form(out, Some(lock), header, shard, starts, restart, Form::Json)
    }

    /// The checkpoint of a run whose cache is written in `form` (its
    /// `sequences.part` holds that form's bytes): `open_shard` where `lock`
    /// is None, `open_locked` where it is the output's lock.
    pub fn open_form(
        out: &str,
        lock: Option<Lock>,
        header: &CacheHeader,
        shard: Option<Shard>,
        starts: &[u32],
        restart: bool,
        form: Form,
    ) -> Result<Checkpoint> {
        let Some(lock) = lock else {
            let path = lock_path(out)?;
            let (lock, taken) = Lock::acquire(&path, false, |_| {})?;
            let mut cp = Checkpoint::open_form(out, Some(lock), header, shard, starts, restart, form)?;
            cp.notes.splice(0..0, lock_note(&path, &taken));
            return Ok(cp);
        };
        let target = resolve(out)?;
        if lock.path() != target.sibling(".lock") {
            return Err(Error::Usage(format!("checkpoint: the lock {} is not {out}'s", lock.path().display())));
        }
        let dir = target.sibling(".checkpoint");
        let state = State {
            format: FORMAT.into(),
            version: VERSION,
            contract: header.contract.clone(),
            num_items: header.num_items,
            dim: header.dim,
            length: header.length,
            embeddings_sha256: header.embeddings_sha256.clone(),
            starts: starts.len(),
            starts_sha256: starts_sha256(starts),
            divgpu_version: env!("CARGO_PKG_VERSION").into(),
            done: 0,
            bytes: 0,
            shard,
            form,
        };
        let mut cp =
            Checkpoint { target, dir, state, starts: starts.to_vec(), part: None, log: None, notes: Vec::new(), _lock: lock };
        let head = cp.head()?;
        cp.state.bytes = head.len() as u64;
        match fs::symlink_metadata(&cp.dir) {
            Err(_) => return Ok(cp),
            Ok(m) if !m.is_dir() => {
                return Err(Error::input(
                    display(&cp.dir),
                    "is not a checkpoint folder divgpu made (a link or a file): remove it, or write elsewhere with --out",
                ))
            }
            Ok(_) => {}
        }
        if restart {
            cp.discard()?;
            return Ok(cp);
        }
        match cp.resume(&head) {
            Ok(true) => Ok(cp),
            Ok(false) => {
                // Finished (the cache renamed, the rest not yet removed) or nothing committed.
                cp.discard()?;
                Ok(cp)
            }
            Err(msg) => Err(Error::input(
                display(&cp.dir),
                format!("{msg}; pass --restart to discard it (or --out to write elsewhere)"),
            )),
        }
    }

    /// The cache header of this job (version 2: its starts, this divgpu).
    fn header(&self) -> CacheHeader {
        let s = &self.state;
        CacheHeader::new(&s.contract, s.num_items, s.dim, s.length, &s.embeddings_sha256, &self.starts)
    }

    /// The cache's bytes before its first sequence (the binary form's
    /// starts and index included: 4·(S + N) bytes, beside the run's table).
    fn head(&self) -> Result<Vec<u8>> {
        let part = PartHeader { header: self.header(), shard: self.state.shard.clone() };
        cache_io::head(self.state.form, &part, &self.starts)
    }

    /// The state on disk, checked against this job: None where there is none
    /// (a run killed before its first summary: `sequences.part`'s header
    /// then tells the job), Err(why) when it cannot be resumed.
    fn read_state(&self) -> std::result::Result<Option<State>, String> {
        let text = match fs::read(self.dir.join(STATE)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{STATE} cannot be read ({e})")),
        };
        let disk: State = serde_json::from_slice(&text).map_err(|e| format!("{STATE} is damaged ({e})"))?;
        if disk.format != FORMAT {
            return Err("not a divgpu checkpoint".into());
        }
        if disk.version != VERSION {
            return Err(format!(
                "a checkpoint of version {} (this divgpu resumes version {VERSION}, whose batches carry checksums)",
                disk.version
            ));
        }
        if let Some(what) = self.differs(&disk) {
            return Err(format!("it belongs to a run of {what}"));
        }
        Ok(Some(disk))
    }

    /// How the checkpoint on disk differs from this job, if it does.
    fn differs(&self, disk: &State) -> Option<String> {
        let want = &self.state;
        let name = |s: &Option<Shard>| s.as_ref().map_or("no --shard".into(), |s| format!("--shard {}/{}", s.index, s.count));
        let whole = |s: &Option<Shard>| s.as_ref().map_or(0, |s| s.starts);
        if disk.embeddings_sha256 != want.embeddings_sha256 || disk.num_items != want.num_items || disk.dim != want.dim {
            Some(format!(
                "another table (sha256 {}, {}x{}; this run's: sha256 {}, {}x{})",
                disk.embeddings_sha256, disk.num_items, disk.dim, want.embeddings_sha256, want.num_items, want.dim
            ))
        } else if disk.form != want.form {
            Some(format!("--format {} (this run's: {})", disk.form.name(), want.form.name()))
        } else if disk.contract != want.contract {
            Some(format!("contract {} (this run's: {})", disk.contract, want.contract))
        } else if disk.length != want.length {
            Some(format!("--length {} (this run's: {})", disk.length, want.length))
        } else if disk.shard.as_ref().map(|s| (s.index, s.count)) != want.shard.as_ref().map(|s| (s.index, s.count)) {
            Some(format!("{} (this run's: {})", name(&disk.shard), name(&want.shard)))
        } else if disk.shard != want.shard {
            Some(format!("other --starts ({} starts in all; this run has {})", whole(&disk.shard), whole(&want.shard)))
        } else if disk.starts != want.starts || disk.starts_sha256 != want.starts_sha256 {
            Some(format!("other --starts ({} starts; this run has {})", disk.starts, want.starts))
        } else if disk.divgpu_version != want.divgpu_version {
            Some(format!("divgpu {:?} (this is {}: the cache header would differ)", disk.divgpu_version, want.divgpu_version))
        } else {
            None
        }
    }

    /// Takes over the checkpoint on disk, verified (module comment): true when
    /// work is kept, false when there is nothing to resume, Err(why) when it
    /// cannot be resumed.
    fn resume(&mut self, head: &[u8]) -> std::result::Result<bool, String> {
        let disk = self.read_state()?;
        let mut part = match open_own(&self.dir.join(PART)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(format!("{PART} cannot be opened ({e})")),
        };
        let mut disk_head = vec![0u8; head.len()];
        if part.read_exact(&mut disk_head).is_err() || disk_head != head {
            return Err(format!("{PART} does not start with this run's cache header"));
        }
        let mut log = match open_own(&self.dir.join(BATCHES)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_own(&self.dir.join(BATCHES)).map_err(|e| e.to_string())?,
            Err(e) => return Err(format!("{BATCHES} cannot be opened ({e})")),
        };
        let failed_before = self.notes.len();
        let (done, bytes, log_len) = self.verify_batches(&mut part, &mut log, head.len() as u64)?;
        // (Where a batch failed, its note says it all.)
        let claimed = disk.map_or(0, |d| d.done);
        if claimed > done && self.notes.len() == failed_before {
            self.notes.push(format!(
                "{}: {STATE} says {claimed} sequences are done, but its batch records prove {done}: resuming from {done}",
                display(&self.dir)
            ));
        }
        // Drop what is not proven: bytes past the last good batch, records after it.
        part.set_len(bytes).map_err(|e| format!("{PART}: {e}"))?;
        part.seek(SeekFrom::End(0)).map_err(|e| format!("{PART}: {e}"))?;
        log.set_len(log_len).map_err(|e| format!("{BATCHES}: {e}"))?;
        log.seek(SeekFrom::End(0)).map_err(|e| format!("{BATCHES}: {e}"))?;
        self.state.done = done;
        self.state.bytes = bytes;
        self.part = Some(part);
        self.log = Some(log);
        Ok(true)
    }

    /// Checks the records of `batches.jsonl` in order against the bytes of
    /// `sequences.part`; returns the sequences, part bytes and log bytes of
    /// the good prefix, with a note where it ends early.
    fn verify_batches(&mut self, part: &mut File, log: &mut File, head: u64) -> std::result::Result<(usize, u64, u64), String> {
        let (mut done, mut bytes, mut log_len) = (0usize, head, 0u64);
        let mut lines = BufReader::new(&*log);
        let mut line = String::new();
        loop {
            line.clear();
            let n = lines.read_line(&mut line).map_err(|e| format!("{BATCHES}: {e}"))?;
            if n == 0 {
                break;
            }
            let why = match serde_json::from_str::<BatchRecord>(line.trim_end()) {
                _ if !line.ends_with('\n') => Err("its record was cut short".to_string()),
                Err(e) => Err(format!("its record is damaged ({e})")),
                Ok(rec) => self.verify_batch(part, &rec, done, bytes).map(|()| rec),
            };
            match why {
                Ok(rec) => {
                    done += rec.sequences;
                    bytes = rec.end;
                    log_len += n as u64;
                }
                Err(why) => {
                    self.notes.push(format!(
                        "{}: the batch from sequence {done} failed its check ({why}): recomputing from sequence {done}",
                        display(&self.dir)
                    ));
                    break;
                }
            }
        }
        Ok((done, bytes, log_len))
    }

    /// One batch: in place, its bytes' sha256, its sequences and their starts.
    fn verify_batch(&self, part: &mut File, rec: &BatchRecord, done: usize, start: u64) -> std::result::Result<(), String> {
        let (length, n, form) = (self.state.length, self.state.num_items, self.state.form);
        let row_bytes = 4 * length as u64 * rec.sequences as u64;
        if rec.first != done
            || rec.sequences == 0
            || rec.end <= start
            || done + rec.sequences > self.starts.len()
            || (form == Form::Binary && rec.end - start != row_bytes)
        {
            return Err(format!("it says sequences {}..{} ending at byte {}", rec.first, rec.first + rec.sequences, rec.end));
        }
        part.seek(SeekFrom::Start(start)).map_err(|e| e.to_string())?;
        let mut bytes = Hashing::new((&*part).take(rec.end - start));
        let mut starts = Sha256::new();
        let mut check = |i: usize, seq: &[u32]| {
            if seq[0] != self.starts[i] {
                return Err(format!("sequence {i} starts at {}, not at this run's start {}", seq[0], self.starts[i]));
            }
            starts.update(seq[0].to_le_bytes());
            Ok(())
        };
        match form {
            Form::Json => read_json_batch(&mut bytes, start, done, rec.sequences, (length, n), &mut check)?,
            Form::Binary => binary_reader::read_rows(&mut bytes, done, rec.sequences, length, n, &mut check)?,
        }
        if bytes.inner.limit() != 0 {
            return Err("sequences.part is cut short".into());
        }
        if hex(&bytes.hasher.finalize()) != rec.sha256 {
            return Err("its bytes do not match their sha256".into());
        }
        if hex(&starts.finalize()) != rec.starts_sha256 {
            return Err("its starts do not match their sha256".into());
        }
        Ok(())
    }

    /// Removes the checkpoint folder: only the files this module writes, so a
    /// folder holding anything else is an error rather than a deleted folder.
    fn discard(&mut self) -> Result<()> {
        self.part = None;
        self.log = None;
        for name in [STATE, PART, BATCHES] {
            let p = self.dir.join(name);
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(display(&p), e)),
            }
        }
        remove_stale_temporaries(&self.dir);
        fs::remove_dir(&self.dir).map_err(|e| Error::io(display(&self.dir), e))?;
        self.state.done = 0;
        self.state.bytes = self.head()?.len() as u64;
        Ok(())
    }

    /// The folder and its files, made by the first `append`.
    fn create_files(&mut self) -> Result<()> {
        fs::create_dir(&self.dir).map_err(|e| Error::io(display(&self.dir), e))?;
        let mut part = create_own(&self.dir.join(PART))?;
        part.write_all(&self.head()?).map_err(|e| Error::io(display(&self.dir.join(PART)), e))?;
        self.log = Some(create_own(&self.dir.join(BATCHES))?);
        self.part = Some(part);
        Ok(())
    }

    fn write_state(&self, state: &State) -> Result<()> {
        let path = display(&self.dir.join(STATE));
        write_atomically(&path, |w| {
            serde_json::to_writer_pretty(&mut *w, state)?;
            w.write_all(b"\n")?;
            Ok(())
        })
    }

    /// The batch's bytes appended and synced, then its record: the commit.
    fn commit(&mut self, sequences: &[u32], count: usize) -> Result<()> {
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
        install(&part, &part_path, &self.target)?;
        // The cache is in place; what is left is bookkeeping, and a leftover
        // folder is recognised as finished by the next `open`.
        self.log = None;
        let _ = fs::remove_file(self.dir.join(BATCHES));
        let _ = fs::remove_file(self.dir.join(STATE));
        remove_stale_temporaries(&self.dir);
        let _ = fs::remove_dir(&self.dir);
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

/// `run --out -`: the cache streamed to standard output, batch by batch.
pub struct StdoutCache {
    writer: CacheWriter,
}

impl StdoutCache {
    pub fn new(header: &CacheHeader, shard: Option<Shard>, starts: &[u32]) -> Result<StdoutCache> {
        StdoutCache::new_form(header, shard, starts, Form::Json)
    }

    /// The cache of the job (`header`, its `shard`, `starts`) in `form` on standard output.
    pub fn new_form(header: &CacheHeader, shard: Option<Shard>, starts: &[u32], form: Form) -> Result<StdoutCache> {
        let h = CacheHeader::new(&header.contract, header.num_items, header.dim, header.length, &header.embeddings_sha256, starts);
        let writer = CacheWriter::create(crate::durable::safe_write::STDOUT, &PartHeader { header: h, shard }, form, starts)?;
        Ok(StdoutCache { writer })
    }
}

impl BatchSink for StdoutCache {
    fn append(&mut self, sequences: &[u32]) -> Result<()> {
        self.writer.append(sequences)
    }

    fn finish(self: Box<Self>) -> Result<()> {
        self.writer.finish()
    }

    fn done(&self) -> usize {
        self.writer.done()
    }

    fn total(&self) -> usize {
        self.writer.total()
    }

    fn path(&self) -> String {
        "standard output".into()
    }

    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests;
