//! `LuaEmbeddings` (`emb`): a validated table (N, D, f32 rows, inv_norm,
//! sha256) in native memory, and the functions that make one: load it from
//! a file, read its fp16 copy, or synthesize one.

use std::sync::{Arc, OnceLock};

use mlua::{Lua, Table as LuaTable, UserData, UserDataFields, UserDataMethods, Value};

use super::boundary::{function, methods_index, Methods};
use super::host_array::{transpose, LuaHostArray, U32s};
use crate::contract::{fp16, gram, table::Table};
use crate::error::Error;
use crate::table::{fp16_file, synth, table_file};

/// A loaded table, and its rows' norm bounds once asked for: the Gram and
/// tensor certificates and the tensor filter's slices each need them, and a
/// job made by auto asks for them up to three times (a million rows of 384
/// take 0.2-0.4 s on 2 cores).
pub struct LuaEmbeddings(pub Arc<Table>, OnceLock<Vec<f64>>);

impl LuaEmbeddings {
    pub fn new(t: Table) -> Self {
        LuaEmbeddings(Arc::new(t), OnceLock::new())
    }

    /// `gram::row_norm_bounds` of the table, computed on the first call.
    pub fn norm_bounds(&self) -> &[f64] {
        self.1.get_or_init(|| gram::row_norm_bounds(&self.0))
    }
}

const TYPE: &str = "LuaEmbeddings";

/// `true`, or `nil, why`: a certificate's answer.
fn answer(r: Result<(), String>) -> (Option<bool>, Option<String>) {
    match r {
        Ok(()) => (Some(true), None),
        Err(why) => (None, Some(why)),
    }
}

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    m.add(lua, "values", |_, this: &LuaEmbeddings, ()| Ok(LuaHostArray::F32(this.0.data.clone())))?;
    // By columns straight from the table: `values():transposed(n, dim)`
    // without the row-major copy in between (1.5 GB at 1,048,576 x 384).
    m.add(lua, "columns", |_, this: &LuaEmbeddings, ()| {
        Ok(LuaHostArray::F32(transpose(&this.0.data, this.0.n, this.0.dim)))
    })?;
    // Rows first .. first + count - 1 (item indices from 0), row-major: one
    // block of a table kept in blocks, without a copy of the whole table.
    m.add(lua, "rows", |_, this: &LuaEmbeddings, (first, count): (usize, usize)| {
        let t = &this.0;
        match first.checked_add(count) {
            Some(end) if end <= t.n => Ok(LuaHostArray::F32(t.data[first * t.dim..end * t.dim].to_vec())),
            _ => Err(Error::Usage(format!("rows({first}, {count}): the table has {} items", t.n)).into()),
        }
    })?;
    m.add(lua, "inv_norms", |_, this: &LuaEmbeddings, ()| Ok(LuaHostArray::F32(this.0.inv_norm.clone())))?;
    m.add(lua, "to_fp16", |_, this: &LuaEmbeddings, ()| Ok(LuaHostArray::U16(fp16::to_fp16(&this.0)?)))?;
    // The table E' = (f32)E16 that the `fp16` contract runs on.
    m.add(lua, "fp16_rounded", |_, this: &LuaEmbeddings, ()| {
        let halves = fp16::to_fp16(&this.0)?;
        let t = fp16::widen(&this.0.path, this.0.n, this.0.dim, &halves, this.0.sha256.clone())?;
        Ok(LuaEmbeddings::new(t))
    })?;
    // Rows of `starts` widened to f64: the initial centroid sums of a batch.
    m.add(lua, "gather_f64", |_, this: &LuaEmbeddings, starts: U32s| {
        let t = &this.0;
        let starts = starts.as_slice("starts")?;
        let mut out = Vec::with_capacity(starts.len() * t.dim);
        for &s in starts {
            if s as usize >= t.n {
                return Err(Error::Usage(format!("start {s} is out of range: items are 0..{}", t.n)).into());
            }
            out.extend(t.row(s as usize).iter().map(|&x| x as f64));
        }
        Ok(LuaHostArray::F64(out))
    })?;
    // The rows of `starts` as f32 columns ([D][#starts]): the GEMM shape's
    // first centroids (each the start's row exactly), without a copy of the table.
    m.add(lua, "gather_columns", |_, this: &LuaEmbeddings, starts: U32s| {
        let t = &this.0;
        let starts = starts.as_slice("starts")?;
        let count = starts.len();
        let mut out = vec![0f32; count * t.dim];
        for (i, &s) in starts.iter().enumerate() {
            if s as usize >= t.n {
                return Err(Error::Usage(format!("start {s} is out of range: items are 0..{}", t.n)).into());
            }
            for (d, &x) in t.row(s as usize).iter().enumerate() {
                out[d * count + i] = x;
            }
        }
        Ok(LuaHostArray::F32(out))
    })?;
    // Upper bounds on every row's 2-norm (f64), for the Gram filter's bound.
    m.add(lua, "norm_bounds", |_, this: &LuaEmbeddings, ()| Ok(LuaHostArray::F64(this.norm_bounds().to_vec())))?;
    // true, or nil and why the Gram method cannot certify this table.
    m.add(lua, "gram_admissible", |_, this: &LuaEmbeddings, ()| {
        Ok(answer(gram::check_admissible(&this.0, this.norm_bounds())))
    })?;
    // true, or nil and why: no f32 value of the contract's chain can be
    // subnormal (contract/subnormal.rs)
    m.add(lua, "subnormal_certificate", |_, this: &LuaEmbeddings, ()| Ok(answer(crate::contract::subnormal::check(&this.0))))?;
    m.add(lua, "title", |_, this: &LuaEmbeddings, i: usize| Ok(this.0.titles.as_ref().and_then(|t| t.get(i).cloned())))?;
    m.add(lua, "id", |_, this: &LuaEmbeddings, i: usize| Ok(this.0.ids.as_ref().and_then(|t| t.get(i).cloned())))?;
    m.add(lua, "write_json", |_, this: &LuaEmbeddings, path: String| Ok(this.0.write_json(&path)?))?;
    // e:write(path): .npy (and its titles sidecar) or .json, by the name.
    m.add(lua, "write", |_, this: &LuaEmbeddings, path: String| Ok(table_file::write(&this.0, &path)?))?;
    Ok(m)
}

