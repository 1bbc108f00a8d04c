//! `LuaUpload` (`upload`): a table upload in flight (`ctx:begin_upload`),
//! polled like a recorder's submission, so that a driver feeding several
//! devices can upload to all of them at once (`device.await`).

use mlua::{Lua, UserData, UserDataFields};

use super::boundary::{methods_index, Methods};
use super::recorder::rest_of_timeout;
use crate::gpu::transfer::PendingUpload;

/// None: an empty array, nothing to copy.
pub struct LuaUpload(pub Option<PendingUpload>);

const TYPE: &str = "LuaUpload";

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    // upload:done() -> true once the copy has finished.
    m.add(lua, "done", |_, this: &LuaUpload, ()| match &this.0 {
        Some(pending) => Ok(pending.is_done()?),
        None => Ok(true),
    })?;
    // upload:wait([spent]) -> false (an upload has no GPU timestamps, as
    // rec:wait without them); `spent`: seconds already spent polling it,
    // taken off the context's timeout.
    m.add_mut(lua, "wait", |_, this: &mut LuaUpload, spent: Option<f64>| {
        if let Some(pending) = &mut this.0 {
            let limit = rest_of_timeout(pending.timeout(), spent);
            pending.wait_at_most(limit)?;
        }
        Ok(false)
    })?;
    Ok(m)
}

impl UserData for LuaUpload {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        methods_index(f, TYPE);
    }
}
