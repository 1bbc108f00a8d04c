//! Starts from a file or a seeded sample (`table::starts`), in `divgpu.files`:
//!
//! - `files.read_starts(path, n)` -> u32 array: one item index a line, each
//!   below n; nil and a message naming the file and the line otherwise;
//! - `files.sample_starts(n, k, seed)` -> u32 array: k distinct items of
//!   0..n, ascending, chosen by the documented seeded algorithm (the same on
//!   every machine); raises unless 1 <= k <= n <= 2^32 and seed is a whole
//!   number in 0..2^53.

use mlua::{Lua, Table as LuaTable};

use super::boundary::function;
use super::host_array::LuaHostArray;

use crate::error::Error;
use crate::table::starts;

/// A whole number in 0..=2^53 (what a Lua number holds exactly), or misuse
/// naming the call and the argument.
fn whole(x: f64, call: &str, what: &str) -> mlua::Result<u64> {
    if (0.0..=9_007_199_254_740_992.0).contains(&x) && x.fract() == 0.0 {
        Ok(x as u64)
    } else {
        Err(Error::Usage(format!("{call}: {what} {x} is not a whole number in 0..2^53")).into())
    }
}

pub fn register(lua: &Lua, t: &LuaTable) -> mlua::Result<()> {
    t.set(
        "read_starts",
        function(lua, |_, (path, n): (String, f64)| {
            Ok(LuaHostArray::U32(starts::read_file(&path, whole(n, "read_starts", "n")?)?))
        })?,
    )?;
    t.set(
        "sample_starts",
        function(lua, |_, (n, k, seed): (f64, f64, f64)| {
            let w = |x, what| whole(x, "sample_starts", what);
            Ok(LuaHostArray::U32(starts::sample(w(n, "n")?, w(k, "k")?, w(seed, "seed")?)?))
        })?,
    )?;
    Ok(())
}
