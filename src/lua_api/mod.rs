//! The `divgpu` Lua module: the mlua boundary. Every Rust error becomes a Lua
//! error here, with the message of `crate::error::Error`.

mod arrays;
mod checkpoint;
mod embeddings;
mod files;
mod gpu;
mod gram;
mod tensor;
mod plot;

use std::path::PathBuf;
use std::sync::Arc;

use mlua::{Lua, Table as LuaTable, UserDataRef, UserDataRefMut, Value};

use self::arrays::HostArray;
use self::checkpoint::CheckpointHandle;
use self::embeddings::Embeddings;
use self::files::LockHandle;
use self::gpu::{info_table, Context, Spirv};
use crate::contract::checkpoint::{BatchSink, Checkpoint, StdoutCache};
use crate::contract::{cache, mirror, safe_write, shard, synth, table::Table};
use crate::error::Error;
use crate::shaders;
use crate::vk::context::{all_validation_messages, timeout_from_env, timeout_from_seconds, Device, DeviceSelector, Instance};

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

/// `o[key]`: a whole number in 0..=2^53 (what a Lua number holds exactly),
/// or `default` when absent; anything else is an error naming the key.
fn whole_number(o: &LuaTable, key: &str, default: Option<u64>) -> mlua::Result<u64> {
    const MAX: f64 = 9_007_199_254_740_992.0; // 2^53
    let bad = |v: &str| Error::Usage(format!("synth: {key} {v} is not a whole number in 0..2^53")).into();
    match o.get::<Value>(key)? {
        Value::Nil => default.ok_or_else(|| Error::Usage(format!("synth: {key} is required")).into()),
        Value::Integer(i) => u64::try_from(i).map_err(|_| bad(&i.to_string())),
        Value::Number(x) if (0.0..=MAX).contains(&x) && x.fract() == 0.0 => Ok(x as u64),
        Value::Number(x) => Err(bad(&x.to_string())),
        other => Err(bad(other.type_name())),
    }
}

/// Validation is on when asked for, or when DIVGPU_VALIDATION=1 (the tests).
fn validation_wanted(opt: Option<bool>) -> bool {
    opt.unwrap_or_else(|| std::env::var("DIVGPU_VALIDATION").map(|v| v == "1").unwrap_or(false))
}

