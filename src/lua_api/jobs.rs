//! The CPU mirror and what a method's jobs and batches are made of:
//! `divgpu.mirror` and `divgpu.first_difference` (the oracle and the
//! comparison), and `divgpu.jobs`: a job's arguments checked, a batch's
//! initial masks, its winners copied out of the ring, the Gram filter's job
//! factors. The test hooks' reference rows of G' are here too.

use mlua::{AnyUserData, Lua, Table as LuaTable, UserDataRef, UserDataRefMut, Value};

use super::boundary::function;
use super::buffer::LuaBuffer;
use super::embeddings::LuaEmbeddings;
use super::host_array::{LuaHostArray, U32s};
use crate::contract::{gram, mirror};
use crate::error::Error;

/// `divgpu.first_difference(a, b, length)` -> nil | { row, step, a, b }
/// (0-based row and step), a length difference included.
fn first_difference(lua: &Lua, a: &[u32], b: &[u32], length: usize) -> mlua::Result<Value> {
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
    let Some((row, step, x, y)) = diff else { return Ok(Value::Nil) };
    let t = lua.create_table()?;
    t.set("row", row)?;
    t.set("step", step)?;
    t.set("a", x)?;
    t.set("b", y)?;
    Ok(Value::Table(t))
}

/// `divgpu.jobs.initial_masks(starts, n)` -> u32 array [#starts][ceil(n/32)]
/// with each start's bit set.
fn initial_masks(starts: &[u32], n: usize) -> mlua::Result<LuaHostArray> {
    let words = n.div_ceil(32);
    // Fallible: n comes from Lua, and vec! would abort the process.
    let total = starts.len().checked_mul(words).unwrap_or(usize::MAX);
    let mut masks = LuaHostArray::new("u32", total)?;
    let bits = masks.as_u32_mut("masks")?;
    for (i, &s) in starts.iter().enumerate() {
        if s as usize >= n {
            return Err(Error::Usage(format!("start {s} is out of range: items are 0..{n}")).into());
        }
        bits[i * words + s as usize / 32] |= 1 << (s % 32);
    }
    Ok(masks)
}

type WinnersArgs = (UserDataRefMut<LuaHostArray>, AnyUserData, usize, usize, usize, usize, usize, usize);

/// `divgpu.jobs.store_winners(result, ring, first_row, rows, ring_size,
/// first_step, steps, length)` copies steps [first_step, first_step + steps)
/// of a winners ring ([rows][ring_size], slot = step % ring_size) into result
/// rows [first_row, first_row + rows) of a [count][length] result. `ring` is
/// a u32 array, or the host-visible winners buffer itself: then only the
/// words needed are copied from the mapping (the driver does this after
/// every chunk, while the next chunk writes other slots).
fn store_winners((mut result, ring, first_row, rows, ring_size, first_step, steps, length): WinnersArgs) -> mlua::Result<()> {
    let result = result.as_u32_mut("result")?;
    // Checked: sizes come from Lua and must not wrap into a fit.
    let fits = |a: Option<usize>, limit: usize| a.is_some_and(|a| a <= limit);
    let ring_words = match ring.borrow::<LuaBuffer>() {
        Ok(buffer) => (buffer.0.size / 4) as usize,
        Err(_) => ring.borrow::<LuaHostArray>()?.as_u32("ring")?.len(),
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
    if let Ok(buffer) = ring.borrow::<LuaBuffer>() {
        let words = buffer.0.mapped_words()?;
        for r in 0..rows {
            let row = &mut result[(first_row + r) * length + first_step..][..steps];
            let base = (r * ring_size) as u64;
            words.copy(base + slot as u64, &mut row[..head])?;
            words.copy(base, &mut row[head..])?;
        }
        return Ok(());
    }
    let ring = ring.borrow::<LuaHostArray>()?;
    let ring = ring.as_u32("ring")?;
    for r in 0..rows {
        let row = &mut result[(first_row + r) * length + first_step..][..steps];
        let base = r * ring_size;
        row[..head].copy_from_slice(&ring[base + slot..base + slot + head]);
        row[head..].copy_from_slice(&ring[base..base + steps - head]);
    }
    Ok(())
}

pub fn register(lua: &Lua, m: &LuaTable) -> mlua::Result<()> {
    // divgpu.mirror(embeddings, starts, length) -> u32 array [#starts][length]
    m.set(
        "mirror",
        function(lua, |_, (table, starts, length): (UserDataRef<LuaEmbeddings>, U32s, usize)| {
            Ok(LuaHostArray::U32(mirror::run(&table.0, starts.as_slice("starts")?, length)?))
        })?,
    )?;
    m.set(
        "first_difference",
        function(lua, |lua, (a, b, length): (U32s, U32s, usize)| {
            first_difference(lua, a.as_slice("a")?, b.as_slice("b")?, length)
        })?,
    )?;
    Ok(())
}

pub fn table(lua: &Lua) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    t.set(
        "check_job",
        function(lua, |_, (table, starts, length): (UserDataRef<LuaEmbeddings>, U32s, usize)| {
            Ok(mirror::check_job(&table.0, starts.as_slice("starts")?, length)?)
        })?,
    )?;
    t.set(
        "initial_masks",
        function(lua, |_, (starts, n): (U32s, usize)| initial_masks(starts.as_slice("starts")?, n))?,
    )?;
    t.set("store_winners", function(lua, |_, args: WinnersArgs| store_winners(args))?)?;
    // jobs.gram_factors(e) -> f64 array { P, Imax } (shaders/gram.md, section 4)
    t.set(
        "gram_factors",
        function(lua, |_, e: UserDataRef<LuaEmbeddings>| {
            let (p, imax) = gram::bound_factors(&e.0, e.norm_bounds());
            Ok(LuaHostArray::F64(vec![p, imax]))
        })?,
    )?;
    Ok(t)
}

/// testing.scaled_gram_rows(e, first, count) -> f32 array [count][N]: rows of
/// G' = G diag(inv_norm) as gram_build.comp computes them.
pub fn scaled_gram_rows(lua: &Lua) -> mlua::Result<mlua::Function> {
    function(lua, |_, (e, first, count): (UserDataRef<LuaEmbeddings>, usize, usize)| {
        let t = &e.0;
        if first.checked_add(count).is_none_or(|end| end > t.n) {
            return Err(Error::Usage(format!("scaled_gram_rows: rows {first}..{first}+{count} of {}", t.n)).into());
        }
        Ok(LuaHostArray::F32(gram::scaled_gram_rows(t, first, count)))
    })
}
