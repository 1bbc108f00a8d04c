//! `divgpu.files.parse_starts(spec [, n])`: the `--starts` grammar
//! (`table::starts`, the whole of it) for Lua.
//!
//! - `files.parse_starts(spec)` -> `{ count, file }`: the syntax checked
//!   without the table; `count` the number of starts the value gives (a
//!   range's B - A, a list's items, a sample's K; nil for every item, which
//!   `spec` nil is, and for `@FILE`), `file` the path of `@FILE`;
//! - `files.parse_starts(spec, n)` -> u32 array: the starts among the table's
//!   n items, in the value's order;
//!
//! a value the grammar refuses is nil and the command line's one line.

use mlua::{IntoLua, Lua, Table as LuaTable, Value};

use super::boundary::function;
use super::host_array::LuaHostArray;

use crate::error::Error;
use crate::table::starts::{self, Spec};

/// A whole number in 0..=2^53 (what a Lua number holds exactly), or misuse.
fn whole(x: f64) -> mlua::Result<u64> {
    if (0.0..=9_007_199_254_740_992.0).contains(&x) && x.fract() == 0.0 {
        Ok(x as u64)
    } else {
        Err(Error::Usage(format!("parse_starts: n {x} is not a whole number in 0..2^53")).into())
    }
}

/// `{ count, file }` of a value whose syntax passed.
fn syntax(lua: &Lua, spec: &Spec) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    t.set("count", spec.count())?;
    if let Spec::File(path) = spec {
        t.set("file", lua.create_string(path)?)?;
    }
    Ok(t)
}

pub fn register(lua: &Lua, t: &LuaTable) -> mlua::Result<()> {
    t.set(
        "parse_starts",
        function(lua, |lua, (spec, n): (Option<mlua::String>, Option<f64>)| {
            let bytes = spec.as_ref().map(|s| s.as_bytes());
            let parsed = starts::parse(bytes.as_deref())?;
            match n {
                None => Ok(Value::Table(syntax(lua, &parsed)?)),
                Some(n) => LuaHostArray::U32(parsed.starts(whole(n)?)?).into_lua(lua),
            }
        })?,
    )?;
    Ok(())
}
