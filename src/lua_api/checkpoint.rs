//! `LuaCheckpoint` (`cp`): the checkpoint of `run` (`durable::checkpoint`), or
//! the stream of `run --out -`, for Lua: `cp.done`, `cp.total`, `cp.path`,
//! `cp.notes` (lines for the user: a stale lock taken over, batches that
//! failed their check and are recomputed), `cp:append(sequences)`,
//! `cp:finish()`, `cp:close()` (ends it without finishing: the lock is
//! released, the checkpoint kept; `os.exit` runs no finaliser).
//!
//! `append` hands the batch to a writer thread and returns: formatting a batch
//! of long sequences as JSON takes the CPU longer than a GPU chunk (2,787 ×
//! 8,359 numbers: about half a second), and the driver's thread must go on
//! feeding the devices meanwhile. Commits run in order; at most one batch
//! waits behind the one being written (`append` blocks beyond that, so a slow
//! disk bounds memory). `finish` or any field waits for every commit, so what
//! Lua reads is on disk. The first failed commit ends the checkpoint: the
//! next `append` or `finish` returns it (an `append` sees it as soon as the
//! writer has failed), and every one after; nothing more is written, and the
//! fields go on saying what was committed before it.

use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use mlua::{Lua, UserData, UserDataFields};

use super::boundary::{methods_index, Methods};
use super::host_array::U32s;
use crate::durable::checkpoint::BatchSink;
use crate::error::{Error, Result};

type Checkpoint = Box<dyn BatchSink>;

/// The writer thread: it owns the checkpoint while batches are queued.
struct Writer {
    batches: SyncSender<Vec<u32>>,
    thread: JoinHandle<(Checkpoint, Result<()>)>,
    /// The first failure's message, set by the writer as it happens.
    failed: Arc<Mutex<Option<String>>>,
}

enum Slot {
    Idle(Checkpoint),
    Writing(Writer),
    /// A commit failed (its message): the checkpoint takes nothing more.
    Failed(String),
    Finished,
}

/// What the fields say: the checkpoint's figures when it was last idle.
#[derive(Clone, Default)]
struct Known {
    done: usize,
    total: usize,
    path: String,
    notes: Vec<String>,
}

pub struct LuaCheckpoint(Mutex<Slot>, Mutex<Known>);

fn failed(message: &str) -> Error {
    Error::Refused(format!("checkpoint: an earlier commit failed: {message}"))
}

impl LuaCheckpoint {
    pub fn new(cp: Checkpoint) -> Self {
        let known = Known { done: cp.done(), total: cp.total(), path: cp.path(), notes: cp.notes() };
        LuaCheckpoint(Mutex::new(Slot::Idle(cp)), Mutex::new(known))
    }

