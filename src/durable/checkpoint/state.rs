//! What a checkpoint is made of: its files' names, `state.json` (`State`),
//! the records of `batches.jsonl` (`BatchRecord`), the `Checkpoint` itself,
//! and its lock and file helpers.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cache::cache_io::Form;
use crate::cache::header::Shard;
use crate::cache::json_reader::Sequences;
use crate::durable::lock::{Lock, Taken};
use crate::durable::safe_write::{resolve, Target};
use crate::error::{Error, Result};

pub const FORMAT: &str = "divgpu-checkpoint";
pub const VERSION: u32 = 2;
pub(super) const STATE: &str = "state.json";
pub(super) const PART: &str = "sequences.part";
pub(super) const BATCHES: &str = "batches.jsonl";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct State {
    pub(super) format: String,
    pub(super) version: u32,
    pub(super) contract: String,
    pub(super) num_items: usize,
    pub(super) dim: usize,
    pub(super) length: usize,
    pub(super) embeddings_sha256: String,
    pub(super) starts: usize,
    pub(super) starts_sha256: String,
    /// The divgpu that began the checkpoint (its cache header says so).
    #[serde(default)]
    pub(super) divgpu_version: String,
    /// Sequences committed: a summary of `batches.jsonl`, not trusted.
    pub(super) done: usize,
    /// Bytes of `sequences.part` committed: a summary, not trusted.
    pub(super) bytes: u64,
    /// A run of one shard: its place in the whole run (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) shard: Option<Shard>,
    /// The form of the cache (absent: JSON, as before there was another).
    #[serde(default, skip_serializing_if = "Form::is_json")]
    pub(super) form: Form,
}

/// One committed batch, a line of `batches.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct BatchRecord {
    /// Position of its first sequence among the job's starts.
    pub(super) first: usize,
    pub(super) sequences: usize,
    /// Offset in `sequences.part` just past its bytes.
    pub(super) end: u64,
    /// sha256 of its bytes in `sequences.part`.
    pub(super) sha256: String,
    /// sha256 of its starts (u32 little-endian).
    pub(super) starts_sha256: String,
}

pub struct Checkpoint {
    pub(super) target: Target,
    pub(super) dir: PathBuf,
    pub(super) state: State,
    pub(super) starts: Vec<u32>,
    /// `sequences.part` and `batches.jsonl`, open for appending; made by the first `append`.
    pub(super) part: Option<File>,
    pub(super) log: Option<File>,
    pub(super) notes: Vec<String>,
    /// Held until the checkpoint is dropped (after `finish`, or on any end).
    pub(super) _lock: Lock,
}

pub(super) fn display(p: &Path) -> String {
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
pub(super) fn open_own(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Creates a file of the checkpoint folder; never an existing one or a link.
pub(super) fn create_own(path: &Path) -> Result<File> {
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
pub(super) fn read_json_batch(
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
