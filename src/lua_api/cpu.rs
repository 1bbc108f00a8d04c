//! `divgpu.cpu`: the CPU method's native core (`crate::cpu`) for the Lua
//! driver. `run` computes a batch of sequences (from their starts, or resumed
//! from a prefix of every sequence) with the mirror's bytes; what a table's
//! batches share (G', or the transposed table) is kept between calls for the
//! last table used, until `release()` or another table. `measure_rate` and
//! `estimate` give `auto` its figures.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use mlua::{Function, Lua, Table as LuaTable, UserDataRef};

use super::boundary::function;
use super::embeddings::LuaEmbeddings;
use super::host_array::{LuaHostArray, U32s};
use crate::contract::table::Table;
use crate::cpu::{rate, Job, Plan, Prepared};
use crate::error::Error;

/// The prepared state of the last table: the table (weakly), the plan asked
/// for, the bound's scale, and the state.
struct Kept {
    table: Weak<Table>,
    asked: Option<Plan>,
    scale: f64,
    prepared: Arc<Prepared>,
}

thread_local! {
    static KEPT: RefCell<Option<Kept>> = const { RefCell::new(None) };
}

fn usage(m: String) -> mlua::Error {
    Error::Usage(format!("cpu.run: {m}")).into()
}

fn plan_named(name: Option<String>) -> mlua::Result<Option<Plan>> {
    match name.as_deref() {
        None | Some("auto") => Ok(None),
        Some("gram") => Ok(Some(Plan::Gram)),
        Some("direct") => Ok(Some(Plan::Direct)),
        Some(other) => Err(usage(format!("plan '{other}' is not auto, gram or direct"))),
    }
}

/// The kept state when it fits the table and the options; else a new one.
fn prepared(e: &LuaEmbeddings, asked: Option<Plan>, scale: f64, job_steps: u64, threads: Option<usize>) -> mlua::Result<Arc<Prepared>> {
    let hit = KEPT.with_borrow(|k| {
        k.as_ref()
            .filter(|k| k.asked == asked && k.scale == scale && k.table.upgrade().is_some_and(|t| Arc::ptr_eq(&t, &e.0)))
            .map(|k| k.prepared.clone())
    });
    if let Some(p) = hit {
        return Ok(p);
    }
    KEPT.with_borrow_mut(|k| *k = None);
    let p = Arc::new(Prepared::new(&e.0, e.norm_bounds(), asked, job_steps, threads, scale)?);
    KEPT.with_borrow_mut(|k| *k = Some(Kept { table: Arc::downgrade(&e.0), asked, scale, prepared: p.clone() }));
    Ok(p)
}

