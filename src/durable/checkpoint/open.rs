//! A checkpoint opened: a fresh one, or a resume that verifies every
//! committed byte and drops what fails (module comment of `checkpoint`).

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use sha2::{Digest, Sha256};

use crate::cache::binary_reader;
use crate::cache::cache_io::{self, Form};
use crate::cache::header::{PartHeader, Shard};
use crate::cache::json::CacheHeader;
use crate::cache::json::starts_sha256;
use crate::durable::hashing::Hashing;
use crate::durable::lock::Lock;
use crate::durable::safe_write::{remove_stale_temporaries, resolve};
use crate::error::{Error, Result};
use crate::util::hex;
use super::state::{FORMAT, VERSION, STATE, PART, BATCHES, State, BatchRecord, Checkpoint, display, lock_path, lock_note, open_own, create_own, read_json_batch};

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
    pub(super) fn header(&self) -> CacheHeader {
        let s = &self.state;
        CacheHeader::new(&s.contract, s.num_items, s.dim, s.length, &s.embeddings_sha256, &self.starts)
    }

    /// The cache's bytes before its first sequence (the binary form's
    /// starts and index included: 4·(S + N) bytes, beside the run's table).
    pub(super) fn head(&self) -> Result<Vec<u8>> {
        let part = PartHeader { header: self.header(), shard: self.state.shard.clone() };
        cache_io::head(self.state.form, &part, &self.starts)
    }

    /// The state on disk, checked against this job: None where there is none
    /// (a run killed before its first summary: `sequences.part`'s header
    /// then tells the job), Err(why) when it cannot be resumed.
    pub(super) fn read_state(&self) -> std::result::Result<Option<State>, String> {
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
    pub(super) fn differs(&self, disk: &State) -> Option<String> {
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
    pub(super) fn resume(&mut self, head: &[u8]) -> std::result::Result<bool, String> {
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
    pub(super) fn verify_batches(&mut self, part: &mut File, log: &mut File, head: u64) -> std::result::Result<(usize, u64, u64), String> {
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
    pub(super) fn verify_batch(&self, part: &mut File, rec: &BatchRecord, done: usize, start: u64) -> std::result::Result<(), String> {
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
    pub(super) fn discard(&mut self) -> Result<()> {
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

}
