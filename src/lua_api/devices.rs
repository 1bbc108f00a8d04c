//! `divgpu.devices` and `divgpu.open`: the Vulkan devices and a context on one.

use mlua::{Lua, Table as LuaTable, Value};

use super::boundary::function;
use super::context::{info_table, LuaContext};
use crate::error::Error;
use crate::gpu::adapter::{self, DeviceSelector};
use crate::gpu::device::{timeout_from_env, timeout_from_seconds, Device};
use crate::gpu::instance::Instance;

fn selector(v: Value) -> mlua::Result<DeviceSelector> {
    Ok(match v {
        Value::Nil => DeviceSelector::Default,
        Value::Integer(i) if i >= 0 => DeviceSelector::Index(i as usize),
        Value::Number(x) if x >= 0.0 && x.fract() == 0.0 => DeviceSelector::Index(x as usize),
        Value::String(s) => {
            let s = s.to_str()?.to_string();
            match s.parse::<usize>() {
                Ok(i) => DeviceSelector::Index(i),
                Err(_) => DeviceSelector::Name(s),
            }
        }
        other => return Err(Error::Usage(format!("device must be an index or a name, got {other:?}")).into()),
    })
}

/// Validation is on when asked for, or when DIVGPU_VALIDATION=1 (the tests).
fn validation_wanted(opt: Option<bool>) -> bool {
    opt.unwrap_or_else(|| std::env::var("DIVGPU_VALIDATION").map(|v| v == "1").unwrap_or(false))
}

/// `divgpu.open{ device, validation, echo_validation, timeout, denormals }`.
/// `denormals = "flush"` (or DIVGPU_DENORMALS=flush) makes the shaders flush
/// f32 denormals, imitating a device like the H200: for tests.
fn open(opts: Option<LuaTable>) -> mlua::Result<LuaContext> {
    let (device, validation, echo, timeout, denormals) = match opts {
        Some(o) => (
            o.get::<Value>("device")?,
            o.get::<Option<bool>>("validation")?,
            o.get::<Option<bool>>("echo_validation")?,
            o.get::<Value>("timeout")?,
            o.get::<Option<String>>("denormals")?,
        ),
        None => (Value::Nil, None, None, Value::Nil, None),
    };
    // Every fence wait of the context is bounded by this (default:
    // DIVGPU_TIMEOUT_S, else 600 s).
    let timeout = match timeout {
        Value::Nil => timeout_from_env()?,
        Value::Integer(s) => timeout_from_seconds(Some(s as f64), "open{timeout=}")?,
        Value::Number(s) => timeout_from_seconds(Some(s), "open{timeout=}")?,
        _ => timeout_from_seconds(None, "open{timeout=}")?,
    };
    let denormals = denormals.or_else(|| std::env::var("DIVGPU_DENORMALS").ok().filter(|v| !v.is_empty()));
    let force_flush = match denormals.as_deref() {
        None | Some("device") => false,
        Some("flush") => true,
        Some(other) => return Err(Error::Usage(format!("denormals must be 'device' or 'flush', not '{other}'")).into()),
    };
    let device = Device::open(&selector(device)?, validation_wanted(validation), echo.unwrap_or(true), timeout, force_flush)?;
    Ok(LuaContext(device))
}

pub fn register(lua: &Lua, m: &LuaTable) -> mlua::Result<()> {
    // divgpu.devices{ validation = bool } -> { info, ... }
    m.set(
        "devices",
        function(lua, |lua, opts: Option<LuaTable>| {
            let validation = opts.map(|o| o.get::<Option<bool>>("validation")).transpose()?.flatten();
            let instance = Instance::new(validation_wanted(validation))?;
            let list = lua.create_table()?;
            for info in adapter::describe_all(&instance)? {
                list.push(info_table(lua, &info)?)?;
            }
            Ok(list)
        })?,
    )?;
    m.set("open", function(lua, |_, opts: Option<LuaTable>| open(opts))?)?;
    Ok(())
}
