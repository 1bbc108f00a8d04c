//! `LuaOutput` (`out`): an output being written for Lua
//! (`durable::safe_write::Output`), made by `files.output(path)`: a
//! temporary file beside `path`; `out:write(s)` (unbuffered: each call
//! reaches the file, so `tail -f out.temp_path` follows it), `out:commit()`
//! (synced and renamed onto `path`), `out:abort()` (removed; so is one never
//! committed, when collected).

use std::io::Write;
use std::sync::Mutex;

use mlua::{Lua, UserData, UserDataFields};

use super::boundary::{methods_index, Methods};

use crate::durable::safe_write::Output;
use crate::error::{Error, Result};

const TYPE: &str = "LuaOutput";

pub struct LuaOutput(Mutex<Option<Output>>);

impl LuaOutput {
    fn with<T>(&self, f: impl FnOnce(&mut Output) -> Result<T>) -> Result<T> {
        let mut slot = self.0.lock().map_err(|_| Error::Usage("output: poisoned".into()))?;
        match slot.as_mut() {
            Some(out) => f(out),
            None => Err(Error::Usage("output: already committed or aborted".into())),
        }
    }

    fn take(&self) -> Result<Option<Output>> {
        Ok(self.0.lock().map_err(|_| Error::Usage("output: poisoned".into()))?.take())
    }
}

impl UserData for LuaOutput {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("temp_path", |_, this| Ok(this.with(|o| Ok(o.temp_path().display().to_string()))?));
        f.add_field_method_get("path", |_, this| Ok(this.with(|o| Ok(o.given().to_string()))?));
        methods_index(f, TYPE);
    }
}

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    m.add(lua, "write", |_, this: &LuaOutput, text: mlua::String| {
        Ok(this.with(|o| {
            let name = o.describe();
            o.file().write_all(&text.as_bytes()).map_err(|e| Error::input(name, format!("write failed: {e}")))
        })?)
    })?;
    m.add(lua, "commit", |_, this: &LuaOutput, ()| {
        let out = this.take()?.ok_or_else(|| Error::Usage("output: already committed or aborted".into()))?;
        Ok(out.commit()?)
    })?;
    m.add(lua, "abort", |_, this: &LuaOutput, ()| {
        drop(this.take()?);
        Ok(())
    })?;
    Ok(m)
}


/// `files.output(path)`.
pub fn create(path: &str) -> Result<LuaOutput> {
    Ok(LuaOutput(Mutex::new(Some(Output::create(path)?))))
}
