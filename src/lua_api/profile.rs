//! The device profile as a Lua table (`ctx:profile()`): `gpu/profile.rs`'s
//! facts, by the names `docs/api.md` gives them.

use std::sync::Arc;

use mlua::{Lua, Table as LuaTable, Value};

use crate::gpu::device::Device;
use crate::gpu::profile::{self, DeviceProfile, RegisterBudget};

/// `ctx:profile()`: the profile of `device` (made the first time), as a table.
pub fn of_device(lua: &Lua, device: &Arc<Device>) -> mlua::Result<LuaTable> {
    let p = profile::of(device)?;
    table(lua, &p)
}

/// `p` as a fresh Lua table.
pub fn table(lua: &Lua, p: &DeviceProfile) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    t.set("name", p.name.clone())?;
    t.set("type", p.kind)?;
    t.set("subgroup_size", p.subgroup_size)?;
    t.set("max_shared_memory", p.max_shared_memory)?;
    t.set("max_workgroup_invocations", p.max_workgroup_invocations)?;
    t.set("max_workgroup_size", p.max_workgroup_size)?;
    t.set("max_workgroup_count", p.max_workgroup_count)?;
    t.set("max_storage_buffer_range", p.max_storage_buffer_range)?;
    t.set("max_memory_allocation_size", p.max_memory_allocation_size)?;
    t.set("storage_range", p.storage_range)?;
    t.set("loop_cap", p.loop_cap.map_or(Value::Boolean(false), |c| Value::Integer(c.into())))?;
    t.set("fma", p.fma.name())?;
    t.set("denormals_seen", if p.denormals_kept { "kept" } else { "flushed" })?;
    t.set("denormals", p.denormals.name())?;
    t.set("denormals_mode", p.denormals.key())?;
    t.set("float64", p.float64)?;
    t.set("int64", p.int64)?;
    t.set("int8", p.int8)?;
    t.set("buffer_device_address", p.buffer_device_address)?;
    t.set("cooperative_matrix", p.cooperative_matrix)?;
    t.set("int8_matrices", p.int8_matrices)?;
    t.set("registers", p.registers.map(|r| registers(lua, &r)).transpose()?)?;
    Ok(t)
}

/// `{ file =, per_thread_max =, source = }`.
fn registers(lua: &Lua, r: &RegisterBudget) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    t.set("file", r.file)?;
    t.set("per_thread_max", r.per_thread_max)?;
    t.set("source", r.source)?;
    Ok(t)
}
