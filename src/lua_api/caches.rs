//! The run's files for Lua (`divgpu.files`): caches of either form read,
//! written and converted, the checkpoint of a run (`checkpoint.rs` holds its
//! handle), a cache checked against the mirror (`verifier.rs`), the block of
//! one shard and the merge of a sharded run's parts.

use mlua::{Lua, Table as LuaTable, UserDataRef};

use super::boundary::function;
use super::checkpoint::LuaCheckpoint;
use super::embeddings::LuaEmbeddings;
use super::host_array::{LuaHostArray, U32s};
use super::lock::LuaLock;
use super::verifier;
use crate::cache::cache_io::Form;
use crate::cache::{cache_reader, convert};
use crate::durable::checkpoint::{BatchSink, Checkpoint, StdoutCache};
use crate::cache::{header, json, shard};
use crate::contract::table::Table;
use crate::durable::safe_write;
use crate::error::Error;

/// The cache header of a job of `starts` given as { contract, length } on `table`.
fn cache_header(o: &LuaTable, table: &Table, starts: &[u32]) -> mlua::Result<json::CacheHeader> {
    let contract = o.get::<Option<String>>("contract")?.unwrap_or_else(|| "fp32".into());
    Ok(json::CacheHeader::new(&contract, table.n, table.dim, o.get("length")?, &table.sha256, starts))
}

/// `files.write_cache(path, { contract, table, length, sequences })`: the
/// starts the header records are the sequences' first items.
fn write_cache(path: &str, o: &LuaTable) -> mlua::Result<()> {
    let table: UserDataRef<LuaEmbeddings> = o.get("table")?;
    let sequences: U32s = o.get("sequences")?;
    let flat = sequences.as_slice("sequences")?;
    let length: usize = o.get("length")?;
    json::check_whole(flat.len(), length)?;
    let starts: Vec<u32> = flat.iter().step_by(length).copied().collect();
    let header = cache_header(o, &table.0, &starts)?;
    Ok(json::write(path, &header, flat)?)
}

/// `shard = { index, count, starts = the whole run's starts }` of a
/// checkpoint whose `starts` must be that shard's block.
fn shard_of(o: &LuaTable, starts: &[u32]) -> mlua::Result<Option<header::Shard>> {
    let Some(s) = o.get::<Option<LuaTable>>("shard")? else { return Ok(None) };
    let all: U32s = s.get("starts")?;
    let all = all.as_slice("shard.starts")?;
    let sh = header::Shard::new(s.get("index")?, s.get("count")?, all)?;
    if all[sh.block()?] != *starts {
        return Err(Error::Usage("checkpoint: starts are not the shard's block of shard.starts".into()).into());
    }
    Ok(Some(sh))
}

/// `format = "json" | "binary"` of an options table (nil when not given).
fn form_option(o: &LuaTable) -> mlua::Result<Option<Form>> {
    match o.get::<Option<String>>("format")? {
        Some(name) => Ok(Some(Form::parse(&name)?)),
        None => Ok(None),
    }
}

/// `files.checkpoint(out, { contract, table, length, starts, restart, shard,
/// lock, format })` -> the checkpoint of a run writing `out` (OUT.checkpoint/, held
/// by OUT.lock): resumed when it belongs to this job, refused when it
/// belongs to another (unless restart). lock: a `files.lock(out)` already
/// taken (else it is taken here). format: the cache's form, json (default)
/// or binary. out "-": the cache is streamed to standard output, with no
/// checkpoint.
fn checkpoint(out: &str, o: &LuaTable) -> mlua::Result<LuaCheckpoint> {
    let table: UserDataRef<LuaEmbeddings> = o.get("table")?;
    let starts: U32s = o.get("starts")?;
    let starts = starts.as_slice("starts")?;
    let header = cache_header(o, &table.0, starts)?;
    let restart = o.get::<Option<bool>>("restart")?.unwrap_or(false);
    let part = shard_of(o, starts)?;
    let form = form_option(o)?.unwrap_or_default();
    let sink: Box<dyn BatchSink> = if safe_write::is_stream(out) {
        Box::new(StdoutCache::to_stream(out, &header, part, starts, form)?)
    } else {
        let lock = match o.get::<Option<UserDataRef<LuaLock>>>("lock")? {
            Some(lock) => Some(lock.take()?),
            None => None,
        };
        Box::new(Checkpoint::open_form(out, lock, &header, part, starts, restart, form)?)
    };
    Ok(LuaCheckpoint::new(sink))
}

