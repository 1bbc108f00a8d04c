//! `LuaContext` (`ctx`): an open device for Lua. `ctx.info` describes it;
//! `ctx:buffer`, `ctx:upload` (`ctx:begin_upload`), `ctx:pipeline`, `ctx:bind` and `ctx:recorder`
//! make the objects a job is built of (`buffer.rs`, `pipeline.rs`, `bind_group.rs`,
//! `ctx:begin_pipeline` and `ctx:begin_buffers` make them on a thread of
//! their own: `pending.rs`;
//! `recorder.rs`); `ctx:self_test` runs the arithmetic self-test.

use std::sync::Arc;

use mlua::{Lua, Table as LuaTable, UserData, UserDataFields, UserDataMethods, UserDataRef};

use super::bind_group::LuaBindGroup;
use super::boundary::{methods_index, Methods};
use super::buffer::{buffer_list, LuaBuffer};
use super::embeddings::LuaEmbeddings;
use super::host_array::LuaHostArray;
use super::pending::{LuaPending, Made, Progress};
use super::pipeline::{interface_of, LuaPipeline};
use super::recorder::LuaRecorder;
use super::spirv::LuaSpirv;
use super::upload::LuaUpload;
use crate::error::{Error, Result};
use crate::gpu::adapter::DeviceInfo;
use crate::gpu::buffer::Buffer;
use crate::gpu::commands::Recorder;
use crate::gpu::device::Device;
use crate::gpu::pipeline::{BindGroup, Pipeline};
use crate::gpu::spirv::Interface;

pub struct LuaContext(pub Arc<Device>);

const TYPE: &str = "LuaContext";

/// A device's description as a Lua table (`ctx.info`, `divgpu.devices()`).
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
    t.set("denormals_mode", i.denormals.key())?;
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
    t.set("cooperative_matrix", cooperative_matrix_table(lua, i)?)?;
    Ok(t)
}

fn cooperative_matrix_table(lua: &Lua, i: &DeviceInfo) -> mlua::Result<LuaTable> {
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
    Ok(shapes)
}

/// What `ctx:pipeline{ spirv, name, specialization = { [id] = u32 }, interface }`
/// asks for, read from its table (on the Lua thread: a pending pipeline's
/// thread owns a copy).
struct PipelineRequest {
    name: String,
    words: Vec<u32>,
    specialization: Vec<(u32, u32)>,
    interface: Option<Interface>,
}

fn pipeline_request(opts: &LuaTable) -> mlua::Result<PipelineRequest> {
    let spirv: UserDataRef<LuaSpirv> =
        opts.get("spirv").map_err(|_| Error::Usage("pipeline{}: 'spirv' must be a compiled shader".into()))?;
    let name: Option<String> = opts.get("name")?;
    let mut specialization = Vec::new();
    if let Some(t) = opts.get::<Option<LuaTable>>("specialization")? {
        for pair in t.pairs::<u32, u32>() {
            specialization.push(pair.map_err(|e| {
                Error::Usage(format!("pipeline{{}}: specialization must map constant ids to u32 values ({e})"))
            })?);
        }
    }
    specialization.sort_unstable();
    let interface = opts.get::<Option<LuaTable>>("interface")?.map(|t| interface_of(&t)).transpose()?;
    Ok(PipelineRequest {
        name: name.unwrap_or_else(|| spirv.name.clone()),
        words: spirv.words.clone(),
        specialization,
        interface,
    })
}

impl PipelineRequest {
    fn make(&self, device: &Arc<Device>) -> Result<Arc<Pipeline>> {
        Pipeline::new(device, &self.name, &self.words, &self.specialization, self.interface.as_ref())
    }
}

