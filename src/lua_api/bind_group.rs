//! `LuaBindGroup` (`group`): the buffers of one dispatch, made by `ctx:bind`
//! (no methods: a recorder's dispatch takes it).

use std::sync::Arc;

use mlua::UserData;

use crate::gpu::pipeline::BindGroup;

pub struct LuaBindGroup(pub Arc<BindGroup>);

impl UserData for LuaBindGroup {}
