//! What a checkpoint is made of: its files' names, `state.json` (`State`),
//! the records of `batches.jsonl` (`BatchRecord`), the `Checkpoint` itself,
//! and its lock and file helpers.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cache::cache_io::Form;
use crate::durable::folder::{me, stat_of, user_name, Folder};
use crate::durable::lock::{self, Lock, Taken};
use crate::durable::safe_write::Target;
use crate::cache::header::Shard;
use crate::cache::json_reader::Sequences;
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
    /// `OUT.checkpoint`, for messages; its name in the output's folder, and
    /// the folder itself once opened or made (every file of it is opened
    /// through it, never through a link).
    pub(super) dir: PathBuf,
    pub(super) dir_name: OsString,
    pub(super) folder: Option<Arc<Folder>>,
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


/// The note for a lock taken over, or waited for.
pub fn lock_note(path: &Path, taken: &Taken) -> Option<String> {
    lock::note(path, taken)
}

/// The refusal of a file or folder of the checkpoint that another user owns.
pub(super) fn not_yours(path: &Path, uid: u32) -> Error {
    Error::input(
        display(path),
        format!(
            "belongs to {}, not to the caller: divgpu resumes only its caller's own checkpoint (nothing was read or \
             removed); remove it, or write elsewhere with --out",
            user_name(uid)
        ),
    )
}

impl Checkpoint {
    /// The checkpoint folder, open.
    pub(super) fn folder(&self) -> Result<Arc<Folder>> {
        self.folder.clone().ok_or_else(|| Error::Usage(format!("checkpoint: {} is not open", display(&self.dir))))
    }

    /// A file of the checkpoint folder, opened read-write through it without
    /// following a link; one of another user's is refused (an error naming
    /// it and its owner).
    pub(super) fn open_own(&self, name: &str) -> std::io::Result<File> {
        let folder = self.folder().map_err(std::io::Error::other)?;
        let file = folder.open_file(OsStr::new(name), libc::O_RDWR | libc::O_NONBLOCK, 0)?;
        let st = stat_of(file.as_raw_fd())?;
        if st.uid != me() {
            return Err(std::io::Error::other(not_yours(&self.dir.join(name), st.uid).to_string()));
        }
        if !st.is_file() {
            return Err(std::io::Error::other(format!("{} is {}, not a file divgpu made", name, st.kind())));
        }
        Ok(file)
    }

    /// Creates a file of the checkpoint folder; never an existing one or a link.
    pub(super) fn create_own(&self, name: &str) -> Result<File> {
        self.folder()?.create_new(OsStr::new(name), 0o666).map_err(|e| Error::io(display(&self.dir.join(name)), e))
    }
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
