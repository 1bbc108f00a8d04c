//! `CheckpointHandle`: the checkpoint of `run` (`contract::checkpoint`) for
//! Lua: `cp.done`, `cp.total`, `cp.path`, `cp:append(sequences)`, `cp:finish()`.

use mlua::{UserData, UserDataFields, UserDataMethods, UserDataRef};

use super::arrays::HostArray;
use crate::contract::checkpoint::Checkpoint;
use crate::error::Error;

/// None once `finish` has written the cache.
pub struct CheckpointHandle(pub Option<Checkpoint>);

impl CheckpointHandle {
    fn get(&self) -> mlua::Result<&Checkpoint> {
        self.0.as_ref().ok_or_else(|| Error::Usage("checkpoint: already finished".into()).into())
    }
}

impl UserData for CheckpointHandle {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("done", |_, this| Ok(this.get()?.done()));
        f.add_field_method_get("total", |_, this| Ok(this.get()?.total()));
        f.add_field_method_get("path", |_, this| Ok(this.get()?.path()));
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method_mut("append", |_, this, sequences: UserDataRef<HostArray>| {
            let cp = this.0.as_mut().ok_or_else(|| Error::Usage("checkpoint: already finished".into()))?;
            Ok(cp.append(sequences.as_u32("sequences")?)?)
        });
        m.add_method_mut("finish", |_, this, ()| {
            let cp = this.0.take().ok_or_else(|| Error::Usage("checkpoint: already finished".into()))?;
            Ok(cp.finish()?)
        });
    }
}
