//! divgpu: diversity sequences on the GPU through Vulkan compute, as a LuaJIT
//! module (`require "divgpu"`).
//!
//! Layout: `vk/` owns the Vulkan objects, `contract/` the host side of the
//! arithmetic contract (tables, CPU mirror, files), `lua_api/` the mlua glue,
//! `interrupt.rs` SIGINT/SIGTERM as a flag for the driver, `plot.rs` the charts,
//! `shaders.rs` the embedded and run-time-compiled GLSL (`shader_options.rs`:
//! the one shaderc setup, shared with `build.rs`).
#![warn(unsafe_op_in_unsafe_fn)]

pub mod contract;
pub mod cpu;
pub mod error;
pub mod interrupt;
#[cfg(feature = "lua")]
mod lua_api;
#[cfg(feature = "plot")]
pub mod plot;
#[cfg(feature = "gpu")]
pub mod selftest;
#[cfg(feature = "gpu")]
mod shader_options;
#[cfg(feature = "gpu")]
pub mod shaders;
#[cfg(feature = "gpu")]
pub mod vk;

#[cfg(feature = "lua")]
#[mlua::lua_module(skip_memory_check)]
fn divgpu(lua: &mlua::Lua) -> mlua::Result<mlua::Table> {
    lua_api::module(lua)
}

/// `require "divgpu.testing"`: the test hooks (LuaJIT finds this entry in
/// divgpu.so by the module's name).
#[cfg(feature = "lua")]
#[mlua::lua_module(skip_memory_check)]
fn divgpu_testing(lua: &mlua::Lua) -> mlua::Result<mlua::Table> {
    lua_api::testing_module(lua)
}
