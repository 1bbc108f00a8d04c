//! The Gram method's host-side figures for the Lua driver: the job's bound
//! factors and, for the tests, the reference rows of G'.

use mlua::{Lua, Table as LuaTable, UserDataRef};

use super::arrays::HostArray;
use super::embeddings::Embeddings;
use crate::contract::gram;
use crate::error::Error;

pub fn register(lua: &Lua, m: &LuaTable) -> mlua::Result<()> {
    // divgpu.gram_factors(e) -> f64 array { P, Imax } (shaders/gram.md, section 4)
    m.set(
        "gram_factors",
        lua.create_function(|_, e: UserDataRef<Embeddings>| {
            let (p, imax) = gram::bound_factors(&e.0, &gram::row_norm_bounds(&e.0));
            Ok(HostArray::F64(vec![p, imax]))
        })?,
    )?;
    // divgpu.scaled_gram_rows(e, first, count) -> f32 array [count][N]: rows of
    // G' = G diag(inv_norm) as gram_build.comp computes them (tests)
    m.set(
        "scaled_gram_rows",
        lua.create_function(|_, (e, first, count): (UserDataRef<Embeddings>, usize, usize)| {
            let t = &e.0;
            if first.checked_add(count).is_none_or(|end| end > t.n) {
                return Err(Error::Usage(format!("scaled_gram_rows: rows {first}..{first}+{count} of {}", t.n)).into());
            }
            Ok(HostArray::F32(gram::scaled_gram_rows(t, first, count)))
        })?,
    )?;
    Ok(())
}
