//! The checkpoint of `run`, so that an interrupted run loses at most the
//! batches in progress (and those the Lua handle's writer thread has not yet
//! committed, `lua_api/checkpoint.rs`). It is the folder `OUT.checkpoint/` beside the output `OUT`:
//!
//! - `sequences.part`: exactly the bytes the cache will have, up to the last
//!   finished batch (the header, then one sequence per line, SPEC section 4);
//! - `state.json`: the job it belongs to (the table's sha256, N, D, the
//!   contract, the length, the starts' count and sha256: everything that
//!   decides the bytes; method, layout and batch size do not) and how many
//!   sequences and bytes of `sequences.part` are committed.
//!
//! A batch is committed by appending its lines to `sequences.part`, syncing
//! it, then replacing `state.json` atomically; a kill between the two leaves
//! bytes past the committed length, which a resume truncates. The finished
//! cache is `sequences.part` plus the closing bytes, renamed onto `OUT`: the
//! file is streamed batch by batch (no N × L array in memory) and never copied.
//! The sequences are stored in the order of the starts, so a resume may use
//! another batch size, method or layout. A run of one shard (`run --shard`)
//! has its part's starts here, and its place in the whole run (`shard`, in
//! `state.json` and in the cache header: `contract::shard`).

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::atomic::write_atomically;
use super::cache::{self, CacheHeader};
use super::shard::{self, starts_sha256, Shard};
use crate::error::{Error, Result};

pub const FORMAT: &str = "divgpu-checkpoint";
pub const VERSION: u32 = 1;
const STATE: &str = "state.json";
const PART: &str = "sequences.part";

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
    /// Sequences committed (the first `done` starts).
    done: usize,
    /// Bytes of `sequences.part` committed.
    bytes: u64,
    /// A run of one shard: its place in the whole run (absent otherwise, and
    /// in the state files of earlier versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shard: Option<Shard>,
}

