//! `LuaBuffer` (`buf`): a storage buffer of a context. Like every GPU
//! object it holds an `Arc` of its Rust object, so Lua's collector may drop
//! them in any order.

use std::sync::Arc;

use mlua::{Lua, Table as LuaTable, UserData, UserDataFields, UserDataRef};

use super::boundary::{methods_index, Methods};
use super::host_array::LuaHostArray;
use crate::error::Error;
use crate::gpu::buffer::Buffer;

pub struct LuaBuffer(pub Arc<Buffer>);

const TYPE: &str = "LuaBuffer";

/// The buffers of a Lua list, in order; `what` names the list in errors.
pub fn buffer_list(list: &LuaTable, what: &str) -> mlua::Result<Vec<Arc<Buffer>>> {
    let mut buffers = Vec::new();
    for i in 1..=list.raw_len() {
        let b: UserDataRef<LuaBuffer> =
            list.raw_get(i).map_err(|_| Error::Usage(format!("{what}: entry {i} is not a buffer")))?;
        buffers.push(b.0.clone());
    }
    Ok(buffers)
}

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    // buf:write(array [, byte_offset])
    m.add(lua, "write", |_, this: &LuaBuffer, (array, offset): (UserDataRef<LuaHostArray>, Option<u64>)| {
        Ok(this.0.upload(offset.unwrap_or(0), array.bytes())?)
    })?;
    // buf:read(dtype [, count [, byte_offset]]) -> array
    m.add(lua, "read", |_, this: &LuaBuffer, (dtype, count, offset): (String, Option<u64>, Option<u64>)| {
        let offset = offset.unwrap_or(0);
        let size = LuaHostArray::new(&dtype, 1)?.bytes().len() as u64;
        let count = count.unwrap_or((this.0.size.saturating_sub(offset)) / size);
        let len = count.checked_mul(size).ok_or_else(|| {
            Error::Usage(format!("read of {count} {dtype} values from buffer '{}': too many bytes", this.0.name))
        })?;
        let bytes = this.0.download(offset, len)?;
        LuaHostArray::from_bytes(&dtype, &bytes)
    })?;
    // buf:fill(u32) sets every word.
    m.add(lua, "fill", |_, this: &LuaBuffer, word: u32| Ok(this.0.fill(word)?))?;
    Ok(m)
}

impl UserData for LuaBuffer {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("size", |_, this| Ok(this.0.size));
        f.add_field_method_get("name", |_, this| Ok(this.0.name.clone()));
        // The device address as two u32 words { low, high }, ready for a push
        // constant or an address table (a Lua number cannot hold every u64).
        f.add_field_method_get("address", |_, this| {
            let a = this.0.device_address()?;
            Ok(vec![a as u32, (a >> 32) as u32])
        });
        methods_index(f, TYPE);
    }
}
