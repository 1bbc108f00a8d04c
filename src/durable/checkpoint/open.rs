//! A checkpoint opened: a fresh one, or a resume that verifies every
//! committed byte and drops what fails (module comment of `checkpoint`).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::durable::hashing::Hashing;
use crate::cache::binary_reader;
use crate::cache::json::CacheHeader;
use crate::cache::cache_io::{self, Form};
use crate::durable::lock::Lock;
use crate::durable::folder::me;
use crate::durable::safe_write::{resolve, TEMP_PREFIX};
use crate::cache::header::{PartHeader, Shard};
use crate::cache::json::starts_sha256;
use crate::util::hex;
use crate::error::{Error, Result};
use super::state::{FORMAT, VERSION, STATE, PART, BATCHES, State, BatchRecord, Checkpoint, display, lock_note, not_yours, read_json_batch};

/// The most `state.json` may hold (it is a few hundred bytes).
const STATE_MAX: u64 = 1 << 20;

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
            let (lock, taken) = Lock::acquire_for(&resolve(out)?, false, |_| {})?;
            let note = lock_note(lock.path(), &taken);
            let mut cp = Checkpoint::open_form(out, Some(lock), header, shard, starts, restart, form)?;
            cp.notes.splice(0..0, note);
            return Ok(cp);
        };
        let target = resolve(out)?;
        if lock.path() != target.sibling(".lock") {
            return Err(Error::Usage(format!("checkpoint: the lock {} is not {out}'s", lock.path().display())));
        }
        let dir = target.sibling(".checkpoint");
        let dir_name = target.sibling_name(".checkpoint");
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
            Checkpoint { target, dir, dir_name, folder: None, state, starts: starts.to_vec(), part: None, log: None, notes: Vec::new(), _lock: lock };
        let head = cp.head()?;
        cp.state.bytes = head.len() as u64;
        if !cp.open_folder()? {
            return Ok(cp);
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

    /// Opens the checkpoint folder on disk, if there is one (false: none),
    /// through the output's folder and never through a link; a folder, or a
    /// file of it, that is not the caller's is refused naming its owner.
    fn open_folder(&mut self) -> Result<bool> {
        let not_made = || {
            Error::input(
                display(&self.dir),
                "is not a checkpoint folder divgpu made (a link or a file): remove it, or write elsewhere with --out",
            )
        };
        let st = match self.target.dir.stat_at(&self.dir_name).map_err(|e| Error::io(display(&self.dir), e))? {
            None => return Ok(false),
            Some(st) if !st.is_dir() => return Err(not_made()),
            Some(st) => st,
        };
        if st.uid != me() {
            return Err(not_yours(&self.dir, st.uid));
        }
        let folder = self.target.dir.open_at(Path::new(&self.dir_name), true).map_err(|_| not_made())?;
        if !folder.stat().is_ok_and(|s| s.same_file(&st)) {
            return Err(not_made());
        }
        for name in [STATE, PART, BATCHES] {
            if let Some(f) = folder.stat_at(OsStr::new(name)).map_err(|e| Error::io(display(&self.dir), e))? {
                if f.uid != me() {
                    return Err(not_yours(&self.dir.join(name), f.uid));
                }
            }
        }
        self.folder = Some(Arc::new(folder));
        Ok(true)
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
        let folder = self.folder().map_err(|e| e.to_string())?;
        let file = match folder.open_file(OsStr::new(STATE), libc::O_RDONLY | libc::O_NONBLOCK, 0) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(format!("{STATE} is a symbolic link, not a file divgpu made"))
            }
            Err(e) => return Err(format!("{STATE} cannot be read ({e})")),
        };
        let mut text = Vec::new();
        file.take(STATE_MAX).read_to_end(&mut text).map_err(|e| format!("{STATE} cannot be read ({e})"))?;
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
        let mut part = match self.open_own(PART) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(format!("{PART} cannot be opened ({e})")),
        };
        let mut disk_head = vec![0u8; head.len()];
        if part.read_exact(&mut disk_head).is_err() || disk_head != head {
            return Err(format!("{PART} does not start with this run's cache header"));
        }
        let mut log = match self.open_own(BATCHES) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.create_own(BATCHES).map_err(|e| e.to_string())?,
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

    /// Removes the checkpoint folder: only the files this module writes (and
    /// its temporaries, which no one else writes under the lock). A folder
    /// holding anything else is refused naming what is foreign, before
    /// anything is removed.
    pub(super) fn discard(&mut self) -> Result<()> {
        self.part = None;
        self.log = None;
        let folder = self.folder()?;
        let names = folder.names().map_err(|e| Error::io(display(&self.dir), e))?;
        let ours = |n: &OsStr| {
            [STATE, PART, BATCHES].iter().any(|k| n == OsStr::new(k))
                || (n.to_str().is_some_and(|s| s.starts_with(TEMP_PREFIX))
                    && folder.stat_at(n).ok().flatten().is_some_and(|s| s.is_file() && s.uid == me()))
        };
        if let Some(foreign) = names.iter().find(|n| !ours(n)) {
            return Err(Error::input(
                display(&self.dir.join(foreign)),
                "is not a file of divgpu's checkpoint: nothing was removed; move it away (or write elsewhere with \
                 --out), then run again",
            ));
        }
        for name in &names {
            match folder.unlink(name) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(display(&self.dir.join(name)), e)),
                _ => {}
            }
        }
        self.folder = None;
        self.target.dir.remove_dir(&self.dir_name).map_err(|e| Error::io(display(&self.dir), e))?;
        self.state.done = 0;
        self.state.bytes = self.head()?.len() as u64;
        Ok(())
    }

}
