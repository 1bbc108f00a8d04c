//! The test hooks, kept off the module: `require "divgpu.testing"` (the
//! entry `luaopen_divgpu_testing` of the same library). Faults injected into the fault-injection build, every
//! validation message of the process, a PNG's pixels, and the reference
//! rows of G'.

use mlua::{Lua, Table as LuaTable};

use super::boundary::{function, registry_key};

/// The hooks; `types` are the userdata types whose methods `userdata_methods` lists.
pub fn table(lua: &Lua, types: &'static [&'static str]) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    // testing.validation_messages() -> every validation message of every
    // context opened with echo (the tests fail on any).
    t.set("validation_messages", function(lua, |_, ()| Ok(crate::gpu::instance::all_validation_messages()))?)?;
    t.set("png_stats", super::plot::png_stats_function(lua)?)?;
    t.set("scaled_gram_rows", super::jobs::scaled_gram_rows(lua)?)?;
    // testing.userdata_methods() -> { Type = { name, ... } }: every method of
    // every userdata type, as registered (tests/api_doc_spec.lua).
    t.set(
        "userdata_methods",
        function(lua, move |lua, ()| {
            let all = lua.create_table()?;
            for &name in types {
                let methods: LuaTable = lua.named_registry_value(&registry_key(name))?;
                let mut names: Vec<String> = methods.pairs::<String, mlua::Value>().map(|p| p.map(|(k, _)| k)).collect::<mlua::Result<_>>()?;
                names.sort();
                all.set(name, names)?;
            }
            Ok(all)
        })?,
    )?;
    // testing.delay_uploads(seconds): every later upload takes at least this
    // long from its submission (0 turns it off): tests/multidevice_spec.lua
    // shows the devices' uploads overlap.
    t.set("delay_uploads", function(lua, |_, seconds: f64| Ok(crate::gpu::transfer::set_upload_delay(seconds)?))?)?;
    // testing.inject_fault(kind), inject_write_fault(kind): only in the
    // fault-injection build.
    #[cfg(feature = "fault-injection")]
    t.set("inject_fault", function(lua, |_, kind: String| Ok(crate::gpu::fault::arm(&kind)?))?)?;
    #[cfg(feature = "fault-injection")]
    t.set(
        "inject_write_fault",
        function(lua, |_, kind: String| Ok(crate::durable::safe_write::fault::arm(&kind)?))?,
    )?;
    Ok(t)
}