/// `files.read_cache(path)` -> { header fields..., form, starts = array,
/// sequences = array }: a whole cache of either form in memory.
fn read_cache(lua: &Lua, path: &str) -> mlua::Result<LuaTable> {
    let form = Form::of_file(path)?;
    let (part, flat) = cache_reader::read_all(path)?;
    let h = part.header;
    let t = lua.create_table()?;
    t.set("contract", h.contract)?;
    t.set("num_items", h.num_items)?;
    t.set("dim", h.dim)?;
    t.set("length", h.length)?;
    t.set("embeddings_sha256", h.embeddings_sha256)?;
    t.set("version", h.version)?;
    t.set("starts_count", h.starts_count)?;
    t.set("divgpu_version", h.divgpu_version)?;
    t.set("form", form.name())?;
    t.set("count", flat.len() / h.length.max(1))?;
    let starts: Vec<u32> = flat.iter().step_by(h.length.max(1)).copied().collect();
    t.set("starts", LuaHostArray::U32(starts))?;
    t.set("sequences", LuaHostArray::U32(flat))?;
    Ok(t)
}

/// `files.convert(input, out, { format })` -> { form, sequences, length,
/// upgraded }: the cache at `input` written to `out` in `format` (default:
/// the other form), the bytes a run writing that form would have written.
fn convert(lua: &Lua, input: &str, out: &str, o: Option<LuaTable>) -> mlua::Result<LuaTable> {
    let form = match o.as_ref().map(form_option).transpose()?.flatten() {
        Some(form) => form,
        None => Form::of_file(input)?.other(),
    };
    let done = convert::convert(input, out, form)?;
    let t = lua.create_table()?;
    t.set("form", done.form.name())?;
    t.set("sequences", done.sequences)?;
    t.set("length", done.length)?;
    t.set("upgraded", done.upgraded)?;
    Ok(t)
}

pub fn register(lua: &Lua, t: &LuaTable) -> mlua::Result<()> {
    t.set("write_cache", function(lua, |_, (path, o): (String, LuaTable)| write_cache(&path, &o))?)?;
    t.set("read_cache", function(lua, |lua, path: String| read_cache(lua, &path))?)?;
    t.set("checkpoint", function(lua, |_, (out, o): (String, LuaTable)| checkpoint(&out, &o))?)?;
    // files.is_stream(path): whether an output path is a stream (-,
    // /dev/stdout, /dev/stderr, /dev/fd/N, /proc/PID/fd/N), written to its
    // descriptor with no temporary, lock or checkpoint.
    t.set(
        "is_stream",
        function(lua, |_, s: mlua::String| Ok(std::str::from_utf8(&s.as_bytes()).is_ok_and(safe_write::is_stream)))?,
    )?;
    // files.shard_block(total, index, count) -> first, count: the 0-based
    // positions of part `index` of `count` among `total` starts.
    t.set(
        "shard_block",
        function(lua, |_, (total, index, count): (usize, usize, usize)| {
            let b = header::block(total, index, count)?;
            Ok((b.start, b.len()))
        })?,
    )?;
    // files.merge(out, { part paths }, { format }) -> { parts, sequences,
    // length, form }: checks the parts of a sharded run (of either form) and
    // writes their merge atomically, in `format` (default: the first part's).
    t.set(
        "merge",
        function(lua, |lua, (out, paths, o): (String, Vec<String>, Option<LuaTable>)| {
            let form = match o.as_ref().map(form_option).transpose()?.flatten() {
                Some(form) => form,
                None => paths.first().map(|p| Form::of_file(p)).transpose()?.unwrap_or_default(),
            };
            let merged = shard::merge_as(&out, &paths, form)?;
            let t = lua.create_table()?;
            t.set("parts", merged.parts)?;
            t.set("sequences", merged.sequences)?;
            t.set("length", merged.length)?;
            t.set("form", form.name())?;
            Ok(t)
        })?,
    )?;
    t.set("convert", function(lua, |lua, (input, out, o): (String, String, Option<LuaTable>)| convert(lua, &input, &out, o))?)?;
    t.set(
        "verifier",
        function(lua, |_, (path, table, o): (String, UserDataRef<LuaEmbeddings>, Option<LuaTable>)| {
            verifier::open(path, table, o)
        })?,
    )?;
    Ok(())
}
