//! The GPU objects as Lua userdata: context, buffer, pipeline, bind group and
//! recorder. Each holds an `Arc` of its Rust object, so Lua's collector may
//! drop them in any order.

use std::sync::Arc;

use mlua::{Lua, Table as LuaTable, UserData, UserDataFields, UserDataMethods, UserDataRef, Value};

use super::arrays::HostArray;
use crate::error::Error;
use crate::vk::buffer::Buffer;
use crate::vk::commands::Recorder;
use crate::vk::adapter::DeviceInfo;
use crate::vk::device::Device;
use crate::vk::pipeline::{BindGroup, Pipeline};
use crate::vk::spirv::Interface;

pub struct Context(pub Arc<Device>);
pub struct LuaBuffer(pub Arc<Buffer>);
pub struct LuaPipeline(pub Arc<Pipeline>);
pub struct LuaBindGroup(pub Arc<BindGroup>);
pub struct LuaRecorder(pub Recorder);
/// SPIR-V words, shipped or compiled at run time.
pub struct Spirv {
    pub name: String,
    pub words: Vec<u32>,
}

pub fn info_table(lua: &Lua, i: &DeviceInfo) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    t.set("index", i.index)?;
    t.set("name", i.name.clone())?;
    t.set("type", i.device_type)?;
    t.set("vendor_id", i.vendor_id)?;
    t.set("device_id", i.device_id)?;
    t.set("driver", i.driver_name.clone())?;
    t.set("driver_info", i.driver_info.clone())?;
    t.set("driver_version", i.driver_version)?;
    t.set("api_version", i.api_version.clone())?;
    t.set("max_shared_memory", i.max_shared_memory)?;
    t.set("max_workgroup_size", i.max_workgroup_size)?;
    t.set("max_workgroup_invocations", i.max_workgroup_invocations)?;
    t.set("max_workgroup_count", i.max_workgroup_count)?;
    t.set("max_storage_buffer_range", i.max_storage_buffer_range)?;
    t.set("max_push_constants_size", i.max_push_constants_size)?;
    t.set("subgroup_size", i.subgroup_size)?;
    t.set("timestamp_period_ns", i.timestamp_period_ns)?;
    t.set("timestamps", i.timestamps)?;
    t.set("storage_buffer_16bit", i.storage_buffer_16bit)?;
    t.set("float16", i.float16)?;
    t.set("float64", i.float64)?;
    t.set("int64", i.int64)?;
    t.set("int64_atomics", i.int64_atomics)?;
    t.set("denorm_preserve_f32", i.denorm_preserve_f32)?;
    t.set("denorm_flush_f32", i.denorm_flush_f32)?;
    t.set("denormals", i.denormals.name())?;
    t.set("denormals_need_certificate", i.denormals.need_certificate())?;
    t.set("rounding_rte_f32", i.rounding_rte_f32)?;
    t.set("buffer_device_address", i.buffer_device_address)?;
    t.set("max_memory_allocation_size", i.max_memory_allocation_size)?;
    t.set("device_local_bytes", i.device_local_bytes)?;
    t.set("int8", i.int8)?;
    t.set("storage_buffer_8bit", i.storage_buffer_8bit)?;
    t.set("vulkan_memory_model", i.vulkan_memory_model)?;
    t.set("pipeline_statistics", i.pipeline_statistics)?;
    let hex = |b: &[u8; 16]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    t.set("device_uuid", hex(&i.device_uuid))?;
    t.set("driver_uuid", hex(&i.driver_uuid))?;
    let shapes = lua.create_table()?;
    for (k, c) in i.cooperative_matrix.iter().enumerate() {
        let s = lua.create_table()?;
        s.set("m", c.m)?;
        s.set("n", c.n)?;
        s.set("k", c.k)?;
        s.set("a", c.a)?;
        s.set("b", c.b)?;
        s.set("c", c.c)?;
        s.set("result", c.result)?;
        s.set("saturating", c.saturating)?;
        s.set("scope", c.scope)?;
        shapes.raw_set(k + 1, s)?;
    }
    t.set("cooperative_matrix", shapes)?;
    Ok(t)
}

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

fn buffer_list(list: &LuaTable, what: &str) -> mlua::Result<Vec<Arc<Buffer>>> {
    let mut buffers = Vec::new();
    for i in 1..=list.raw_len() {
        let b: UserDataRef<LuaBuffer> =
            list.raw_get(i).map_err(|_| Error::Usage(format!("{what}: entry {i} is not a buffer")))?;
        buffers.push(b.0.clone());
    }
    Ok(buffers)
}

