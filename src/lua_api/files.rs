//! The safe write path for Lua (`durable::safe_write`, `durable::lock`),
//! in `divgpu.files` beside the run's files (`caches.rs`):
//!
//! - `files.check{ outputs = {{option, path}, ...}, inputs = {...}, stdout = bool }`:
//!   every output resolved and checked (a folder, FIFO or device refused; its
//!   folder present and writable), none the same file as an input or another
//!   output; true, or nil and a one-line message naming the option;
//! - `files.output(path)` -> out (`LuaOutput`, `output.rs`);
//! - `files.lock(out, { wait, on_wait })` -> lock (`LuaLock`, `lock.rs`);
//! - `files.is_utf8(s)`: whether a string (a path) is valid UTF-8;
//! - `files.kind(path)`: "file", "folder", "fifo", "device", "socket" or
//!   "other" (links followed, nothing opened), or nil and a message.

use mlua::{Lua, Table as LuaTable, Value};

use super::boundary::function;
use super::{lock, output};

use crate::durable::safe_write::{check_files, Named};
use crate::error::{Error, Result};

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
    t.set("output", function(lua, |_, path: String| Ok(output::create(&path)?))?)?;
    t.set("lock", function(lua, |_, (out, o): (String, Option<LuaTable>)| lock::lock(out, o))?)?;
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
