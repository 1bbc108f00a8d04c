//! `LuaLock` (`lock`): `OUT.lock` held for Lua (`durable::lock`), taken by
//! `files.lock(out, { wait, on_wait })` before the table is read;
//! `lock.note` (a stale lock taken over, a wait), `lock.path`,
//! `lock:release()`; given to `files.checkpoint(out, { lock = lock })`.

use std::sync::Mutex;

use mlua::{Lua, Table as LuaTable, UserData, UserDataFields};

use super::boundary::{methods_index, Methods};

use crate::durable::checkpoint::lock_note;
use crate::durable::lock::Lock;
use crate::error::{Error, Result};

const TYPE: &str = "LuaLock";

pub struct LuaLock {
    lock: Mutex<Option<Lock>>,
    note: Option<String>,
    path: String,
}

impl LuaLock {
    /// The lock, moved out (into the checkpoint that will hold it).
    pub fn take(&self) -> Result<Lock> {
        let mut slot = self.lock.lock().map_err(|_| Error::Usage("lock: poisoned".into()))?;
        slot.take().ok_or_else(|| Error::Usage(format!("lock {}: already released or given away", self.path)))
    }
}

impl UserData for LuaLock {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("note", |_, this| Ok(this.note.clone()));
        f.add_field_method_get("path", |_, this| Ok(this.path.clone()));
        methods_index(f, TYPE);
    }
}

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    m.add(lua, "release", |_, this: &LuaLock, ()| {
        let _ = this.take();
        Ok(())
    })?;
    Ok(m)
}

/// `files.lock(out, { wait, on_wait })`: on_wait(line) is called while another run holds it.
pub fn lock(out: String, o: Option<LuaTable>) -> mlua::Result<LuaLock> {
    let (wait, on_wait) = match &o {
        Some(o) => (o.get::<Option<bool>>("wait")?.unwrap_or(false), o.get::<Option<mlua::Function>>("on_wait")?),
        None => (false, None),
    };
    // Through the output's folder, opened once (durable::target::resolve).
    let target = crate::durable::safe_write::resolve(&out)?;
    let path = target.sibling(".lock");
    let (lock, taken) = Lock::acquire_for(&target, wait, |msg| {
        if let Some(f) = &on_wait {
            let _ = f.call::<()>(msg.to_string());
        }
    })?;
    let note = lock_note(&path, &taken);
    Ok(LuaLock { lock: Mutex::new(Some(lock)), note, path: path.display().to_string() })
}