/// `{ bindings = { name, ... }, push = { name, ... }, constants = { name = id } }`:
/// a kernel descriptor's interface, checked against the SPIR-V.
fn interface_of(t: &LuaTable) -> mlua::Result<Interface> {
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

impl UserData for Context {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("info", |lua, this| info_table(lua, &this.0.info));
        // The limit of every fence wait, in seconds (divgpu.open{timeout=}).
        f.add_field_method_get("timeout", |_, this| Ok(this.0.timeout.as_secs_f64()));
        // A process-unique number, named in errors about objects of two contexts.
        f.add_field_method_get("id", |_, this| Ok(this.0.id));
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        // ctx:buffer(bytes [, name [, "device" | "host"]]) -> an uninitialised
        // storage buffer; "host" puts it in host-visible memory, read back
        // through its mapping (for results read after every submission).
        m.add_method("buffer", |_, this, (size, name, memory): (u64, Option<String>, Option<String>)| {
            let name = name.as_deref().unwrap_or("buffer");
            let buffer = match memory.as_deref() {
                None | Some("device") => Buffer::storage(&this.0, size, name)?,
                Some("host") => Buffer::readback(&this.0, size, name)?,
                Some(other) => {
                    return Err(Error::Usage(format!("buffer(): memory must be \"device\" or \"host\", got \"{other}\"")).into())
                }
            };
            Ok(LuaBuffer(buffer))
        });
        // ctx:upload(array [, name]) -> a device-local buffer holding the array.
        m.add_method("upload", |_, this, (array, name): (UserDataRef<HostArray>, Option<String>)| {
            let bytes = array.bytes();
            let buf = Buffer::storage(&this.0, bytes.len() as u64, name.as_deref().unwrap_or("upload"))?;
            buf.upload(0, bytes)?;
            Ok(LuaBuffer(buf))
        });
        // ctx:pipeline{ spirv = spirv, name = "...", specialization = { [id] = u32, ... } }
        m.add_method("pipeline", |_, this, opts: LuaTable| {
            let spirv: UserDataRef<Spirv> = opts
                .get("spirv")
                .map_err(|_| Error::Usage("pipeline{}: 'spirv' must be a compiled shader".into()))?;
            let name: Option<String> = opts.get("name")?;
            let mut spec = Vec::new();
            if let Some(t) = opts.get::<Option<LuaTable>>("specialization")? {
                for pair in t.pairs::<u32, u32>() {
                    spec.push(pair.map_err(|e| {
                        Error::Usage(format!("pipeline{{}}: specialization must map constant ids to u32 values ({e})"))
                    })?);
                }
            }
            spec.sort_unstable();
            let name = name.unwrap_or_else(|| spirv.name.clone());
            let interface = opts.get::<Option<LuaTable>>("interface")?.map(|t| interface_of(&t)).transpose()?;
            Ok(LuaPipeline(Pipeline::new(&this.0, &name, &spirv.words, &spec, interface.as_ref())?))
        });
        // ctx:bind(pipeline, { buffer, ... } [, { referenced, ... }]) -> a bind
        // group, buffers in binding order; `referenced` buffers are those the
        // shader reaches by device address, kept alive with the group.
        m.add_method(
            "bind",
            |_, this, (pipeline, list, referenced): (UserDataRef<LuaPipeline>, LuaTable, Option<LuaTable>)| {
                this.0.check_same(&pipeline.0.device, &format!("pipeline '{}'", pipeline.0.name))?;
                let buffers = buffer_list(&list, "bind()")?;
                let referenced = match referenced {
                    Some(t) => buffer_list(&t, "bind() referenced")?,
                    None => Vec::new(),
                };
                Ok(LuaBindGroup(BindGroup::new(&pipeline.0, buffers, referenced)?))
            },
        );
        m.add_method("recorder", |_, this, ()| Ok(LuaRecorder(Recorder::new(&this.0)?)));
        // ctx:self_test() -> "hardware" | "emulated", "kept" | "flushed": how the
        // contract's fma is computed on this device, and whether its subnormal
        // cases kept f32 denormals; raises if the device cannot meet the contract.
        m.add_method("self_test", |_, this, ()| {
            let t = crate::selftest::run(&this.0)?;
            Ok((t.fma.name(), if t.denormals_kept { "kept" } else { "flushed" }))
        });
        m.add_method("validation_messages", |_, this, ()| Ok(this.0.validation_messages()));
        m.add_meta_method(mlua::MetaMethod::ToString, |_, this, ()| {
            Ok(format!("divgpu.context<{}>", this.0.info.name))
        });
    }
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
    }
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        // buf:write(array [, byte_offset])
        m.add_method("write", |_, this, (array, offset): (UserDataRef<HostArray>, Option<u64>)| {
            Ok(this.0.upload(offset.unwrap_or(0), array.bytes())?)
        });
        // buf:read(dtype [, count [, byte_offset]]) -> array
        m.add_method("read", |_, this, (dtype, count, offset): (String, Option<u64>, Option<u64>)| {
            let offset = offset.unwrap_or(0);
            let size = HostArray::new(&dtype, 1)?.bytes().len() as u64;
            let count = count.unwrap_or((this.0.size.saturating_sub(offset)) / size);
            let len = count.checked_mul(size).ok_or_else(|| {
                Error::Usage(format!("read of {count} {dtype} values from buffer '{}': too many bytes", this.0.name))
            })?;
            let bytes = this.0.download(offset, len)?;
            HostArray::from_bytes(&dtype, &bytes)
        });
        // buf:fill(u32) sets every word.
        m.add_method("fill", |_, this, word: u32| Ok(this.0.fill(word)?));
    }
}