pub fn module(lua: &Lua) -> mlua::Result<LuaTable> {
    let m = lua.create_table()?;
    m.set("version", env!("CARGO_PKG_VERSION"))?;

    // divgpu.devices{ validation = bool } -> { info, ... }
    m.set(
        "devices",
        lua.create_function(|lua, opts: Option<LuaTable>| {
            let validation = opts.map(|o| o.get::<Option<bool>>("validation")).transpose()?.flatten();
            let instance = Instance::new(validation_wanted(validation))?;
            let list = lua.create_table()?;
            for info in instance.describe_all()? {
                list.push(info_table(lua, &info)?)?;
            }
            Ok(list)
        })?,
    )?;

    // divgpu.open{ device = index | "name", validation = bool, echo_validation = bool,
    //              timeout = seconds, denormals = "device" | "flush" } -> context
    // denormals = "flush" (or DIVGPU_DENORMALS=flush) makes the shaders flush
    // f32 denormals, imitating a device like the H200: for tests.
    m.set(
        "open",
        lua.create_function(|_, opts: Option<LuaTable>| {
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
                Some(other) => {
                    return Err(Error::Usage(format!("denormals must be 'device' or 'flush', not '{other}'")).into())
                }
            };
            let device = Device::open(
                &selector(device)?,
                validation_wanted(validation),
                echo.unwrap_or(true),
                timeout,
                force_flush,
            )?;
            Ok(Context(device))
        })?,
    )?;

    // divgpu.validation_messages() -> every validation message of every
    // context opened with echo (the tests fail on any).
    m.set("validation_messages", lua.create_function(|_, ()| Ok(all_validation_messages()))?)?;

    // divgpu.inject_fault(kind): only in the fault-injection build (tests).
    #[cfg(feature = "fault-injection")]
    m.set("inject_fault", lua.create_function(|_, kind: String| Ok(crate::vk::fault::arm(&kind)?))?)?;
    // divgpu.inject_write_fault(kind): the next commit's sync or rename fails (tests).
    #[cfg(feature = "fault-injection")]
    m.set(
        "inject_write_fault",
        lua.create_function(|_, kind: String| Ok(crate::contract::safe_write::fault::arm(&kind)?))?,
    )?;

    // divgpu.convert_fp16(json_path) -> bin_path, meta_path
    m.set(
        "convert_fp16",
        lua.create_function(|_, path: String| Ok(crate::contract::fp16::convert(&path)?))?,
    )?;
    // divgpu.load_fp16(json_path) -> the table E' = (f32)E16 from the .bin next to it
    m.set(
        "load_fp16",
        lua.create_function(|_, path: String| Ok(Embeddings(Arc::new(crate::contract::fp16::load(&path)?))))?,
    )?;

    m.set(
        "load_embeddings",
        lua.create_function(|_, path: String| Ok(Embeddings(Arc::new(Table::load(&path)?))))?,
    )?;

    // divgpu.synth{ n, dim, clusters = 16, seed = 1, noise = 0.5 } -> embeddings.
    // Sizes are checked here, and the memory they need reserved once, so that
    // a huge request is an error, never an abort (synth allocates plainly).
    m.set(
        "synth",
        lua.create_function(|_, o: LuaTable| {
            let n = whole_number(&o, "n", None)?;
            let dim = whole_number(&o, "dim", None)?;
            let clusters = whole_number(&o, "clusters", Some(16))?.max(1);
            let seed = whole_number(&o, "seed", Some(1))?;
            let noise: f64 = o.get::<Option<f64>>("noise")?.unwrap_or(0.5);
            if clusters > n.max(16) {
                return Err(Error::Usage(format!("synth: clusters {clusters} is more than the larger of n ({n}) and 16")).into());
            }
            let (n, dim, clusters) = (n as usize, dim as usize, clusters as usize);
            // The rows (f32), a row in f64 and the centres (f64): fallible, once.
            let bytes = n
                .checked_mul(dim)
                .and_then(|v| v.checked_mul(4))
                .and_then(|b| clusters.checked_mul(dim)?.checked_mul(8)?.checked_add(b))
                .ok_or_else(|| Error::Usage(format!("synth: {n} x {dim} values do not fit in memory")))?;
            let mut probe: Vec<u8> = Vec::new();
            probe.try_reserve_exact(bytes).map_err(|_| Error::OutOfMemory {
                what: format!("synth: {n} x {dim} values and {clusters} centres need {bytes} bytes"),
                kind: "host",
            })?;
            drop(probe);
            Ok(Embeddings(Arc::new(synth::clustered(n, dim, clusters, seed, noise)?)))
        })?,
    )?;

    // divgpu.compile(source, { name, defines = { K = V }, include_dirs = { ... } }) -> spirv
    m.set(
        "compile",
        lua.create_function(|_, (source, opts): (String, Option<LuaTable>)| {
            let mut name = "<lua>".to_string();
            let mut defines = Vec::new();
            let mut include_dirs = Vec::new();
            if let Some(o) = opts {
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
                            other => {
                                return Err(Error::Usage(format!("define {k}: unsupported value {other:?}")).into())
                            }
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
            }
            let words =
                shaders::compile(&shaders::CompileRequest { name: &name, source: &source, defines, include_dirs })?;
            Ok(Spirv { name, words })
        })?,
    )?;

    // divgpu.shader(name) -> the shipped SPIR-V;
    // divgpu.shader_source(name) -> its GLSL source and a table of its defines
    m.set(
        "shader",
        lua.create_function(|_, name: String| {
            let shader = shaders::shipped(&name)?;
            Ok(Spirv { name, words: shader.spirv.to_vec() })
        })?,
    )?;
    m.set(
        "shader_source",
        lua.create_function(|lua, name: String| {
            let shader = shaders::shipped(&name)?;
            let defines = lua.create_table()?;
            for (k, v) in shader.defines {
                defines.set(*k, *v)?;
            }
            Ok((shader.source, defines))
        })?,
    )?;
    m.set("shader_names", lua.create_function(|_, ()| Ok(shaders::shipped_names()))?)?;
    m.set(
        "include_source",
        lua.create_function(|_, name: String| {
            Ok(shaders::INCLUDES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s))
        })?,
    )?;

    // divgpu.array(dtype, n | { values }) -> array
    m.set(
        "array",
        lua.create_function(|_, (dtype, init): (String, Value)| match init {
            Value::Table(t) => HostArray::from_lua_table(&dtype, &t),
            Value::Integer(n) if n >= 0 => HostArray::new(&dtype, usize::try_from(n).unwrap_or(usize::MAX)),
            // A length past usize (1e300) saturates, and the allocation then fails with an error.
            Value::Number(n) if n >= 0.0 && n.fract() == 0.0 => HostArray::new(&dtype, n as usize),
            Value::Number(n) => {
                Err(Error::Usage(format!("array(): the length {n} is not a whole number >= 0")).into())
            }
            other => Err(Error::Usage(format!("array(): expected a length or a table, got {}", other.type_name())).into()),
        })?,
    )?;

    // divgpu.initial_masks(starts, n) -> u32 array [#starts][ceil(n/32)] with each start's bit set
    m.set(
        "initial_masks",
        lua.create_function(|_, (starts, n): (UserDataRef<HostArray>, usize)| {
            let starts = starts.as_u32("starts")?;
            let words = n.div_ceil(32);
            // Fallible: n comes from Lua, and vec! would abort the process.
            let total = starts.len().checked_mul(words).unwrap_or(usize::MAX);
            let mut masks = HostArray::new("u32", total)?;
            let bits = masks.as_u32_mut("masks")?;
            for (i, &s) in starts.iter().enumerate() {
                if s as usize >= n {
                    return Err(Error::Usage(format!("start {s} is out of range: items are 0..{n}")).into());
                }
                bits[i * words + s as usize / 32] |= 1 << (s % 32);
            }
            Ok(masks)
        })?,
    )?;

    // divgpu.store_winners(result, ring, first_row, rows, ring_size, first_step, steps, length)
    // copies steps [first_step, first_step + steps) of a winners ring
    // ([rows][ring_size], slot = step % ring_size) into result rows
    // [first_row, first_row + rows) of a [count][length] result. `ring` is a
    // u32 array, or the host-visible winners buffer itself: then only the
    // words needed are copied from the mapping (the driver does this after
    // every chunk, while the next chunk writes other slots).
    m.set(
        "store_winners",
        lua.create_function(
            |_,
             (mut result, ring, first_row, rows, ring_size, first_step, steps, length): (
                UserDataRefMut<HostArray>,
                mlua::AnyUserData,
                usize,
                usize,
                usize,
                usize,
                usize,
                usize,
            )| {
                let result = result.as_u32_mut("result")?;
                // Checked: sizes come from Lua and must not wrap into a fit.
                let fits = |a: Option<usize>, limit: usize| a.is_some_and(|a| a <= limit);
                let ring_words = match ring.borrow::<gpu::LuaBuffer>() {
                    Ok(buffer) => (buffer.0.size / 4) as usize,
                    Err(_) => ring.borrow::<HostArray>()?.as_u32("ring")?.len(),
                };
                if steps > ring_size
                    || !fits(first_step.checked_add(steps), length)
                    || !fits(rows.checked_mul(ring_size), ring_words)
                    || !fits(first_row.checked_add(rows).and_then(|r| r.checked_mul(length)), result.len())
                {
                    return Err(Error::Usage("store_winners(): sizes do not fit the arrays".into()).into());
                }
                if steps == 0 {
                    return Ok(());
                }
                // A row's steps are one or two runs of ring slots (the ring wraps).
                let slot = first_step % ring_size;
                let head = steps.min(ring_size - slot);
                if let Ok(buffer) = ring.borrow::<gpu::LuaBuffer>() {
                    let words = buffer.0.mapped_words()?;
                    for r in 0..rows {
                        let row = &mut result[(first_row + r) * length + first_step..][..steps];
                        let base = (r * ring_size) as u64;
                        words.copy(base + slot as u64, &mut row[..head])?;
                        words.copy(base, &mut row[head..])?;
                    }
                    return Ok(());
                }
                let ring = ring.borrow::<HostArray>()?;
                let ring = ring.as_u32("ring")?;
                for r in 0..rows {
                    let row = &mut result[(first_row + r) * length + first_step..][..steps];
                    let base = r * ring_size;
                    row[..head].copy_from_slice(&ring[base + slot..base + slot + head]);
                    row[head..].copy_from_slice(&ring[base..base + steps - head]);
                }
                Ok(())
            },
        )?,
    )?;

    // divgpu.mirror(embeddings, starts, length) -> u32 array [#starts][length]
    m.set(
        "mirror",
        lua.create_function(|_, (table, starts, length): (UserDataRef<Embeddings>, UserDataRef<HostArray>, usize)| {
            Ok(HostArray::U32(mirror::run(&table.0, starts.as_u32("starts")?, length)?))
        })?,
    )?;
    m.set(
        "check_job",
        lua.create_function(|_, (table, starts, length): (UserDataRef<Embeddings>, UserDataRef<HostArray>, usize)| {
            Ok(mirror::check_job(&table.0, starts.as_u32("starts")?, length)?)
        })?,
    )?;

    // divgpu.first_difference(a, b, length) -> nil | { row, step, a, b } (0-based row and step)
    m.set(
        "first_difference",
        lua.create_function(|lua, (a, b, length): (UserDataRef<HostArray>, UserDataRef<HostArray>, usize)| {
            let (a, b) = (a.as_u32("a")?, b.as_u32("b")?);
            if length == 0 {
                return Err(Error::Usage("first_difference(): length must be >= 1".into()).into());
            }
            let found = a.iter().zip(b.iter()).position(|(x, y)| x != y);
            let diff = match found {
                Some(i) => Some((i / length, i % length, a[i], b[i])),
                None if a.len() != b.len() => {
                    let i = a.len().min(b.len());
                    Some((i / length, i % length, a.get(i).copied().unwrap_or(u32::MAX), b.get(i).copied().unwrap_or(u32::MAX)))
                }
                None => None,
            };
            match diff {
                None => Ok(Value::Nil),
                Some((row, step, x, y)) => {
                    let t = lua.create_table()?;
                    t.set("row", row)?;
                    t.set("step", step)?;
                    t.set("a", x)?;
                    t.set("b", y)?;
                    Ok(Value::Table(t))
                }
            }
        })?,
    )?;

    // The cache header of a job of `starts` given as { contract, length } on `table`.
    fn cache_header(o: &LuaTable, table: &Table, starts: &[u32]) -> mlua::Result<cache::CacheHeader> {
        let contract = o.get::<Option<String>>("contract")?.unwrap_or_else(|| "fp32".into());
        Ok(cache::CacheHeader::new(&contract, table.n, table.dim, o.get("length")?, &table.sha256, starts))
    }

    // divgpu.write_cache(path, { contract, table, length, sequences }): the
    // starts the header records are the sequences' first items.
    m.set(
        "write_cache",
        lua.create_function(|_, (path, o): (String, LuaTable)| {
            let table: UserDataRef<Embeddings> = o.get("table")?;
            let sequences: UserDataRef<HostArray> = o.get("sequences")?;
            let flat = sequences.as_u32("sequences")?;
            let length: usize = o.get("length")?;
            cache::check_whole(flat.len(), length)?;
            let starts: Vec<u32> = flat.iter().step_by(length).copied().collect();
            let header = cache_header(&o, &table.0, &starts)?;
            Ok(cache::write(&path, &header, flat)?)
        })?,
    )?;

    // divgpu.checkpoint(out, { contract, table, length, starts, restart, shard, lock }) -> the
    // checkpoint of a run writing `out` (OUT.checkpoint/, held by OUT.lock):
    // resumed when it belongs to this job, an error when it belongs to
    // another (unless restart). shard = { index, count, starts = the whole
    // run's starts }: a run of one part (`starts` are then the part's), whose
    // cache is that part. lock: a divgpu.lock(out) already taken (else it is
    // taken here, refused at once when held). out "-": the cache is streamed
    // to standard output, with no checkpoint.
    m.set(
        "checkpoint",
        lua.create_function(|_, (out, o): (String, LuaTable)| {
            let table: UserDataRef<Embeddings> = o.get("table")?;
            let starts: UserDataRef<HostArray> = o.get("starts")?;
            let header = cache_header(&o, &table.0, starts.as_u32("starts")?)?;
            let restart = o.get::<Option<bool>>("restart")?.unwrap_or(false);
            let part = match o.get::<Option<LuaTable>>("shard")? {
                None => None,
                Some(s) => {
                    let all: UserDataRef<HostArray> = s.get("starts")?;
                    let sh = shard::Shard::new(s.get("index")?, s.get("count")?, all.as_u32("shard.starts")?)?;
                    let block = sh.block()?;
                    if all.as_u32("shard.starts")?[block] != *starts.as_u32("starts")? {
                        return Err(Error::Usage("checkpoint: starts are not the shard's block of shard.starts".into()).into());
                    }
                    Some(sh)
                }
            };
            let starts = starts.as_u32("starts")?;
            let sink: Box<dyn BatchSink> = if out == safe_write::STDOUT {
                Box::new(StdoutCache::new(&header, part, starts)?)
            } else {
                match o.get::<Option<UserDataRef<LockHandle>>>("lock")? {
                    Some(lock) => Box::new(Checkpoint::open_locked(&out, lock.take()?, &header, part, starts, restart)?),
                    None => Box::new(Checkpoint::open_shard(&out, &header, part, starts, restart)?),
                }
            };
            Ok(CheckpointHandle::new(sink))
        })?,
    )?;

    // divgpu.shard_block(total, index, count) -> first, count: the 0-based
    // positions of part `index` of `count` among `total` starts (contract::shard).
    m.set(
        "shard_block",
        lua.create_function(|_, (total, index, count): (usize, usize, usize)| {
            let b = shard::block(total, index, count)?;
            Ok((b.start, b.len()))
        })?,
    )?;

    // divgpu.merge(out, { part paths }) -> { parts, sequences, length }: checks
    // the parts of a sharded run and writes their merge atomically.
    m.set(
        "merge",
        lua.create_function(|lua, (out, paths): (String, Vec<String>)| {
            let merged = shard::merge(&out, &paths)?;
            let t = lua.create_table()?;
            t.set("parts", merged.parts)?;
            t.set("sequences", merged.sequences)?;
            t.set("length", merged.length)?;
            Ok(t)
        })?,
    )?;

    // divgpu.catch_signals(on): while on, SIGINT and SIGTERM only set a flag
    // (a second one exits at once); divgpu.interrupted() -> "SIGINT" | "SIGTERM" | nil.
    m.set(
        "catch_signals",
        lua.create_function(|_, on: Option<bool>| Ok(crate::interrupt::catch(on.unwrap_or(true))?))?,
    )?;
    m.set("interrupted", lua.create_function(|_, ()| Ok(crate::interrupt::caught()))?)?;

    // divgpu.read_cache(path) -> { header fields..., starts = array, sequences = array }
    m.set(
        "read_cache",
        lua.create_function(|lua, path: String| {
            let (h, flat) = cache::read(&path)?;
            let t = lua.create_table()?;
            t.set("contract", h.contract)?;
            t.set("num_items", h.num_items)?;
            t.set("dim", h.dim)?;
            t.set("length", h.length)?;
            t.set("embeddings_sha256", h.embeddings_sha256)?;
            t.set("version", h.version)?;
            t.set("starts_count", h.starts_count)?;
            t.set("divgpu_version", h.divgpu_version)?;
            t.set("count", flat.len() / h.length.max(1))?;
            let starts: Vec<u32> = flat.iter().step_by(h.length.max(1)).copied().collect();
            t.set("starts", HostArray::U32(starts))?;
            t.set("sequences", HostArray::U32(flat))?;
            Ok(t)
        })?,
    )?;

    files::register(lua, &m)?;
    plot::register(lua, &m)?;
    gram::register(lua, &m)?;
    tensor::register(lua, &m)?;
    Ok(m)
}
