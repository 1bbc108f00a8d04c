//! `LuaSpirv` (`spirv`): a compiled shader as Lua sees it, shipped or
//! compiled at run time (`divgpu.shaders`, `shaders.rs`): its name, its
//! words, its push-constant size and its interface checked against a kernel
//! descriptor.

use mlua::{Lua, Table as LuaTable, UserData, UserDataFields};

use super::boundary::{methods_index, Methods};
use super::host_array::LuaHostArray;
use crate::error::Error;

/// SPIR-V words, shipped or compiled at run time.
pub struct LuaSpirv {
    pub name: String,
    pub words: Vec<u32>,
}

const TYPE: &str = "LuaSpirv";

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    m.add(lua, "push_size", |_, this: &LuaSpirv, ()| {
        let r = crate::gpu::spirv::reflect(&this.words).map_err(Error::Shader)?;
        Ok(r.push_constant_size)
    })?;
    // spirv:check(descriptor) -> true, or false, why: the kernel descriptor's
    // interface against this SPIR-V, as ctx:pipeline checks it, without a
    // device (so a kernel lavapipe cannot run is checked too).
    m.add(lua, "check", |_, this: &LuaSpirv, d: LuaTable| {
        let r = crate::gpu::spirv::reflect(&this.words).map_err(Error::Shader)?;
        Ok(match r.check(&super::pipeline::interface_of(&d)?) {
            Ok(()) => (true, None),
            Err(why) => (false, Some(why)),
        })
    })?;
    // The SPIR-V as a u32 array, for inspection (e.g. looking for half arithmetic).
    m.add(lua, "to_array", |_, this: &LuaSpirv, ()| Ok(LuaHostArray::U32(this.words.clone())))?;
    Ok(m)
}

impl UserData for LuaSpirv {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("name", |_, this| Ok(this.name.clone()));
        f.add_field_method_get("words", |_, this| Ok(this.words.len()));
        methods_index(f, TYPE);
    }
}