/// `ctx:begin_buffers{ {bytes, name}, ... }`: device-local buffers allocated
/// in order on a thread of their own, each in memory of its own (so the
/// thread never holds the allocator's lock the caller's uploads need).
fn begin_buffers(ctx: &LuaContext, list: LuaTable) -> mlua::Result<LuaPending> {
    let mut wanted = Vec::new();
    for i in 1..=list.raw_len() {
        let entry: LuaTable = list
            .raw_get(i)
            .map_err(|_| Error::Usage(format!("begin_buffers(): entry {i} must be {{bytes, name}}")))?;
        let bytes: u64 = entry
            .raw_get(1)
            .map_err(|_| Error::Usage(format!("begin_buffers(): entry {i} must start with a byte count")))?;
        let name: Option<String> = entry.raw_get(2)?;
        wanted.push((bytes, name.unwrap_or_else(|| "buffer".to_string())));
    }
    let device = ctx.0.clone();
    let what = format!("{} buffer(s) allocated in the background", wanted.len());
    let progress = Arc::new(Progress::default());
    let filled = progress.clone();
    Ok(LuaPending::start_with_progress(what, progress, move || {
        let mut all = Vec::with_capacity(wanted.len());
        for (bytes, name) in &wanted {
            let buffer = Buffer::storage_dedicated(&device, *bytes, name)?;
            filled.push(buffer.clone());
            all.push(buffer);
        }
        Ok(Made::Buffers(all))
    })?)
}

/// ctx:upload, ctx:begin_upload and ctx:begin_upload_table.
fn upload_methods(lua: &Lua, m: &Methods) -> mlua::Result<()> {
    // ctx:upload(array [, name]) -> a device-local buffer holding the array.
    m.add(lua, "upload", |_, this: &LuaContext, (array, name): (UserDataRef<LuaHostArray>, Option<String>)| {
        let bytes = array.bytes();
        let buf = Buffer::storage(&this.0, bytes.len() as u64, name.as_deref().unwrap_or("upload"))?;
        buf.upload(0, bytes)?;
        Ok(LuaBuffer(buf))
    })?;
    // ctx:begin_upload(array [, name]) -> buffer, upload: the copy submitted,
    // not waited for; the buffer holds the array once upload:done() is true
    // or upload:wait() has returned (later submissions on this context are
    // ordered after it).
    m.add(lua, "begin_upload", |_, this: &LuaContext, (array, name): (UserDataRef<LuaHostArray>, Option<String>)| {
        let bytes = array.bytes();
        let buf = Buffer::storage(&this.0, bytes.len() as u64, name.as_deref().unwrap_or("upload"))?;
        let pending = buf.begin_upload(0, bytes)?;
        Ok((LuaBuffer(buf), LuaUpload(pending)))
    })?;
    // ctx:begin_upload_table(emb, layout [, name]) -> buffer, upload: as
    // begin_upload, for the table by "rows" (as stored) or by "columns"
    // (D x N), written straight into the staging memory on every core: no
    // copy of the table first (1.6 GB at 1,048,576 x 384).
    m.add(lua, "begin_upload_table", |_, this: &LuaContext, (e, layout, name): (UserDataRef<LuaEmbeddings>, String, Option<String>)| {
        begin_upload_table(this, &e, &layout, name.as_deref())
    })?;
    Ok(())
}

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    // ctx:buffer(bytes [, name [, "device" | "host"]]) -> an uninitialised
    // storage buffer; "host" puts it in host-visible memory, read back
    // through its mapping (for results read after every submission).
    m.add(lua, "buffer", |_, this: &LuaContext, (size, name, memory): (u64, Option<String>, Option<String>)| {
        let name = name.as_deref().unwrap_or("buffer");
        let buffer = match memory.as_deref() {
            None | Some("device") => Buffer::storage(&this.0, size, name)?,
            Some("host") => Buffer::readback(&this.0, size, name)?,
            Some(other) => {
                return Err(Error::Usage(format!("buffer(): memory must be \"device\" or \"host\", got \"{other}\"")).into())
            }
        };
        Ok(LuaBuffer(buffer))
    })?;
    upload_methods(lua, &m)?;
    m.add(lua, "pipeline", |_, this: &LuaContext, opts: LuaTable| {
        Ok(LuaPipeline(pipeline_request(&opts)?.make(&this.0)?))
    })?;
    // ctx:begin_pipeline{...} -> pending: ctx:pipeline's, made on a thread of
    // its own (the driver's compile overlaps the caller's work);
    // pending:wait() gives the pipeline.
    m.add(lua, "begin_pipeline", |_, this: &LuaContext, opts: LuaTable| {
        let request = pipeline_request(&opts)?;
        let device = this.0.clone();
        let what = format!("pipeline '{}'", request.name);
        Ok(LuaPending::start(what, move || Ok(Made::Pipeline(request.make(&device)?)))?)
    })?;
    // ctx:begin_buffers{ {bytes, name}, ... } -> pending: device-local
    // buffers allocated on a thread of their own; pending:wait() gives the
    // list.
    m.add(lua, "begin_buffers", |_, this: &LuaContext, list: LuaTable| begin_buffers(this, list))?;
    // ctx:bind(pipeline, { buffer, ... } [, { referenced, ... }]) -> a bind
    // group, buffers in binding order; `referenced` buffers are those the
    // shader reaches by device address, kept alive with the group.
    m.add(
        lua,
        "bind",
        |_, this: &LuaContext, (pipeline, list, referenced): (UserDataRef<LuaPipeline>, LuaTable, Option<LuaTable>)| {
            this.0.check_same(&pipeline.0.device, &format!("pipeline '{}'", pipeline.0.name))?;
            let buffers = buffer_list(&list, "bind()")?;
            let referenced = match referenced {
                Some(t) => buffer_list(&t, "bind() referenced")?,
                None => Vec::new(),
            };
            Ok(LuaBindGroup(BindGroup::new(&pipeline.0, buffers, referenced)?))
        },
    )?;
    m.add(lua, "recorder", |_, this: &LuaContext, ()| Ok(LuaRecorder(Recorder::new(&this.0)?)))?;
    // ctx:self_test() -> "hardware" | "emulated", "kept" | "flushed": how the
    // contract's fma is computed on this device, and whether its subnormal
    // cases kept f32 denormals; nil, why if the device cannot meet the contract.
    m.add(lua, "self_test", |_, this: &LuaContext, ()| {
        let t = crate::gpu::selftest::run(&this.0)?;
        Ok((t.fma.name(), if t.denormals_kept { "kept" } else { "flushed" }))
    })?;
    // ctx:profile() -> the device profile (gpu/profile.rs, made once; profile.rs).
    m.add(lua, "profile", |lua, this: &LuaContext, ()| super::profile::of_device(lua, &this.0))?;
    m.add(lua, "validation_messages", |_, this: &LuaContext, ()| Ok(this.0.validation_messages()))?;
    Ok(m)
}