    /// The figures after every queued commit, or as they were before a
    /// failed one (which `append` and `finish` report).
    fn known(&self) -> Known {
        let now = self.with(|cp| Ok(Known { done: cp.done(), total: cp.total(), path: cp.path(), notes: cp.notes() }));
        let mut known = self.1.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Ok(k) = now {
            *known = k;
        }
        known.clone()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Slot>> {
        self.0.lock().map_err(|_| Error::Usage("checkpoint: poisoned by an earlier panic".into()))
    }

    /// Waits for every queued commit; then `f` on the checkpoint.
    fn with<T>(&self, f: impl FnOnce(&mut Checkpoint) -> Result<T>) -> Result<T> {
        let mut slot = self.lock()?;
        if matches!(&*slot, Slot::Writing(_)) {
            // (Idle is put back below, or Failed: never left as Finished.)
            let Slot::Writing(writer) = std::mem::replace(&mut *slot, Slot::Finished) else {
                return Err(Error::Usage("checkpoint: no commit in progress".into()));
            };
            drop(writer.batches); // the writer ends once the queue is empty
            match writer.thread.join() {
                Ok((cp, Ok(()))) => *slot = Slot::Idle(cp),
                Ok((_, Err(e))) => {
                    let message = e.to_string();
                    *slot = Slot::Failed(message.clone());
                    return Err(e);
                }
                Err(_) => {
                    *slot = Slot::Failed("the writer thread panicked".into());
                    return Err(failed("the writer thread panicked"));
                }
            }
        }
        match &mut *slot {
            Slot::Idle(cp) => f(cp),
            Slot::Failed(message) => Err(failed(message)),
            _ => Err(Error::Usage("checkpoint: already finished".into())),
        }
    }

    fn append(&self, sequences: Vec<u32>) -> Result<()> {
        let mut slot = self.lock()?;
        if matches!(&*slot, Slot::Idle(_)) {
            let Slot::Idle(mut cp) = std::mem::replace(&mut *slot, Slot::Finished) else {
                return Err(Error::Usage("checkpoint: not idle".into()));
            };
            // One batch may wait while another is written.
            let (batches, queue) = sync_channel::<Vec<u32>>(1);
            let failed = Arc::new(Mutex::new(None));
            let flag = Arc::clone(&failed);
            let thread = std::thread::Builder::new().name("divgpu-checkpoint".into()).spawn(move || {
                for batch in queue {
                    if let Err(e) = cp.append(&batch) {
                        if let Ok(mut f) = flag.lock() {
                            *f = Some(e.to_string());
                        }
                        return (cp, Err(e)); // later batches are dropped with the queue
                    }
                }
                (cp, Ok(()))
            });
            match thread {
                Ok(thread) => *slot = Slot::Writing(Writer { batches, thread, failed }),
                Err(e) => {
                    *slot = Slot::Failed(format!("could not start the writer thread: {e}"));
                    return Err(Error::Refused(format!("checkpoint: could not start the writer thread: {e}")));
                }
            }
        }
        match &*slot {
            Slot::Writing(writer) => {
                let known = writer.failed.lock().ok().and_then(|f| f.clone());
                if known.is_some() || writer.batches.send(sequences).is_err() {
                    // The writer has failed (and ended): collect its error.
                    drop(slot);
                    return self.with(|_| Ok(()));
                }
                Ok(())
            }
            Slot::Failed(message) => Err(failed(message)),
            _ => Err(Error::Usage("checkpoint: already finished".into())),
        }
    }
}

const TYPE: &str = "LuaCheckpoint";

impl LuaCheckpoint {
    fn finish(&self) -> Result<()> {
        self.with(|_| Ok(()))?;
        let mut slot = self.lock()?;
        match std::mem::replace(&mut *slot, Slot::Finished) {
            Slot::Idle(cp) => cp.finish(),
            Slot::Failed(message) => {
                *slot = Slot::Failed(message.clone());
                Err(failed(&message))
            }
            _ => Err(Error::Usage("checkpoint: already finished".into())),
        }
    }

    /// Waits for the commits queued (their failure is not raised: the
    /// caller is already ending), then drops the checkpoint and its lock.
    fn close(&self) -> Result<()> {
        let _ = self.with(|_| Ok(()));
        let mut slot = self.lock()?;
        if !matches!(&*slot, Slot::Failed(_)) {
            *slot = Slot::Finished;
        }
        Ok(())
    }
}

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    m.add(lua, "append", |_, this: &LuaCheckpoint, sequences: U32s| {
        Ok(this.append(sequences.as_slice("sequences")?.to_vec())?)
    })?;
    m.add(lua, "finish", |_, this: &LuaCheckpoint, ()| Ok(this.finish()?))?;
    m.add(lua, "close", |_, this: &LuaCheckpoint, ()| Ok(this.close()?))?;
    Ok(m)
}

impl UserData for LuaCheckpoint {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("done", |_, this| Ok(this.known().done));
        f.add_field_method_get("total", |_, this| Ok(this.known().total));
        f.add_field_method_get("path", |_, this| Ok(this.known().path));
        f.add_field_method_get("notes", |_, this| Ok(this.known().notes));
        methods_index(f, TYPE);
    }
}
