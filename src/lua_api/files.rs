//! The safe write path for Lua (`durable::safe_write`, `durable::lock`),
//! in `divgpu.files` beside the run's files (`caches.rs`):
//!
//! - `files.check{ outputs = {{option, path}, ...}, inputs = {...}, stdout = bool }`:
//!   every output resolved and checked (a folder, FIFO or device refused; its
//!   folder present and writable), none the same file as an input or another
//!   output; true, or nil and a one-line message naming the option;
//! - `files.output(path)` -> out (`OutputHandle`): a temporary file beside
//!   `path`; `out:write(s)` (unbuffered: each call reaches the file, so
//!   `tail -f out.temp_path` follows it), `out:commit()` (synced and renamed
//!   onto `path`), `out:abort()` (removed; so is one never committed, when
//!   collected);
//! - `files.lock(out, { wait, on_wait })` -> lock (`LockHandle`): `OUT.lock`
//!   taken before the table is read; `lock.note` (a stale lock taken over, a
//!   wait), `lock:release()`; given to `files.checkpoint(out, { lock = lock })`;
//! - `files.is_utf8(s)`: whether a string (a path) is valid UTF-8;
//! - `files.kind(path)`: "file", "folder", "fifo", "device", "socket" or
//!   "other" (links followed, nothing opened), or nil and a message.

use std::io::Write;
use std::sync::Mutex;

use mlua::{Lua, Table as LuaTable, UserData, UserDataFields, Value};

use super::boundary::{function, methods_index, Methods};

use crate::durable::checkpoint::lock_note;
use crate::durable::lock::Lock;
use crate::durable::safe_write::{check_files, Named, Output};
use crate::error::{Error, Result};

pub struct LockHandle {
    lock: Mutex<Option<Lock>>,
    note: Option<String>,
    path: String,
}

impl LockHandle {
    /// The lock, moved out (into the checkpoint that will hold it).
    pub fn take(&self) -> Result<Lock> {
        let mut slot = self.lock.lock().map_err(|_| Error::Usage("lock: poisoned".into()))?;
        slot.take().ok_or_else(|| Error::Usage(format!("lock {}: already released or given away", self.path)))
    }
}

impl UserData for LockHandle {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("note", |_, this| Ok(this.note.clone()));
        f.add_field_method_get("path", |_, this| Ok(this.path.clone()));
        methods_index(f, "LockHandle");
    }
}

pub fn lock_methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, "LockHandle")?;
    m.add(lua, "release", |_, this: &LockHandle, ()| {
        let _ = this.take();
        Ok(())
    })?;
    Ok(m)
}

pub struct OutputHandle(Mutex<Option<Output>>);

impl OutputHandle {
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

impl UserData for OutputHandle {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("temp_path", |_, this| Ok(this.with(|o| Ok(o.temp_path().display().to_string()))?));
        f.add_field_method_get("path", |_, this| Ok(this.with(|o| Ok(o.given().to_string()))?));
        methods_index(f, "OutputHandle");
    }
}

pub fn output_methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, "OutputHandle")?;
    m.add(lua, "write", |_, this: &OutputHandle, text: mlua::String| {
        Ok(this.with(|o| {
            let name = o.describe();
            o.file().write_all(&text.as_bytes()).map_err(|e| Error::input(name, format!("write failed: {e}")))
        })?)
    })?;
    m.add(lua, "commit", |_, this: &OutputHandle, ()| {
        let out = this.take()?.ok_or_else(|| Error::Usage("output: already committed or aborted".into()))?;
        Ok(out.commit()?)
    })?;
    m.add(lua, "abort", |_, this: &OutputHandle, ()| {
        drop(this.take()?);
        Ok(())
    })?;
    Ok(m)
}

/// `{{option, path}, ...}` from Lua.
fn named_list(t: Option<LuaTable>) -> mlua::Result<Vec<(String, String)>> {
    let mut list = Vec::new();
    if let Some(t) = t {
        for pair in t.sequence_values::<LuaTable>() {
            let pair = pair?;
            list.push((pair.get::<String>(1)?, pair.get::<String>(2)?));
        }
    }
    Ok(list)
}

/// `divgpu.files`' write path (`mod.rs` adds the run's files, `caches.rs`).
pub fn table(lua: &Lua) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    t.set(
        "check",
        function(lua, |_, o: LuaTable| {
            let outputs = named_list(o.get("outputs")?)?;
            let inputs = named_list(o.get("inputs")?)?;
            let stdout = o.get::<Option<bool>>("stdout")?.unwrap_or(false);
            let outs: Vec<Named> = outputs.iter().map(|(o, p)| Named { option: o, path: p }).collect();
            let ins: Vec<Named> = inputs.iter().map(|(o, p)| Named { option: o, path: p }).collect();
            check_files(&outs, &ins, stdout)?;
            Ok(true)
        })?,
    )?;
    t.set("output", function(lua, |_, path: String| Ok(OutputHandle(Mutex::new(Some(Output::create(&path)?)))))?)?;
    t.set("lock", function(lua, |_, (out, o): (String, Option<LuaTable>)| lock(out, o))?)?;
    t.set("kind", function(lua, |_, path: mlua::String| Ok(kind(&path.as_bytes())?))?)?;
    t.set(
        "is_utf8",
        function(lua, |_, s: Value| {
            Ok(match s {
                Value::String(s) => std::str::from_utf8(&s.as_bytes()).is_ok(),
                _ => false,
            })
        })?,
    )?;
    Ok(t)
}

/// `files.kind(path)`: what the path is, links followed, without opening it
/// (a FIFO is not waited on): "file", "folder", "fifo", "device", "socket"
/// or "other"; nil and a one-line message when it cannot be seen. An input
/// read whole (a stats file) is refused unless it is a "file".
fn kind(path: &[u8]) -> Result<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::FileTypeExt;
    let os = std::ffi::OsStr::from_bytes(path);
    let shown = String::from_utf8_lossy(path).into_owned();
    let t = std::fs::metadata(os).map_err(|e| Error::io(&shown, e))?.file_type();
    Ok(if t.is_file() {
        "file"
    } else if t.is_dir() {
        "folder"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_char_device() || t.is_block_device() {
        "device"
    } else if t.is_socket() {
        "socket"
    } else {
        "other"
    })
}

/// `files.lock(out, { wait, on_wait })`: on_wait(line) is called while another run holds it.
fn lock(out: String, o: Option<LuaTable>) -> mlua::Result<LockHandle> {
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
    Ok(LockHandle { lock: Mutex::new(Some(lock)), note, path: path.display().to_string() })
}
