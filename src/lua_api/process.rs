//! The process as Lua sees it: `divgpu.clock` (a monotonic clock and a
//! sleep, for intervals and polling; no `ffi.cdef` of libc names) and
//! `divgpu.process` (SIGINT and SIGTERM as a flag the driver polls, and
//! whether standard error is a terminal).

use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mlua::{Lua, Table as LuaTable};

use super::boundary::function;
use crate::error::Error;

/// The clock's origin: the first reading in the process.
static ORIGIN: OnceLock<Instant> = OnceLock::new();

pub fn clock(lua: &Lua) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    // clock.now() -> seconds since an arbitrary origin, monotonic (std's
    // Instant: CLOCK_MONOTONIC on Linux), to the nanosecond: for intervals.
    t.set("now", function(lua, |_, ()| Ok(ORIGIN.get_or_init(Instant::now).elapsed().as_secs_f64()))?)?;
    // clock.sleep(seconds): at least that long (0 <= seconds <= 3600).
    t.set(
        "sleep",
        function(lua, |_, seconds: f64| {
            if !(0.0..=3600.0).contains(&seconds) {
                return Err(Error::Usage(format!("clock.sleep({seconds}): seconds must be in 0..3600")).into());
            }
            std::thread::sleep(Duration::from_secs_f64(seconds));
            Ok(())
        })?,
    )?;
    Ok(t)
}

pub fn table(lua: &Lua) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    // process.catch_signals(on): while on, SIGINT and SIGTERM only set a flag
    // (a second one exits at once); process.interrupted() -> "SIGINT" | "SIGTERM" | nil.
    t.set(
        "catch_signals",
        function(lua, |_, on: Option<bool>| Ok(crate::interrupt::catch(on.unwrap_or(true))?))?,
    )?;
    t.set("interrupted", function(lua, |_, ()| Ok(crate::interrupt::caught()))?)?;
    t.set("stderr_is_terminal", function(lua, |_, ()| Ok(std::io::stderr().is_terminal()))?)?;
    Ok(t)
}