/// `divgpu.cpu.run{ embeddings, starts, length, prefix = nil, from = 1,
/// threads = nil, plan = "auto", job_steps = #starts * (length - 1), chunk,
/// on_progress = nil, bound_scale = 1, instrument = false }` -> u32 array
/// `[#starts][length]`, info `{ plan, why, setup_seconds, seconds, steps,
/// singles, rescored, worst_ratio }`. `prefix` (a u32 array `[#starts][from]`)
/// resumes every sequence after its first `from` items; `on_progress(done,
/// total)` is called after every chunk of `chunk` sequences; `bound_scale`
/// and `instrument` are test hooks (gram.md's instrumented ratio test).
fn run(lua: &Lua, o: LuaTable) -> mlua::Result<(LuaHostArray, LuaTable)> {
    let e: UserDataRef<LuaEmbeddings> = o.get("embeddings").map_err(|_| usage("embeddings is required".into()))?;
    let starts: U32s = o.get("starts").map_err(|_| usage("starts is required (a list or a u32 array)".into()))?;
    let starts = starts.as_slice("starts")?;
    let length: usize = o.get("length").map_err(|_| usage("length is required".into()))?;
    let prefix: Option<U32s> = o.get("prefix")?;
    let from: usize = o.get::<Option<usize>>("from")?.unwrap_or(1);
    let threads: Option<usize> = o.get("threads")?;
    let asked = plan_named(o.get("plan")?)?;
    let scale: f64 = o.get::<Option<f64>>("bound_scale")?.unwrap_or(1.0);
    let instrument: bool = o.get::<Option<bool>>("instrument")?.unwrap_or(false);
    let on_progress: Option<Function> = o.get("on_progress")?;
    let default_steps = starts.len() as u64 * length.saturating_sub(1) as u64;
    let job_steps: u64 = o.get::<Option<u64>>("job_steps")?.unwrap_or(default_steps);
    let chunk: usize = o.get::<Option<usize>>("chunk")?.unwrap_or(starts.len().max(1)).max(1);
    let prefix = match &prefix {
        Some(p) => p.as_slice("prefix")?,
        None => &[],
    };
    let p = prepared(&e, asked, scale, job_steps, threads)?;
    let mut winners = Vec::with_capacity(starts.len() * length);
    let mut counts = crate::cpu::Counts::default();
    let mut seconds = 0.0;
    for (k, part) in starts.chunks(chunk).enumerate() {
        let first = k * chunk;
        let pre = if prefix.is_empty() { prefix } else { prefix.get(first * from..(first + part.len()) * from).unwrap_or(&[]) };
        let job = Job { starts: part, length, prefix: pre, from, instrument };
        let out = p.run(&e.0, e.norm_bounds(), &job, threads, None)?;
        winners.extend_from_slice(&out.winners);
        counts = counts.merge(out.counts);
        seconds += out.seconds;
        if let Some(f) = &on_progress {
            f.call::<()>((first + part.len(), starts.len()))?;
        }
    }
    let info = lua.create_table()?;
    info.set("plan", p.plan().name())?;
    info.set("why", p.why.as_str())?;
    info.set("setup_seconds", p.setup_seconds)?;
    info.set("seconds", seconds)?;
    info.set("steps", counts.steps)?;
    info.set("singles", counts.singles)?;
    info.set("rescored", counts.rescored)?;
    info.set("worst_ratio", counts.worst_ratio)?;
    Ok((LuaHostArray::U32(winners), info))
}

fn rates_table(lua: &Lua, r: &rate::Rates) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    t.set("build", r.build)?;
    t.set("step", r.step)?;
    t.set("direct", r.direct)?;
    Ok(t)
}

fn rates_from(o: Option<LuaTable>) -> mlua::Result<rate::Rates> {
    let Some(o) = o else { return Ok(rate::DEFAULT) };
    let d = rate::DEFAULT;
    Ok(rate::Rates {
        build: o.get::<Option<f64>>("build")?.unwrap_or(d.build),
        step: o.get::<Option<f64>>("step")?.unwrap_or(d.step),
        direct: o.get::<Option<f64>>("direct")?.unwrap_or(d.direct),
    })
}

/// `divgpu.cpu.estimate{ n, dim, steps, rates = nil }` -> seconds, plan,
/// why: the cheaper plan for `steps` sequence-steps and its estimate, from
/// `rates` (`measure_rate`'s table; the built-in `rate::DEFAULT` without).
fn estimate(o: LuaTable) -> mlua::Result<(f64, &'static str, String)> {
    let (n, dim, steps): (usize, usize, u64) = (o.get("n")?, o.get("dim")?, o.get("steps")?);
    let r = rates_from(o.get("rates")?)?;
    let (plan, why) = rate::choose(&r, n, dim, steps);
    Ok((rate::estimate(&r, plan, n, dim, steps), plan.name(), why))
}

pub fn table(lua: &Lua) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    t.set("run", function(lua, run)?)?;
    t.set("estimate", function(lua, |_, o: LuaTable| estimate(o))?)?;
    t.set(
        "measure_rate",
        function(lua, |lua, o: Option<LuaTable>| {
            let o = match o {
                Some(o) => o,
                None => lua.create_table()?,
            };
            let n = o.get::<Option<usize>>("n")?.unwrap_or(2048);
            let dim = o.get::<Option<usize>>("dim")?.unwrap_or(384);
            rates_table(lua, &crate::cpu::measure::measure(n, dim, o.get("threads")?)?)
        })?,
    )?;
    t.set("release", function(lua, |_, ()| Ok(KEPT.with_borrow_mut(|k| *k = None)))?)?;
    Ok(t)
}
