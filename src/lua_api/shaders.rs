//! `divgpu.shaders`: the shipped kernels and their variants (compiled by
//! `build.rs`, their axes from `shaders/NAME.axes.json`), their sources and
//! includes, and GLSL compiled at run time, each as a `LuaSpirv` (`spirv.rs`).

use std::path::PathBuf;

use mlua::{Lua, Table as LuaTable, Value};

use super::boundary::function;
use super::spirv::LuaSpirv;
use crate::error::Error;
use crate::shaders;

/// `{ name, defines = { K = V }, include_dirs = { ... } }` of `shaders.compile`.
fn compile_options(opts: Option<LuaTable>) -> mlua::Result<(String, Vec<(String, Option<String>)>, Vec<PathBuf>)> {
    let mut name = "<lua>".to_string();
    let mut defines = Vec::new();
    let mut include_dirs = Vec::new();
    let Some(o) = opts else { return Ok((name, defines, include_dirs)) };
    if let Some(n) = o.get::<Option<String>>("name")? {
        name = n;
    }
    if let Some(d) = o.get::<Option<LuaTable>>("defines")? {
        for pair in d.pairs::<String, Value>() {
            let (k, v) = pair?;
            let v = match v {
                Value::Boolean(true) => None,
                Value::Integer(i) => Some(i.to_string()),
                Value::Number(x) => Some(x.to_string()),
                Value::String(s) => Some(s.to_str()?.to_string()),
                other => return Err(Error::Usage(format!("define {k}: unsupported value {other:?}")).into()),
            };
            defines.push((k, v));
        }
        defines.sort();
    }
    if let Some(d) = o.get::<Option<LuaTable>>("include_dirs")? {
        for dir in d.sequence_values::<String>() {
            include_dirs.push(PathBuf::from(dir?));
        }
    }
    Ok((name, defines, include_dirs))
}

fn axes_table(lua: &Lua, kernel: &str) -> mlua::Result<LuaTable> {
    let list = lua.create_table()?;
    for axis in shaders::kernel(kernel)?.axes {
        let t = lua.create_table()?;
        t.set("name", axis.name)?;
        t.set("values", axis.values.to_vec())?;
        list.push(t)?;
    }
    Ok(list)
}

pub fn table(lua: &Lua) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    // shaders.get(name) -> the shipped SPIR-V of a kernel or variant
    t.set(
        "get",
        function(lua, |_, name: String| {
            let shader = shaders::shipped(&name)?;
            Ok(LuaSpirv { name, words: shader.spirv.to_vec() })
        })?,
    )?;
    t.set("names", function(lua, |_, ()| Ok(shaders::shipped_names()))?)?;
    // shaders.source(name) -> its GLSL source and a table of its defines
    t.set(
        "source",
        function(lua, |lua, name: String| {
            let shader = shaders::shipped(&name)?;
            let defines = lua.create_table()?;
            for (k, v) in shader.defines {
                defines.set(*k, *v)?;
            }
            Ok((shader.source, defines))
        })?,
    )?;
    t.set(
        "include",
        function(lua, |_, name: String| Ok(shaders::INCLUDES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)))?,
    )?;
    // shaders.compile(source, { name, defines = { K = V }, include_dirs = { ... } }) -> spirv
    t.set(
        "compile",
        function(lua, |_, (source, opts): (String, Option<LuaTable>)| {
            let (name, defines, include_dirs) = compile_options(opts)?;
            let request = shaders::CompileRequest { name: &name, source: &source, defines, include_dirs };
            let words = shaders::compile(&request)?;
            Ok(LuaSpirv { name, words })
        })?,
    )?;
    // shaders.kernels() -> every kernel this build compiled (shaders/NAME.comp);
    // shaders.not_built() -> { [variant] = why } (empty unless shaderc lacked an extension);
    // shaders.axes(kernel) -> { { name = axis, values = { default, ... } }, ... };
    // shaders.variant(kernel, { axis = value }) -> the shipped variant's name.
    t.set("kernels", function(lua, |_, ()| Ok(shaders::built_kernels()))?)?;
    t.set(
        "not_built",
        function(lua, |lua, ()| lua.create_table_from(shaders::NOT_BUILT.iter().map(|&(name, why)| (name, why))))?,
    )?;
    t.set("axes", function(lua, |lua, kernel: String| axes_table(lua, &kernel))?)?;
    t.set(
        "variant",
        function(lua, |_, (kernel, choice): (String, Option<LuaTable>)| {
            let mut wanted = Vec::new();
            if let Some(t) = choice {
                for pair in t.pairs::<String, String>() {
                    wanted.push(pair?);
                }
            }
            wanted.sort();
            Ok(shaders::variant(&kernel, &wanted)?.name)
        })?,
    )?;
    Ok(t)
}
