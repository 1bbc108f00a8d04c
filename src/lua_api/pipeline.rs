//! `LuaPipeline` (`pipeline`): a compute pipeline, made by `ctx:pipeline`
//! and checked there against a kernel descriptor's interface (its buffers
//! of a dispatch: `LuaBindGroup`, `bind_group.rs`).

use std::sync::Arc;

use mlua::{Lua, Table as LuaTable, UserData, UserDataFields};

use super::boundary::{methods_index, Methods};
use crate::gpu::pipeline::Pipeline;
use crate::gpu::spirv::Interface;

pub struct LuaPipeline(pub Arc<Pipeline>);

const TYPE: &str = "LuaPipeline";

/// `{ bindings = { name, ... }, push = { name, ... }, constants = { name = id } }`:
/// a kernel descriptor's interface, checked against the SPIR-V.
pub fn interface_of(t: &LuaTable) -> mlua::Result<Interface> {
    let names = |key: &str| -> mlua::Result<Vec<String>> {
        let list: Option<LuaTable> = t.get(key)?;
        list.map(|l| l.sequence_values::<String>().collect()).unwrap_or_else(|| Ok(Vec::new()))
    };
    let mut constants = Vec::new();
    if let Some(c) = t.get::<Option<LuaTable>>("constants")? {
        for pair in c.pairs::<String, u32>() {
            constants.push(pair?);
        }
    }
    constants.sort();
    Ok(Interface { bindings: names("bindings")?, push: names("push")?, constants })
}

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    // pipeline:statistics() -> { {executable =, name =, value =}, ... } (the
    // driver's own figures: register counts and the like; {} where none)
    m.add(lua, "statistics", |lua, this: &LuaPipeline, ()| {
        let out = lua.create_table()?;
        for (k, (exe, name, value)) in this.0.statistics()?.into_iter().enumerate() {
            let row = lua.create_table()?;
            row.set("executable", exe)?;
            row.set("name", name)?;
            row.set("value", value)?;
            out.raw_set(k + 1, row)?;
        }
        Ok(out)
    })?;
    Ok(m)
}

impl UserData for LuaPipeline {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("name", |_, this| Ok(this.0.name.clone()));
        f.add_field_method_get("push_size", |_, this| Ok(this.0.reflection.push_constant_size));
        f.add_field_method_get("bindings", |_, this| Ok(this.0.reflection.bindings.clone()));
        methods_index(f, TYPE);
    }
}
