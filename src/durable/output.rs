//! An output being written (`Output`: a temporary renamed onto its target
//! under the output's lock, or a stream), and the writes built on it:
//! `write_atomically`, `write_together`, `replace_in` (module comment of
//! `safe_write`).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use crate::durable::folder::Folder;
use crate::durable::lock::Lock;
use crate::durable::target::{kept_mode, resolve, sync_folder, Target};
use crate::durable::stream::{is_stream, stream_file, STDOUT};
use crate::durable::temp::{remove_stale_temporaries, Temp};
use crate::error::{Error, Result};

/// Where an output's bytes go while it is written.
enum Sink {
    /// A temporary beside the target, renamed onto it by `commit`, the
    /// output's lock held until then.
    File { target: Target, temp: Temp, _lock: Option<Lock> },
    /// A stream (`-`, a descriptor), written where it stands.
    Stream { given: String },
}

/// An output being written: a temporary file beside its target, renamed onto
/// it by `commit`, or a stream; dropped without a commit, the temporary is
/// removed (and the lock released).
pub struct Output {
    sink: Sink,
    file: File,
}

impl Output {
    /// Resolves and checks `path`, takes its lock (`OUT.lock`, as `run`
    /// does: refused while another command writes it), removes stale
    /// temporaries in its folder, and creates the temporary (mode: the
    /// replaced file's, else 0666 less the umask). A stream is opened as
    /// one (`stream_file`).
    pub fn create(path: &str) -> Result<Output> {
        Output::create_locked(path, true)
    }

    /// `create`; `lock`: false where the caller holds the output's lock already.
    pub fn create_locked(path: &str, lock: bool) -> Result<Output> {
        if is_stream(path) {
            let file = stream_file(path)?;
            return Ok(Output { sink: Sink::Stream { given: path.to_string() }, file });
        }
        let target = resolve(path)?;
        let lock = if lock { Some(take_lock(&target)?) } else { None };
        remove_stale_temporaries(&target.dir);
        let mode = kept_mode(&target);
        let temp = Temp::create(target.dir.clone(), mode.unwrap_or(0o666)).map_err(|e| {
            Error::input(target.describe(), format!("cannot create a temporary file in {}: {e}", target.folder.display()))
        })?;
        if let Some(mode) = mode {
            // An existing file keeps its mode exactly (creation applied the umask).
            let _ = temp.file().set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode));
        }
        let file = temp.file().try_clone().map_err(|e| Error::io(target.describe(), e))?;
        Ok(Output { sink: Sink::File { target, temp, _lock: lock }, file })
    }

    /// The path as given.
    pub fn given(&self) -> &str {
        match &self.sink {
            Sink::File { target, .. } => &target.given,
            Sink::Stream { given } => given,
        }
    }

    /// The output for messages (the link's target too, where it is a link).
    pub fn describe(&self) -> String {
        match &self.sink {
            Sink::File { target, .. } => target.describe(),
            Sink::Stream { given } if given == STDOUT => "standard output".into(),
            Sink::Stream { given } => given.clone(),
        }
    }

    /// Where the bytes are while it is written: the temporary file's path
    /// (the stats are streamed there: `tail -f` it), or the stream's.
    pub fn temp_path(&self) -> PathBuf {
        match &self.sink {
            Sink::File { temp, .. } => temp.path(),
            Sink::Stream { given } => PathBuf::from(given),
        }
    }

    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Synced, renamed onto the target, the folder synced (a stream: flushed).
    pub fn commit(self) -> Result<()> {
        let Output { sink, mut file } = self;
        match sink {
            Sink::Stream { given } => file.flush().map_err(|e| Error::input(given, format!("write failed: {e}"))),
            Sink::File { target, temp, _lock } => {
                let shown = temp.path();
                temp.commit_onto(&target.dir, &target.name).map_err(|e| {
                    let step = if e.raw_os_error() == Some(libc::EIO) { "sync" } else { "rename" };
                    Error::input(
                        target.describe(),
                        format!("{step} failed ({e}); the old file is kept, {} is removed", shown.display()),
                    )
                })?;
                sync_folder(&target.dir)
            }
        }
    }
}

/// The output's lock, `OUT.lock` beside it; a stale one taken over says so.
fn take_lock(target: &Target) -> Result<Lock> {
    let (lock, taken) = Lock::acquire_for(target, false, |_| {})?;
    if let Some(note) = crate::durable::lock::note(lock.path(), &taken) {
        eprintln!("divgpu: {note}");
    }
    Ok(lock)
}

/// A failed write's message; a crate error raised by the writer (merge: a part
/// found bad while it is copied) is passed on as it is.
fn write_error(path: &str, e: Box<dyn std::error::Error>) -> Error {
    match e.downcast::<Error>() {
        Ok(e) => *e,
        Err(e) => Error::input(path, format!("write failed: {e}")),
    }
}

/// Writes `path` the safe way (module comment): all of it or nothing; the
/// old file stays as it was on any error. A stream is written to.
pub fn write_atomically(
    path: &str,
    write: impl FnOnce(&mut BufWriter<File>) -> std::result::Result<(), Box<dyn std::error::Error>>,
) -> Result<()> {
    write_together(&[path], |w| write(&mut w[0]))
}

/// Writes several outputs as one (a table and its sidecar): every one
/// resolved, locked and given its temporary before a byte is written, then
/// all written (`write` gets a writer per path, in order), then committed in
/// order. One that cannot be made (a sidecar's name taken by a folder) or
/// written leaves every file as it was: no partial output.
pub fn write_together(
    paths: &[&str],
    write: impl FnOnce(&mut [BufWriter<File>]) -> std::result::Result<(), Box<dyn std::error::Error>>,
) -> Result<()> {
    let mut outs = paths.iter().map(|p| Output::create(p)).collect::<Result<Vec<Output>>>()?;
    let mut writers = Vec::with_capacity(outs.len());
    for out in &mut outs {
        let shown = out.describe();
        writers.push(BufWriter::new(out.file().try_clone().map_err(|e| Error::io(&shown, e))?));
    }
    let first = outs.first().map(Output::describe).unwrap_or_default();
    write(&mut writers).map_err(|e| write_error(&first, e))?;
    for (w, out) in writers.iter_mut().zip(&outs) {
        w.flush().map_err(|e| Error::input(out.describe(), format!("write failed: {e}")))?;
    }
    drop(writers);
    outs.into_iter().try_for_each(Output::commit)
}

/// Replaces `name` in `dir` whole (a temporary renamed onto it, never a link
/// followed: a link at `name` is itself replaced): the checkpoint's own
/// files, under the lock its run holds.
pub fn replace_in(dir: &Arc<Folder>, name: &OsStr, bytes: &[u8]) -> Result<()> {
    let shown = dir.real_path().join(name).display().to_string();
    let mut temp = Temp::create(dir.clone(), 0o666).map_err(|e| Error::io(&shown, e))?;
    temp.file_mut().write_all(bytes).map_err(|e| Error::io(&shown, e))?;
    temp.commit_onto(dir, name).map_err(|e| Error::io(&shown, e))?;
    sync_folder(dir)
}

