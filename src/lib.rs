//! divgpu: diversity sequences on the GPU through Vulkan compute, as a LuaJIT
//! module (`require "divgpu"`).
//!
//! Layout, by what each room holds: `contract/` the arithmetic of
//! docs/contract.md (the table in memory and `inv_norm`, FP16 rounding, the
//! CPU mirror, the certificates, verify); `table/` the inputs (table files,
//! synthetic tables, starts); `cache/` the outputs (JSON and binary caches,
//! their header, shards, samples); `durable/` nothing lost (safe writes,
//! locks, hashing, the checkpoint); `gpu/` the Vulkan objects and the device
//! self-test; `cpu/` the CPU method (the certified Gram filter on the host);
//! `lua_api/` the mlua glue, one file per Lua table or userdata.
//! Beside them: `util.rs` (hex), `fuzz.rs` the fuzz harness
//! (`fuzz/fuzz_targets/`), `interrupt.rs` SIGINT/SIGTERM as a flag for the
//! driver, `plot.rs` the charts, `shaders.rs` the embedded and
//! run-time-compiled GLSL (`shader_options.rs`: the one shaderc setup, shared
//! with `build.rs`).
//!
//! No room imports from a room that imports from it, nor a file from a file
//! that imports from it (`tests/import_cycles_test.sh`). The order:
//! `durable/`'s safe writes, then `cache/`, then `durable/checkpoint/` and
//! `contract/` (whose `verify` reads caches), then `table/` (which builds
//! `contract::table::Table`), then `lua_api/`.
#![warn(unsafe_op_in_unsafe_fn)]

pub mod cache;
pub mod contract;
pub mod cpu;
pub mod durable;
pub mod error;
pub mod fuzz;
pub mod interrupt;
#[cfg(feature = "lua")]
mod lua_api;
#[cfg(feature = "plot")]
pub mod plot;
#[cfg(feature = "gpu")]
mod shader_options;
#[cfg(feature = "gpu")]
pub mod shaders;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod table;
#[cfg(test)]
mod test_support;
pub mod util;

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