impl UserData for LuaEmbeddings {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("n", |_, this| Ok(this.0.n));
        f.add_field_method_get("dim", |_, this| Ok(this.0.dim));
        f.add_field_method_get("sha256", |_, this| Ok(this.0.sha256.clone()));
        f.add_field_method_get("path", |_, this| Ok(this.0.path.clone()));
        f.add_field_method_get("model", |_, this| Ok(this.0.model.clone()));
        methods_index(f, TYPE);
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_meta_method(mlua::MetaMethod::ToString, |_, this, ()| {
            Ok(format!("divgpu.embeddings<{}×{} from {}>", this.0.n, this.0.dim, this.0.path))
        });
    }
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

/// `divgpu.synth{ n, dim, clusters = 16, seed = 1, noise = 0.5 }`. Sizes are
/// checked here, and the memory they need reserved once, so that a huge
/// request is an error, never an abort (synth allocates plainly).
fn synthesize(o: LuaTable) -> mlua::Result<LuaEmbeddings> {
    let n = whole_number(&o, "n", None)?;
    let dim = whole_number(&o, "dim", None)?;
    let clusters = whole_number(&o, "clusters", Some(16))?.max(1);
    let seed = whole_number(&o, "seed", Some(1))?;
    let noise: f64 = o.get::<Option<f64>>("noise")?.unwrap_or(0.5);
    if n < 2 || dim < 1 {
        return Err(Error::Usage(format!("synth: a table has n >= 2 items of dim >= 1 values, not {n} x {dim}")).into());
    }
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
    Ok(LuaEmbeddings::new(synth::clustered(n, dim, clusters, seed, noise)?))
}

pub fn register(lua: &Lua, m: &LuaTable) -> mlua::Result<()> {
    // divgpu.load_embeddings(path) -> the table of an embeddings.json or .npy
    m.set("load_embeddings", function(lua, |_, path: String| Ok(LuaEmbeddings::new(table_file::load(&path)?)))?)?;
    // divgpu.load_fp16(json_path) -> the table E' = (f32)E16 from the .bin next to it
    m.set("load_fp16", function(lua, |_, path: String| Ok(LuaEmbeddings::new(fp16_file::load(&path)?)))?)?;
    // divgpu.convert_fp16(json_path) -> bin_path, meta_path
    m.set("convert_fp16", function(lua, |_, path: String| Ok(fp16_file::convert(&path)?))?)?;
    m.set("synth", function(lua, |_, o: LuaTable| synthesize(o))?)?;
    Ok(())
}
