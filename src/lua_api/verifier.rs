//! `LuaVerifier` (`verifier`): `divgpu.files.verifier(cache, table, { sequences = K }
//! | { sample = K, seed = S })`, a cache of either form checked against the
//! CPU mirror a batch at a time (`contract::verify`): `v:step()` checks the
//! next batch and says whether more remain, so the caller shows progress and
//! memory stays that of one batch. Fields: `count` (the file's sequences),
//! `total` (to check), `done`, `positions` (a sample's, 0-based, ascending),
//! `other_table` (the line saying the cache was made from another table:
//! nothing is checked), `difference` ({ position, start, step, cache,
//! mirror }, 0-based), `contract`, `length`, `form`; the three that may
//! hold nothing are `false` then.

use std::sync::Mutex;

use mlua::{Lua, Table as LuaTable, UserData, UserDataFields, UserDataRef, Value};

use super::boundary::{methods_index, Methods};
use super::embeddings::LuaEmbeddings;
use super::host_array::LuaHostArray;
use crate::contract::verify::{Selection, Verifier};
use crate::error::{Error, Result};

pub struct LuaVerifier(Mutex<Verifier>);

const TYPE: &str = "LuaVerifier";

/// The selection of `{ sequences = K }` or `{ sample = K, seed = S }` (nil: every sequence).
fn selection(o: Option<LuaTable>) -> mlua::Result<Selection> {
    let Some(o) = o else { return Ok(Selection::All) };
    let first: Option<usize> = o.get("sequences")?;
    let sample: Option<usize> = o.get("sample")?;
    let seed: Option<u64> = o.get("seed")?;
    Ok(match (first, sample, seed) {
        (None, None, None) => Selection::All,
        (Some(k), None, None) if k >= 1 => Selection::First(k),
        (None, Some(k), Some(seed)) if k >= 1 => Selection::Sample { k, seed },
        _ => {
            return Err(Error::Usage(
                "verifier: give { sequences = K } or { sample = K, seed = S } (K >= 1), not both".into(),
            )
            .into())
        }
    })
}

/// `files.verifier(cache_path, table, options)`.
pub fn open(path: String, table: UserDataRef<LuaEmbeddings>, o: Option<LuaTable>) -> mlua::Result<LuaVerifier> {
    let selection = selection(o)?;
    Ok(LuaVerifier(Mutex::new(Verifier::open(&path, table.0.clone(), selection)?)))
}

impl LuaVerifier {
    fn with<T>(&self, f: impl FnOnce(&mut Verifier) -> Result<T>) -> Result<T> {
        let mut v = self.0.lock().map_err(|_| Error::Usage("verifier: poisoned by an earlier panic".into()))?;
        f(&mut v)
    }
}

/// A field that may hold nothing is `false` then (a field is never nil: nil
/// reads as a missing field).
fn or_false<T: mlua::IntoLua>(lua: &Lua, value: Option<T>) -> mlua::Result<Value> {
    match value {
        Some(v) => v.into_lua(lua),
        None => Ok(Value::Boolean(false)),
    }
}

fn difference(lua: &Lua, v: &Verifier) -> mlua::Result<Value> {
    let Some(d) = &v.difference else { return Ok(Value::Boolean(false)) };
    let t = lua.create_table()?;
    t.set("position", d.position)?;
    t.set("start", d.start)?;
    t.set("step", d.step)?;
    t.set("cache", d.cache)?;
    t.set("mirror", d.mirror)?;
    Ok(Value::Table(t))
}

impl UserData for LuaVerifier {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("count", |_, this| Ok(this.with(|v| Ok(v.count))?));
        f.add_field_method_get("total", |_, this| Ok(this.with(|v| Ok(v.total))?));
        f.add_field_method_get("done", |_, this| Ok(this.with(|v| Ok(v.done))?));
        f.add_field_method_get("contract", |_, this| Ok(this.with(|v| Ok(v.header().contract.clone()))?));
        f.add_field_method_get("length", |_, this| Ok(this.with(|v| Ok(v.header().length))?));
        f.add_field_method_get("form", |_, this| Ok(this.with(|v| Ok(v.form().name()))?));
        f.add_field_method_get("other_table", |lua, this| {
            let line = this.with(|v| Ok(v.other_table.clone()))?;
            or_false(lua, line)
        });
        f.add_field_method_get("positions", |lua, this| {
            let positions = this.with(|v| Ok(v.positions.clone()))?;
            or_false(lua, positions.map(|p| LuaHostArray::U32(p.into_iter().map(|x| x as u32).collect())))
        });
        f.add_field_method_get("difference", |lua, this| {
            let v = this.0.lock().map_err(|_| Error::Usage("verifier: poisoned".into()))?;
            difference(lua, &v)
        });
        methods_index(f, TYPE);
    }
}

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    m.add(lua, "step", |_, this: &LuaVerifier, ()| Ok(this.with(|v| v.step())?))?;
    Ok(m)
}
