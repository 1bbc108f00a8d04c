//! `CheckpointHandle`: the checkpoint of `run` (`contract::checkpoint`) for
//! Lua: `cp.done`, `cp.total`, `cp.path`, `cp:append(sequences)`, `cp:finish()`.
//!
//! `append` commits in a writer thread and returns at once: formatting a batch
//! of long sequences as JSON takes the CPU longer than a GPU chunk (2,787 ×
//! 8,359 numbers: about half a second), and the driver's thread must go on
//! feeding the devices meanwhile. Commits run one after another, in order (a
//! second `append` chains behind the first); `finish` or any field waits for
//! them all (and raises the first error), so what Lua reads is on disk.

use std::sync::Mutex;
use std::thread::JoinHandle;

use mlua::{UserData, UserDataFields, UserDataMethods, UserDataRef};

use super::arrays::HostArray;
use crate::contract::checkpoint::Checkpoint;
use crate::error::{Error, Result};

enum Slot {
    Idle(Checkpoint),
    /// A commit in the writer thread; it hands the checkpoint back.
    Writing(JoinHandle<(Checkpoint, Result<()>)>),
    Finished,
}

pub struct CheckpointHandle(Mutex<Slot>);

impl CheckpointHandle {
    pub fn new(cp: Checkpoint) -> Self {
        CheckpointHandle(Mutex::new(Slot::Idle(cp)))
    }

    /// Waits for the commit in progress, if any; then `f` on the checkpoint.
    fn with<T>(&self, f: impl FnOnce(&mut Checkpoint) -> Result<T>) -> Result<T> {
        let mut slot = self.0.lock().map_err(|_| Error::Usage("checkpoint: poisoned by an earlier panic".into()))?;
        if let Slot::Writing(_) = &*slot {
            let Slot::Writing(handle) = std::mem::replace(&mut *slot, Slot::Finished) else { unreachable!() };
            let (cp, committed) =
                handle.join().map_err(|_| Error::Usage("checkpoint: the writer thread panicked".into()))?;
            *slot = Slot::Idle(cp);
            committed?;
        }
        match &mut *slot {
            Slot::Idle(cp) => f(cp),
            _ => Err(Error::Usage("checkpoint: already finished".into())),
        }
    }
}

impl UserData for CheckpointHandle {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("done", |_, this| Ok(this.with(|cp| Ok(cp.done()))?));
        f.add_field_method_get("total", |_, this| Ok(this.with(|cp| Ok(cp.total()))?));
        f.add_field_method_get("path", |_, this| Ok(this.with(|cp| Ok(cp.path()))?));
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("append", |_, this, sequences: UserDataRef<HostArray>| {
            let sequences = sequences.as_u32("sequences")?.to_vec();
            let mut slot = this.0.lock().map_err(|_| Error::Usage("checkpoint: poisoned".into()))?;
            // Chained behind the commit in progress (not waited for here: with
            // several devices, two batches often finish together).
            *slot = Slot::Writing(match std::mem::replace(&mut *slot, Slot::Finished) {
                Slot::Idle(mut cp) => std::thread::spawn(move || {
                    let committed = cp.append(&sequences);
                    (cp, committed)
                }),
                Slot::Writing(previous) => std::thread::spawn(move || {
                    let (mut cp, committed) = match previous.join() {
                        Ok(done) => done,
                        Err(_) => std::panic::resume_unwind(Box::new("checkpoint writer panicked")),
                    };
                    // After a failed commit nothing more is written: the error stays.
                    let committed = committed.and_then(|()| cp.append(&sequences));
                    (cp, committed)
                }),
                Slot::Finished => return Err(Error::Usage("checkpoint: already finished".into()).into()),
            });
            Ok(())
        });
        m.add_method("finish", |_, this, ()| {
            this.with(|_| Ok(()))?;
            let mut slot = this.0.lock().map_err(|_| Error::Usage("checkpoint: poisoned".into()))?;
            match std::mem::replace(&mut *slot, Slot::Finished) {
                Slot::Idle(cp) => Ok(cp.finish()?),
                _ => Err(Error::Usage("checkpoint: already finished".into()).into()),
            }
        });
    }
}