pub struct Checkpoint {
    out: PathBuf,
    dir: PathBuf,
    state: State,
    /// `sequences.part`, open for appending; made by the first `append`.
    part: Option<File>,
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

impl Checkpoint {
    /// The checkpoint of the job (`header`, `starts`) for the output `out`:
    /// the one on disk when it belongs to this job (`done()` sequences are then
    /// kept), else a new, empty one (nothing is written before the first
    /// `append`). A checkpoint of another job, or a damaged one, is an error
    /// unless `restart`, which discards it.
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
        let out_path = PathBuf::from(out);
        let folder = match out_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !folder.is_dir() {
            return Err(Error::input(out, format!("folder {} does not exist", folder.display())));
        }
        if out_path.file_name().is_none() {
            return Err(Error::input(out, "not a file path"));
        }
        let dir = PathBuf::from(format!("{out}.checkpoint"));
        let head = shard::head(header, shard.as_ref())?;
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
            done: 0,
            bytes: head.len() as u64,
            shard,
        };
        let mut cp = Checkpoint { out: out_path, dir, state, part: None };
        if !cp.dir.exists() {
            return Ok(cp);
        }
        if restart {
            cp.discard()?;
            return Ok(cp);
        }
        match cp.resume(&head) {
            Ok(Some(())) => Ok(cp),
            Ok(None) => {
                // A run that renamed its finished cache and was stopped before
                // removing the rest: nothing left to resume.
                cp.discard()?;
                Ok(cp)
            }
            Err(msg) => Err(Error::input(
                display(&cp.dir),
                format!("{msg}; pass --restart to discard it (or --out to write elsewhere)"),
            )),
        }
    }

    /// Takes over the checkpoint on disk: Some(()) when it belongs to this job,
    /// None when it had finished, Err(why) when it cannot be resumed.
    fn resume(&mut self, head: &[u8]) -> std::result::Result<Option<()>, String> {
        let state_path = self.dir.join(STATE);
        let part_path = self.dir.join(PART);
        let text = match fs::read(&state_path) {
            Ok(t) => t,
            Err(_) if !part_path.exists() => return Ok(None), // an empty folder
            Err(e) => return Err(format!("{STATE} cannot be read ({e})")),
        };
        let disk: State = serde_json::from_slice(&text).map_err(|e| format!("{STATE} is damaged ({e})"))?;
        if disk.format != FORMAT || disk.version != VERSION {
            return Err(format!("not a divgpu checkpoint of version {VERSION}"));
        }
        let want = &self.state;
        let differs: Option<String> = if disk.embeddings_sha256 != want.embeddings_sha256
            || disk.num_items != want.num_items
            || disk.dim != want.dim
        {
            Some(format!(
                "another table (sha256 {}, {}x{}; this run's: sha256 {}, {}x{})",
                disk.embeddings_sha256, disk.num_items, disk.dim, want.embeddings_sha256, want.num_items, want.dim
            ))
        } else if disk.contract != want.contract {
            Some(format!("contract {} (this run's: {})", disk.contract, want.contract))
        } else if disk.length != want.length {
            Some(format!("--length {} (this run's: {})", disk.length, want.length))
        } else if disk.shard.as_ref().map(|s| (s.index, s.count)) != want.shard.as_ref().map(|s| (s.index, s.count)) {
            let name = |s: &Option<Shard>| s.as_ref().map_or("no --shard".into(), |s| format!("--shard {}/{}", s.index, s.count));
            Some(format!("{} (this run's: {})", name(&disk.shard), name(&want.shard)))
        } else if disk.shard != want.shard {
            let whole = |s: &Option<Shard>| s.as_ref().map_or(0, |s| s.starts);
            Some(format!("other --starts ({} starts in all; this run has {})", whole(&disk.shard), whole(&want.shard)))
        } else if disk.starts != want.starts || disk.starts_sha256 != want.starts_sha256 {
            Some(format!("other --starts ({} starts; this run has {})", disk.starts, want.starts))
        } else {
            None
        };
        if let Some(what) = differs {
            return Err(format!("it belongs to a run of {what}"));
        }
        if disk.done > disk.starts || disk.bytes < head.len() as u64 {
            return Err(format!("{STATE} is damaged (done {} of {}, {} bytes)", disk.done, disk.starts, disk.bytes));
        }
        let mut part = match OpenOptions::new().read(true).write(true).open(&part_path) {
            Ok(f) => f,
            Err(_) if disk.done == disk.starts => return Ok(None),
            Err(e) => return Err(format!("{PART} cannot be opened ({e})")),
        };
        let len = part.metadata().map_err(|e| format!("{PART}: {e}"))?.len();
        if len < disk.bytes {
            return Err(format!("{PART} has {len} bytes, fewer than the {} committed", disk.bytes));
        }
        let mut disk_head = vec![0u8; head.len()];
        part.read_exact(&mut disk_head).map_err(|e| format!("{PART}: {e}"))?;
        if disk_head != head {
            return Err(format!("{PART} does not start with this run's cache header"));
        }
        // Drop what a killed run appended after its last commit.
        part.set_len(disk.bytes).map_err(|e| format!("{PART}: {e}"))?;
        part.seek(SeekFrom::End(0)).map_err(|e| format!("{PART}: {e}"))?;
        self.state = disk;
        self.part = Some(part);
        Ok(Some(()))
    }

    /// Removes the checkpoint folder: only the files this module writes, so a
    /// folder holding anything else is an error rather than a deleted folder.
    fn discard(&mut self) -> Result<()> {
        self.part = None;
        for name in [STATE, PART] {
            let p = self.dir.join(name);
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(display(&p), e)),
            }
        }
        self.remove_stale_temporaries();
        fs::remove_dir(&self.dir).map_err(|e| Error::io(display(&self.dir), e))?;
        self.state.done = 0;
        Ok(())
    }

    /// Temporary state files of a run killed while replacing `state.json`.
    fn remove_stale_temporaries(&self) {
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with(&format!(".{STATE}.")) && name.ends_with(".tmp") {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
    }

    /// Sequences already committed (the first `done()` starts).
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

    /// Commits the next whole sequences (`[count × length]`, in the order of
    /// the starts): appended, synced, then recorded in `state.json`.
    pub fn append(&mut self, sequences: &[u32]) -> Result<()> {
        let length = self.state.length;
        cache::check_whole(sequences.len(), length)?;
        let count = sequences.len() / length;
        if self.state.done + count > self.state.starts {
            return Err(Error::Usage(format!(
                "checkpoint: {} + {count} sequences are more than the job's {}",
                self.state.done, self.state.starts
            )));
        }
        let part_path = self.dir.join(PART);
        let part_name = display(&part_path);
        if self.part.is_none() {
            fs::create_dir_all(&self.dir).map_err(|e| Error::io(display(&self.dir), e))?;
            let header = self.header();
            let mut f = File::create(&part_path).map_err(|e| Error::io(&part_name, e))?;
            f.write_all(&shard::head(&header, self.state.shard.as_ref())?).map_err(|e| Error::io(&part_name, e))?;
            self.part = Some(f);
        }
        let part = self.part.as_mut().ok_or_else(|| Error::Usage("checkpoint: sequences.part is not open".into()))?;
        let mut w = BufWriter::with_capacity(1 << 20, &*part);
        cache::write_sequences(&mut w, sequences, length, self.state.done).map_err(|e| Error::io(&part_name, e))?;
        w.flush().map_err(|e| Error::io(&part_name, e))?;
        drop(w);
        part.sync_data().map_err(|e| Error::io(&part_name, e))?;
        let bytes = part.stream_position().map_err(|e| Error::io(&part_name, e))?;
        let mut next = self.state.clone();
        next.done += count;
        next.bytes = bytes;
        self.write_state(&next)?;
        self.state = next;
        Ok(())
    }

    fn header(&self) -> CacheHeader {
        CacheHeader {
            format: cache::FORMAT.into(),
            version: cache::VERSION,
            contract: self.state.contract.clone(),
            num_items: self.state.num_items,
            dim: self.state.dim,
            length: self.state.length,
            embeddings_sha256: self.state.embeddings_sha256.clone(),
        }
    }

    fn write_state(&self, state: &State) -> Result<()> {
        let path = display(&self.dir.join(STATE));
        write_atomically(&path, |w| {
            serde_json::to_writer_pretty(&mut *w, state)?;
            w.write_all(b"\n")?;
            Ok(())
        })
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
        let part_path = self.dir.join(PART);
        let part_name = display(&part_path);
        if self.part.is_none() {
            // No sequence at all (an empty job): the header alone.
            self.append(&[])?;
        }
        let mut part = self.part.take().ok_or_else(|| Error::Usage("checkpoint: sequences.part is not open".into()))?;
        part.write_all(cache::TAIL).map_err(|e| Error::io(&part_name, e))?;
        part.sync_all().map_err(|e| Error::io(&part_name, e))?;
        drop(part);
        let out = display(&self.out);
        fs::rename(&part_path, &self.out).map_err(|e| Error::io(&out, e))?;
        // The cache is in place; what is left is bookkeeping, and a leftover
        // folder is recognised as finished by the next `open`.
        let _ = fs::remove_file(self.dir.join(STATE));
        self.remove_stale_temporaries();
        let _ = fs::remove_dir(&self.dir);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::contract::test_support::header;

    fn tmp(name: &str) -> PathBuf {
        crate::contract::test_support::tmp("checkpoint", name)
    }

    const STARTS: [u32; 4] = [5, 0, 7, 2];
    const SEQS: [u32; 12] = [5, 1, 2, 0, 3, 4, 7, 8, 6, 2, 1, 0];

    fn reference(dir: &Path) -> Vec<u8> {
        let p = display(&dir.join("reference.json"));
        cache::write(&p, &header(3, "aa"), &SEQS).unwrap();
        fs::read(&p).unwrap()
    }

    #[test]
    fn streamed_in_batches_equals_the_whole_write() {
        let d = tmp("stream");
        let out = display(&d.join("out.json"));
        let mut cp = Checkpoint::open(&out, &header(3, "aa"), &STARTS, false).unwrap();
        assert_eq!(cp.done(), 0);
        assert!(!cp.dir.exists(), "nothing is written before the first batch");
        cp.append(&SEQS[..3]).unwrap();
        cp.append(&SEQS[3..]).unwrap();
        cp.finish().unwrap();
        assert_eq!(fs::read(&out).unwrap(), reference(&d));
        assert!(!PathBuf::from(format!("{out}.checkpoint")).exists());
        // Twin: batches committed out of order give other bytes.
        let out2 = display(&d.join("out2.json"));
        let mut cp = Checkpoint::open(&out2, &header(3, "aa"), &STARTS, false).unwrap();
        cp.append(&SEQS[6..]).unwrap();
        cp.append(&SEQS[..6]).unwrap();
        cp.finish().unwrap();
        assert_ne!(fs::read(&out2).unwrap(), reference(&d));
    }

    #[test]
    fn a_resume_after_a_kill_mid_batch_gives_the_same_bytes() {
        let d = tmp("resume");
        let out = display(&d.join("out.json"));
        let mut cp = Checkpoint::open(&out, &header(3, "aa"), &STARTS, false).unwrap();
        cp.append(&SEQS[..6]).unwrap();
        drop(cp);
        // A batch cut by kill -9: appended but never committed.
        let mut f = OpenOptions::new().append(true).open(d.join("out.json.checkpoint").join(PART)).unwrap();
        f.write_all(b",\n[7,8,").unwrap();
        drop(f);
        let mut cp = Checkpoint::open(&out, &header(3, "aa"), &STARTS, false).unwrap();
        assert_eq!(cp.done(), 2);
        cp.append(&SEQS[6..9]).unwrap();
        drop(cp);
        let cp = Checkpoint::open(&out, &header(3, "aa"), &STARTS, false).unwrap();
        assert_eq!(cp.done(), 3);
        assert!(cp.finish().is_err(), "finish before every sequence is done");
        let mut cp = Checkpoint::open(&out, &header(3, "aa"), &STARTS, false).unwrap();
        assert!(cp.append(&SEQS[6..]).is_err(), "more sequences than the job has");
        cp.append(&SEQS[9..]).unwrap();
        cp.finish().unwrap();
        assert_eq!(fs::read(&out).unwrap(), reference(&d));
    }

    #[test]
    fn another_job_is_refused_and_restart_discards_it() {
        let d = tmp("refuse");
        let out = display(&d.join("out.json"));
        let mut cp = Checkpoint::open(&out, &header(3, "aa"), &STARTS, false).unwrap();
        cp.append(&SEQS[..3]).unwrap();
        drop(cp);
        let err = |h: &CacheHeader, s: &[u32]| Checkpoint::open(&out, h, s, false).err().map(|e| e.to_string());
        assert!(err(&header(3, "bb"), &STARTS).unwrap().contains("another table (sha256 aa"));
        assert!(err(&header(4, "aa"), &STARTS).unwrap().contains("--length 3 (this run's: 4)"));
        assert!(err(&header(3, "aa"), &[5, 0, 2, 7]).unwrap().contains("other --starts"));
        let mut h16 = header(3, "aa");
        h16.contract = "fp16".into();
        assert!(err(&h16, &STARTS).unwrap().contains("contract fp32"));
        assert!(err(&header(3, "bb"), &STARTS).unwrap().ends_with("pass --restart to discard it (or --out to write elsewhere)"));
        // Twin: the same job resumes.
        assert_eq!(Checkpoint::open(&out, &header(3, "aa"), &STARTS, false).unwrap().done(), 1);
        let cp = Checkpoint::open(&out, &header(3, "bb"), &STARTS, true).unwrap();
        assert_eq!(cp.done(), 0);
        assert!(!cp.dir.exists());
    }

    #[test]
    fn a_damaged_checkpoint_is_refused() {
        let d = tmp("damaged");
        let out = display(&d.join("out.json"));
        let mut cp = Checkpoint::open(&out, &header(3, "aa"), &STARTS, false).unwrap();
        cp.append(&SEQS[..6]).unwrap();
        drop(cp);
        let part = d.join("out.json.checkpoint").join(PART);
        let len = fs::metadata(&part).unwrap().len();
        OpenOptions::new().write(true).open(&part).unwrap().set_len(len - 2).unwrap();
        let e = Checkpoint::open(&out, &header(3, "aa"), &STARTS, false).err().unwrap().to_string();
        assert!(e.contains("fewer than the") && e.contains("--restart"), "{e}");
        fs::write(d.join("out.json.checkpoint").join(STATE), "{").unwrap();
        let e = Checkpoint::open(&out, &header(3, "aa"), &STARTS, false).err().unwrap().to_string();
        assert!(e.contains("state.json is damaged"), "{e}");
        // A foreign file in the folder: --restart refuses to delete the folder.
        fs::write(d.join("out.json.checkpoint").join("notes.txt"), "mine").unwrap();
        assert!(Checkpoint::open(&out, &header(3, "aa"), &STARTS, true).is_err());
        assert!(d.join("out.json.checkpoint").join("notes.txt").exists());
    }

    #[test]
    fn a_missing_folder_is_an_error_before_any_work() {
        let e = Checkpoint::open("/nonexistent-divgpu/out.json", &header(3, "aa"), &STARTS, false).err().unwrap();
        assert!(e.to_string().contains("does not exist"));
    }
}
