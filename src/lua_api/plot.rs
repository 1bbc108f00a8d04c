//! `divgpu.plot.draw{...}` and `divgpu.plot.palette`: the charts of
//! `crate::plot` from Lua tables; and the test hooks' `png_stats(...)`.

use mlua::{Lua, Table as LuaTable, Value};

use super::boundary::function;

use crate::error::Error;
use crate::plot::{self, Chart, Panel, Series, PALETTE};

fn usage(msg: String) -> mlua::Error {
    Error::Usage(msg).into()
}

/// A list of numbers (NaN allowed: it breaks a line).
fn numbers(t: &LuaTable, what: &str) -> mlua::Result<Vec<f64>> {
    let mut v = Vec::with_capacity(t.raw_len());
    for i in 1..=t.raw_len() {
        match t.raw_get::<Value>(i)? {
            Value::Integer(x) => v.push(x as f64),
            Value::Number(x) => v.push(x),
            other => return Err(usage(format!("plot: {what} value {i} is a {}, not a number", other.type_name()))),
        }
    }
    Ok(v)
}

fn color(v: Value, default: usize, what: &str) -> mlua::Result<(u8, u8, u8)> {
    match v {
        Value::Nil => Ok(PALETTE[default % PALETTE.len()]),
        Value::Integer(k) if k >= 1 => Ok(PALETTE[(k as usize - 1) % PALETTE.len()]),
        Value::Table(t) => {
            let c = numbers(&t, what)?;
            match c[..] {
                [r, g, b] if [r, g, b].iter().all(|x| (0.0..=255.0).contains(x) && x.fract() == 0.0) => {
                    Ok((r as u8, g as u8, b as u8))
                }
                _ => Err(usage(format!("plot: {what} must be a palette index or {{r, g, b}} of 0..255"))),
            }
        }
        _ => Err(usage(format!("plot: {what} must be a palette index or {{r, g, b}} of 0..255"))),
    }
}

fn series(t: LuaTable, index: usize, where_: &str) -> mlua::Result<Series> {
    let what = format!("{where_} series {}", index + 1);
    let x: LuaTable = t.get("x").map_err(|_| usage(format!("plot: {what} needs x, a list of numbers")))?;
    let y: LuaTable = t.get("y").map_err(|_| usage(format!("plot: {what} needs y, a list of numbers")))?;
    let (x, y) = (numbers(&x, &format!("{what} x"))?, numbers(&y, &format!("{what} y"))?);
    if x.len() != y.len() {
        return Err(usage(format!("plot: {what} has {} x values and {} y values", x.len(), y.len())));
    }
    Ok(Series {
        name: t.get::<Option<String>>("name")?.unwrap_or_default(),
        color: color(t.get("color")?, index, &format!("{what} color"))?,
        points: x.into_iter().zip(y).collect(),
    })
}

fn chart(opts: &LuaTable) -> mlua::Result<Chart> {
    let panels_t: LuaTable =
        opts.get("panels").map_err(|_| usage("plot: panels must be a list of {y_label, series}".into()))?;
    let mut panels = Vec::new();
    for (i, p) in panels_t.sequence_values::<LuaTable>().enumerate() {
        let p = p.map_err(|_| usage(format!("plot: panel {} is not a table", i + 1)))?;
        let where_ = format!("panel {}", i + 1);
        let list: LuaTable = p.get("series").map_err(|_| usage(format!("plot: {where_} needs a series list")))?;
        let mut series_list = Vec::new();
        for (k, s) in list.sequence_values::<LuaTable>().enumerate() {
            let s = s.map_err(|_| usage(format!("plot: {where_} series {} is not a table", k + 1)))?;
            series_list.push(series(s, k, &where_)?);
        }
        panels.push(Panel {
            y_label: p.get::<Option<String>>("y_label")?.unwrap_or_default(),
            series: series_list,
            log_y: p.get::<Option<bool>>("log_y")?.unwrap_or(false),
        });
    }
    Ok(Chart {
        title: opts.get::<Option<String>>("title")?.unwrap_or_default(),
        x_label: opts.get::<Option<String>>("x_label")?.unwrap_or_default(),
        width: opts.get::<Option<u32>>("width")?.unwrap_or(1200),
        height: opts.get::<Option<u32>>("height")?.unwrap_or(800),
        panels,
        x_labels: opts.get("x_labels")?,
        font: opts.get("font")?,
    })
}

fn rect_table(lua: &Lua, r: &plot::Rect) -> mlua::Result<LuaTable> {
    lua.create_sequence_from(r.iter().copied())
}

/// `png_stats(path [, { rect = {x0, y0, x1, y1}, colors = { {r, g, b}, ... } }])`
/// -> { width, height, distinct (colours in rect), counts = { pixels of each colour } }
fn png_stats(lua: &Lua, path: &str, opts: Option<LuaTable>) -> mlua::Result<LuaTable> {
    let mut rect = None;
    let mut colors = Vec::new();
    if let Some(o) = opts {
        if let Some(r) = o.get::<Option<LuaTable>>("rect")? {
            let v = numbers(&r, "png_stats rect")?;
            match v[..] {
                [x0, y0, x1, y1] => rect = Some([x0 as i32, y0 as i32, x1 as i32, y1 as i32]),
                _ => return Err(usage("png_stats: rect must be {x0, y0, x1, y1}".into())),
            }
        }
        if let Some(list) = o.get::<Option<LuaTable>>("colors")? {
            for (i, c) in list.sequence_values::<Value>().enumerate() {
                colors.push(color(c?, 0, &format!("png_stats color {}", i + 1))?);
            }
        }
    }
    let s = plot::pixel_stats(path, rect, &colors)?;
    let t = lua.create_table()?;
    t.set("width", s.width)?;
    t.set("height", s.height)?;
    t.set("distinct", s.distinct)?;
    t.set("counts", lua.create_sequence_from(s.counts)?)?;
    Ok(t)
}

pub fn png_stats_function(lua: &Lua) -> mlua::Result<mlua::Function> {
    function(lua, |lua, (path, opts): (String, Option<LuaTable>)| png_stats(lua, &path, opts))
}

pub fn table(lua: &Lua) -> mlua::Result<LuaTable> {
    let t = lua.create_table()?;
    // plot.draw{ out = "run.png", width, height, title, x_label, x_labels, font,
    //            panels = { { y_label, log_y, series = { { name, color, x = {}, y = {} } } } } }
    // -> { {x0, y0, x1, y1}, ... }: each panel's plotting area in pixels.
    t.set(
        "draw",
        function(lua, |lua, opts: LuaTable| {
            let out: String = opts.get("out").map_err(|_| usage("plot: out (the PNG to write) is required".into()))?;
            let rects = plot::draw(&chart(&opts)?, &out)?;
            let list = lua.create_table()?;
            for r in &rects {
                list.push(rect_table(lua, r)?)?;
            }
            Ok(list)
        })?,
    )?;
    let palette = lua.create_table()?;
    for (r, g, b) in PALETTE {
        palette.push(lua.create_sequence_from([r, g, b])?)?;
    }
    t.set("palette", palette)?;
    Ok(t)
}