impl UserData for LuaPipeline {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("name", |_, this| Ok(this.0.name.clone()));
        f.add_field_method_get("push_size", |_, this| Ok(this.0.reflection.push_constant_size));
        f.add_field_method_get("bindings", |_, this| Ok(this.0.reflection.bindings.clone()));
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        // pipeline:statistics() -> { {executable =, name =, value =}, ... } (the
        // driver's own figures: register counts and the like; {} where none)
        m.add_method("statistics", |lua, this, ()| {
            let out = lua.create_table()?;
            for (k, (exe, name, value)) in this.0.statistics()?.into_iter().enumerate() {
                let row = lua.create_table()?;
                row.set("executable", exe)?;
                row.set("name", name)?;
                row.set("value", value)?;
                out.raw_set(k + 1, row)?;
            }
            Ok(out)
        });
    }
}

impl UserData for LuaBindGroup {}

impl UserData for LuaRecorder {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("dispatches", |_, this| Ok(this.0.dispatch_count()));
    }
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        // rec:dispatch(group, {push u32s}, groups_x [, groups_y [, groups_z]])
        m.add_method_mut(
            "dispatch",
            |_, this, (group, push, x, y, z): (UserDataRef<LuaBindGroup>, LuaTable, u32, Option<u32>, Option<u32>)| {
                let bytes = push_bytes(&push)?;
                Ok(this.0.dispatch(&group.0, &bytes, [x, y.unwrap_or(1), z.unwrap_or(1)])?)
            },
        );
        m.add_method_mut("barrier", |_, this, ()| Ok(this.0.barrier()?));
        // rec:copy(src, dst [, src_offset [, dst_offset [, bytes]]]): bytes
        // default to the rest of src from src_offset.
        m.add_method_mut(
            "copy",
            |_,
             this,
             (src, dst, src_offset, dst_offset, size): (
                UserDataRef<LuaBuffer>,
                UserDataRef<LuaBuffer>,
                Option<u64>,
                Option<u64>,
                Option<u64>,
            )| {
                let src_offset = src_offset.unwrap_or(0);
                let size = size.unwrap_or(src.0.size.saturating_sub(src_offset));
                Ok(this.0.copy(&src.0, src_offset, &dst.0, dst_offset.unwrap_or(0), size)?)
            },
        );
        m.add_method_mut("submit", |_, this, ()| Ok(this.0.submit()?));
        // rec:wait([spent]) -> GPU seconds of the submission (nil without
        // timestamps); `spent`: seconds already spent polling it since it was
        // submitted, taken off the context's timeout.
        m.add_method_mut("wait", |_, this, spent: Option<f64>| {
            let timeout = this.0.timeout();
            let limit = match spent {
                Some(s) if s.is_finite() && s > 0.0 => timeout.saturating_sub(std::time::Duration::from_secs_f64(s.min(1e9))),
                _ => timeout,
            };
            Ok(this.0.wait_at_most(limit)?)
        });
        m.add_method("done", |_, this, ()| Ok(this.0.is_done()?));
    }
}

impl UserData for Spirv {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("name", |_, this| Ok(this.name.clone()));
        f.add_field_method_get("words", |_, this| Ok(this.words.len()));
    }
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("push_size", |_, this, ()| {
            let r = crate::vk::spirv::reflect(&this.words).map_err(Error::Shader)?;
            Ok(r.push_constant_size)
        });
        // The SPIR-V as a u32 array, for inspection (e.g. looking for half arithmetic).
        m.add_method("to_array", |_, this, ()| Ok(HostArray::U32(this.words.clone())));
    }
}

