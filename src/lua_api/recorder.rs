//! `LuaRecorder` (`rec`): records dispatches, barriers and copies, submits
//! them and waits (within the context's timeout).

use mlua::{Lua, Table as LuaTable, UserData, UserDataFields, UserDataRef, Value};

use super::bind_group::LuaBindGroup;
use super::boundary::{methods_index, Methods};
use super::buffer::LuaBuffer;
use super::host_array::LuaHostArray;
use crate::error::Error;
use crate::gpu::commands::Recorder;

pub struct LuaRecorder(pub Recorder);

const TYPE: &str = "LuaRecorder";

/// Push data from a Lua array of integers, each packed as a little-endian u32.
fn push_bytes(t: &LuaTable) -> mlua::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(t.raw_len() * 4);
    for i in 1..=t.raw_len() {
        let v: Value = t.raw_get(i)?;
        let x = match v {
            Value::Integer(x) => x as f64,
            Value::Number(x) => x,
            other => {
                return Err(Error::Usage(format!("push value {i} is a {}, not a number", other.type_name())).into())
            }
        };
        if x.fract() != 0.0 || !(0.0..=u32::MAX as f64).contains(&x) {
            return Err(Error::Usage(format!("push value {i} = {x} is not a u32")).into());
        }
        bytes.extend_from_slice(&(x as u32).to_le_bytes());
    }
    Ok(bytes)
}

/// What is left of `timeout` after `spent` seconds of polling (a wait's
/// `spent` argument: the caller polled the submission that long already).
pub fn rest_of_timeout(timeout: std::time::Duration, spent: Option<f64>) -> std::time::Duration {
    match spent {
        Some(s) if s.is_finite() && s > 0.0 => timeout.saturating_sub(std::time::Duration::from_secs_f64(s.min(1e9))),
        _ => timeout,
    }
}

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    // rec:dispatch(group, {push u32s}, groups_x [, groups_y [, groups_z]])
    m.add_mut(
        lua,
        "dispatch",
        |_, this: &mut LuaRecorder, (group, push, x, y, z): (UserDataRef<LuaBindGroup>, LuaTable, u32, Option<u32>, Option<u32>)| {
            let bytes = push_bytes(&push)?;
            Ok(this.0.dispatch(&group.0, &bytes, [x, y.unwrap_or(1), z.unwrap_or(1)])?)
        },
    )?;
    m.add_mut(lua, "barrier", |_, this: &mut LuaRecorder, ()| Ok(this.0.barrier()?))?;
    // rec:copy(src, dst [, src_offset [, dst_offset [, bytes]]]): bytes
    // default to the rest of src from src_offset.
    type CopyArgs = (UserDataRef<LuaBuffer>, UserDataRef<LuaBuffer>, Option<u64>, Option<u64>, Option<u64>);
    m.add_mut(lua, "copy", |_, this: &mut LuaRecorder, (src, dst, src_offset, dst_offset, size): CopyArgs| {
        let src_offset = src_offset.unwrap_or(0);
        let size = size.unwrap_or(src.0.size.saturating_sub(src_offset));
        Ok(this.0.copy(&src.0, src_offset, &dst.0, dst_offset.unwrap_or(0), size)?)
    })?;
    // rec:update(buf, array [, byte_offset]): the array's bytes written into
    // a device-local buffer by the command stream (vkCmdUpdateBuffer).
    m.add_mut(lua, "update", |_, this: &mut LuaRecorder, (dst, array, offset): (UserDataRef<LuaBuffer>, UserDataRef<LuaHostArray>, Option<u64>)| {
        Ok(this.0.update(&dst.0, offset.unwrap_or(0), array.bytes())?)
    })?;
    m.add_mut(lua, "submit", |_, this: &mut LuaRecorder, ()| Ok(this.0.submit()?))?;
    // rec:wait([spent]) -> GPU seconds of the submission (false without
    // timestamps); `spent`: seconds already spent polling it since it was
    // submitted, taken off the context's timeout.
    m.add_mut(lua, "wait", |_, this: &mut LuaRecorder, spent: Option<f64>| {
        Ok(match this.0.wait_at_most(rest_of_timeout(this.0.timeout(), spent))? {
            Some(seconds) => Value::Number(seconds),
            None => Value::Boolean(false),
        })
    })?;
    m.add(lua, "done", |_, this: &LuaRecorder, ()| Ok(this.0.is_done()?))?;
    Ok(m)
}

impl UserData for LuaRecorder {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("dispatches", |_, this| Ok(this.0.dispatch_count()));
        methods_index(f, TYPE);
    }
}
