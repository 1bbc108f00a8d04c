//! The tensor filter's host-side figures for the Lua driver
//! (`divgpu.jobs.tensor_slices`): the table's packed int8 slices and the
//! job's bound factors (`shaders/tensor.md`).

use mlua::{Lua, Table as LuaTable, UserDataRef, Value};

use super::boundary::function;
use super::embeddings::LuaEmbeddings;
use super::host_array::LuaHostArray;
use crate::contract::tensor;

/// `jobs.tensor_slices(e)` -> { planes = 2, words =, item_rows =, slices = u32
/// array [planes][item_rows][words] (packed int8), exponents = u32 array [N]
/// (two's complement i32), weights = f64 array [N] (2^e_j / |E_j|), factors =
/// f64 array {P, Imax, Q2, Ehat, R} }, or
/// nil, why for a table the filter cannot certify (an expected answer, not
/// misuse: the driver then runs another method).
fn tensor_slices(lua: &Lua, e: &LuaEmbeddings) -> mlua::Result<(Value, Option<String>)> {
    let t = &e.0;
    if let Err(why) = tensor::check_sliceable(t) {
        return Ok((Value::Nil, Some(why)));
    }
    let s = tensor::table_slices(t, e.norm_bounds());
    let out = lua.create_table()?;
    out.set("planes", tensor::SLICES)?;
    out.set("words", s.words)?;
    out.set("item_rows", s.item_rows)?;
    out.set("slices", LuaHostArray::U32(s.packed))?;
    out.set("exponents", LuaHostArray::U32(s.exponents.iter().map(|&x| x as u32).collect()))?;
    out.set("weights", LuaHostArray::F64(s.weights))?;
    out.set("factors", LuaHostArray::F64(s.factors.to_vec()))?;
    Ok((Value::Table(out), None))
}

pub fn register(lua: &Lua, jobs: &LuaTable) -> mlua::Result<()> {
    jobs.set("tensor_max_dim", tensor::MAX_DIM)?;
    jobs.set("tensor_slices", function(lua, |lua, e: UserDataRef<LuaEmbeddings>| tensor_slices(lua, &e))?)
}
