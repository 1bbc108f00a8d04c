//! The `divgpu` Lua module: the mlua boundary, one file per userdata type
//! or concern; every userdata type is named `Lua<What>`, in the file named
//! for it (`LuaContext` in `context.rs`, `LuaHostArray` in `host_array.rs`).
//! The public table holds the everyday calls (devices, open, tables,
//! arrays, the mirror) and one sub-table per concern (`shaders`,
//! `files`, `jobs`, `clock`, `process`, `plot`); the test hooks are
//! `require "divgpu.testing"`. Every function and method follows one error
//! rule (`boundary.rs`): misuse raises one line at the caller's position,
//! an expected failure returns `nil, message`.

mod bind_group;
mod boundary;
mod buffer;
mod caches;
mod checkpoint;
mod context;
mod cpu;
mod devices;
mod embeddings;
mod files;
mod host_array;
mod jobs;
mod lock;
mod output;
mod pending;
mod pipeline;
mod plot;
mod process;
mod profile;
mod recorder;
mod shaders;
mod spirv;
mod starts;
mod tensor;
mod testing;
mod upload;
mod verifier;

use mlua::{Function, Lua, Table as LuaTable};

use self::boundary::{registry_key, Methods};

/// The userdata types that have methods: the name their methods are kept
/// under, and what makes them.
type MethodsOf = fn(&Lua) -> mlua::Result<Methods>;
const TYPES: [(&str, MethodsOf); 13] = [
    ("LuaContext", context::methods),
    ("LuaBuffer", buffer::methods),
    ("LuaPipeline", pipeline::methods),
    ("LuaRecorder", recorder::methods),
    ("LuaUpload", upload::methods),
    ("LuaPending", pending::methods),
    ("LuaSpirv", spirv::methods),
    ("LuaEmbeddings", embeddings::methods),
    ("LuaHostArray", host_array::methods),
    ("LuaCheckpoint", checkpoint::methods),
    ("LuaLock", lock::methods),
    ("LuaOutput", output::methods),
    ("LuaVerifier", verifier::methods),
];

const TYPE_NAMES: [&str; TYPES.len()] = {
    let mut names = [""; TYPES.len()];
    let mut i = 0;
    while i < TYPES.len() {
        names[i] = TYPES[i].0;
        i += 1;
    }
    names
};

/// The methods of every userdata type, by type name.
fn methods(lua: &Lua) -> mlua::Result<LuaTable> {
    let all = lua.create_table()?;
    for (name, make) in TYPES {
        all.set(name, make(lua)?.table)?;
    }
    Ok(all)
}

/// The public module and the test hooks, every function wrapped under the
/// error rule (`boundary.lua`) and the objects' methods registered.
fn build(lua: &Lua) -> mlua::Result<(LuaTable, LuaTable)> {
    let raw = lua.create_table()?;
    raw.set("version", env!("CARGO_PKG_VERSION"))?;
    devices::register(lua, &raw)?;
    embeddings::register(lua, &raw)?;
    host_array::register(lua, &raw)?;
    jobs::register(lua, &raw)?;
    raw.set("shaders", shaders::table(lua)?)?;
    let file_table = files::table(lua)?;
    caches::register(lua, &file_table)?;
    starts::register(lua, &file_table)?;
    raw.set("files", file_table)?;
    let job_table = jobs::table(lua)?;
    tensor::register(lua, &job_table)?;
    raw.set("jobs", job_table)?;
    raw.set("clock", process::clock(lua)?)?;
    raw.set("process", process::table(lua)?)?;
    raw.set("plot", plot::table(lua)?)?;
    raw.set("cpu", cpu::table(lua)?)?;
    let wrap: Function = lua.load(include_str!("boundary.lua")).set_name("=divgpu").into_function()?;
    let (public, wrapped, hooks): (LuaTable, LuaTable, LuaTable) =
        wrap.call((raw, methods(lua)?, testing::table(lua, &TYPE_NAMES)?))?;
    for pair in wrapped.pairs::<String, LuaTable>() {
        let (name, table) = pair?;
        lua.set_named_registry_value(&registry_key(&name), table)?;
    }
    Ok((public, hooks))
}

/// `require "divgpu"`.
pub fn module(lua: &Lua) -> mlua::Result<LuaTable> {
    Ok(build(lua)?.0)
}

/// `require "divgpu.testing"`: the test hooks, kept off the module.
pub fn testing_module(lua: &Lua) -> mlua::Result<LuaTable> {
    Ok(build(lua)?.1)
}