impl UserData for LuaContext {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("info", |lua, this| info_table(lua, &this.0.info));
        // The limit of every fence wait, in seconds (divgpu.open{timeout=}).
        f.add_field_method_get("timeout", |_, this| Ok(this.0.timeout.as_secs_f64()));
        // A process-unique number, named in errors about objects of two contexts.
        f.add_field_method_get("id", |_, this| Ok(this.0.id));
        methods_index(f, TYPE);
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_meta_method(mlua::MetaMethod::ToString, |_, this, ()| Ok(format!("divgpu.context<{}>", this.0.info.name)));
    }
}

/// ctx:begin_upload_table's body: the table by rows or columns, written
/// straight into the staging buffer.
fn begin_upload_table(this: &LuaContext, e: &LuaEmbeddings, layout: &str, name: Option<&str>) -> mlua::Result<(LuaBuffer, LuaUpload)> {
    let t = &e.0;
    let columns = match layout {
        "rows" => false,
        "columns" => true,
        other => {
            return Err(Error::Usage(format!("begin_upload_table: layout must be \"rows\" or \"columns\", got \"{other}\"")).into())
        }
    };
    let len = t.data.len() * 4;
    let buf = Buffer::storage(&this.0, len as u64, name.unwrap_or("table"))?;
    let values: &[u8] = bytemuck::cast_slice(&t.data);
    let pending = buf.begin_upload_with(0, len, |staged| {
        if columns {
            transpose_into(bytemuck::cast_slice_mut(staged), &t.data, t.n, t.dim);
        } else {
            crate::gpu::transfer::parallel_copy(staged, values);
        }
    })?;
    Ok((LuaBuffer(buf), LuaUpload(pending)))
}

/// `out[d * n + j] = rows[j * dim + d]`: the table by columns, eight columns a
/// parallel task, which reads eight neighbouring values of each row at a time.
fn transpose_into(out: &mut [f32], rows: &[f32], n: usize, dim: usize) {
    use rayon::prelude::*;
    const COLUMNS_A_TASK: usize = 8;
    out.par_chunks_mut(n * COLUMNS_A_TASK).enumerate().for_each(|(task, columns)| {
        let d0 = task * COLUMNS_A_TASK;
        let width = columns.len() / n;
        for j in 0..n {
            let row = &rows[j * dim + d0..][..width];
            for (c, &x) in row.iter().enumerate() {
                columns[c * n + j] = x;
            }
        }
    });
}
