//! `CheckpointHandle`: the checkpoint of `run` (`contract::checkpoint`) for
//! Lua: `cp.done`, `cp.total`, `cp.path`, `cp:append(sequences)`, `cp:finish()`.
//!
//! `append` commits in a writer thread and returns at once: formatting a batch
//! of long sequences as JSON takes the CPU longer than a GPU chunk (2,787 ×
//! 8,359 numbers: about half a second), and the driver's thread must go on
//! feeding the devices meanwhile. One commit is in progress at a time; the
//! next `append`, `finish` or any field waits for it (and raises its error),
//! so what Lua reads is always what is on disk.

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
            this.with(|_| Ok(()))?;
            let mut slot = this.0.lock().map_err(|_| Error::Usage("checkpoint: poisoned".into()))?;
            let Slot::Idle(mut cp) = std::mem::replace(&mut *slot, Slot::Finished) else {
                return Err(Error::Usage("checkpoint: already finished".into()).into());
            };
            *slot = Slot::Writing(std::thread::spawn(move || {
                let committed = cp.append(&sequences);
                (cp, committed)
            }));
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
