-- The charts of `divgpu plot` (run stats files) and `bench --plot` (A/B
-- pairs), drawn by the native module's plotters binding (divgpu.plot.draw). Each
-- input gets one colour of divgpu.plot.palette, in order, in every panel.
--
--   local charts = require "divgpu.charts"
--   charts.runs(list, { out = "run.png", x = "step" | "elapsed", scale = "auto" | "linear" | "log",
--                       title, width, height })
--   charts.pairs(configs, meta, { out = "pairs.png", ... })
--
-- Both return each panel's plotting area in pixels (divgpu.plot.draw's result),
-- or nil, err when the PNG cannot be written.

local divgpu = require "divgpu"
local methods = require "divgpu.methods"

local string_format, ipairs, tostring, type = string.format, ipairs, tostring, type
local NAN = 0 / 0
local GREY = { 150, 150, 150 }

local _M = {}

--- Whether a panel's y axis is logarithmic: scale "log", "linear", or
--- "auto" (log when its largest value is over 20 times its smallest: a
--- direct run's rate beside a gram run's, or a rate that climbs tenfold).
local function log_axis(series_list, scale)
    if scale ~= "auto" then return scale == "log" end
    local lo, hi = math.huge, 0
    for _, s in ipairs(series_list) do
        for _, y in ipairs(s.y) do
            if y == y and y > 0 then lo, hi = math.min(lo, y), math.max(hi, y) end
        end
    end
    return hi > 20 * lo
end

--- The legend of a stats file: its name without folder and extension, then
--- what ran, from its header.
function _M.run_label(run)
    local name = run.path:match("([^/]+)$"):gsub("%.jsonl?$", "")
    local h = run.header
    local devices = type(h.devices) == "table" and table.concat(h.devices, " + ") or tostring(h.devices or "?")
    return string_format("%s: %s, %s sequences x %s steps, %s", name, tostring(h.method), tostring(h.sequences),
        tostring(h.length), devices)
end

--- Points of one run: x (the chunk's middle step, or the elapsed seconds at
--- its end) and one y list per figure, with a break (NaN) wherever the line
--- must not join two chunks (another batch or device on the step axis,
--- another device on the time axis).
local function run_points(run, x_axis)
    -- The method's own panel value of a chunk (gram: its mean window), where it has one.
    local m = methods.find(run.header.method)
    local chart = m and m.chart
    local function own(c) return chart and c[m.name] and chart.value(c[m.name]) or NAN end
    local xs, rate, cost, window = {}, {}, {}, {}
    local function add(x, r, c, w) xs[#xs + 1], rate[#rate + 1], cost[#cost + 1], window[#window + 1] = x, r, c, w end
    -- Chunks grouped by (device, batch) on the step axis, by device in time.
    local groups, order = {}, {}
    for _, c in ipairs(run.chunks) do
        local key = x_axis == "step" and (c.device .. ":" .. c.batch) or tostring(c.device)
        if not groups[key] then groups[key] = {} order[#order + 1] = key end
        local g = groups[key]
        g[#g + 1] = c
    end
    for i, key in ipairs(order) do
        if i > 1 then add(NAN, NAN, NAN, NAN) end
        for _, c in ipairs(groups[key]) do
            local x = x_axis == "step" and c.first_step + (c.steps - 1) / 2 or c.elapsed
            local work = c.steps * c.sequences
            add(x, work / c.gpu_seconds, 1000 * c.gpu_seconds / c.steps, own(c))
        end
    end
    return xs, rate, cost, window
end

--- When a run's first chunk began, in seconds from the run's start (its
--- elapsed at the end less its wall time): the set-up before it (the jobs
--- made: tables uploaded, G built, kernels compiled).
local function setup_seconds(run)
    local first = math.huge
    for _, c in ipairs(run.chunks) do
        if c.elapsed and c.wall_seconds then first = math.min(first, c.elapsed - c.wall_seconds) end
    end
    return first < math.huge and math.max(first, 0) or nil
end

--- The method panel's series and label: a mean window stays near one (1.00
--- to 1.02 on the poems), which an axis from zero flattens into a line at
--- the top; where every value is between 1 and 2 the panel shows the excess
--- over one, from zero (0 to 0.02), and says so in its label.
local function window_panel(series, label)
    local lo, hi = math.huge, -math.huge
    for _, s in ipairs(series) do
        for _, y in ipairs(s.y) do
            if y == y then lo, hi = math.min(lo, y), math.max(hi, y) end
        end
    end
    if not (lo >= 1 and hi < 2) then return { y_label = label, series = series } end
    local shifted = {}
    for i, s in ipairs(series) do
        local ys = {}
        for k, y in ipairs(s.y) do ys[k] = y - 1 end
        shifted[i] = { name = s.name, color = s.color, x = s.x, y = ys }
    end
    return { y_label = label .. " - 1", series = shifted }
end

--- One chart of the stats files `runs` (each from divgpu.stats.read): sequence-steps
--- per second and milliseconds per step over the run; a panel of the gram
--- filter's mean window when a run has it. Returns what divgpu.plot.draw takes.
function _M.run_chart(runs, opts)
    local x_axis = opts.x or "step"
    local rate_series, cost_series, window_series, window_label = {}, {}, {}, nil
    for i, run in ipairs(runs) do
        local label = _M.run_label(run)
        local xs, rate, cost, window = run_points(run, x_axis)
        rate_series[i] = { name = label, color = i, x = xs, y = rate }
        cost_series[i] = { name = label, color = i, x = xs, y = cost }
        local m = methods.find(run.header.method)
        if m and m.chart then
            window_series[#window_series + 1] = { name = label, color = i, x = xs, y = window }
            window_label = window_label or m.chart.label
        end
    end
    local scale = opts.scale or "auto"
    local panels = {
        { y_label = "sequence-steps / s (GPU)", series = rate_series, log_y = log_axis(rate_series, scale) },
        { y_label = "GPU ms per step", series = cost_series, log_y = log_axis(cost_series, scale) },
    }
    if #window_series > 0 then
        panels[3] = window_panel(window_series, window_label)
    end
    -- In time, the set-up before the first chunk is shown, not cut off: the
    -- axis starts at 0 and a grey line spans each run's set-up.
    if x_axis == "elapsed" then
        for _, run in ipairs(runs) do
            local setup = setup_seconds(run)
            if setup then
                rate_series[#rate_series + 1] = { name = "set-up before the first chunk (the jobs made)",
                                                  color = GREY, x = { 0, setup }, y = { 0, 0 } }
            end
        end
    end
    return {
        out = opts.out, width = opts.width, height = opts.height or (#panels == 3 and 1000 or 800),
        title = opts.title or "divgpu run: speed and cost per chunk",
        x_label = x_axis == "step" and "step (middle of each chunk)" or "elapsed seconds (end of each chunk)",
        panels = panels,
    }
end

--- Draws the chart of _M.run_chart: each panel's plotting area, or nil, err.
function _M.runs(runs, opts)
    return divgpu.plot.draw(_M.run_chart(runs, opts))
end

--- One chart of bench's alternating pairs: each configuration's time per
--- pair (GPU or wall, as its speed-up was timed), and each configuration's
--- speed-up over the first per pair, with a grey line at 1.
--- configs: { name, gpu = {seconds per pair}, wall = {...}, ratio = {...}, timed_by }.
function _M.pairs(configs, meta, opts)
    local times, ratios = {}, {}
    local n = #configs[1].gpu
    for i, c in ipairs(configs) do
        local xs, ys = {}, {}
        for p = 1, n do xs[p], ys[p] = p, c.timed_by == "wall" and c.wall[p] or c.gpu[p] end
        times[i] = { name = string_format("%s (%s time)", c.name, c.timed_by == "wall" and "wall" or "GPU"),
                     color = i, x = xs, y = ys }
        if i > 1 then
            local rs = {}
            for p = 1, n do rs[p] = c.ratio[p] end
            ratios[#ratios + 1] = { name = times[i].name, color = i, x = xs, y = rs }
        end
    end
    ratios[#ratios + 1] = { name = "", color = { 150, 150, 150 }, x = { 1, n }, y = { 1, 1 } }
    return divgpu.plot.draw{
        out = opts.out, width = opts.width, height = opts.height,
        title = opts.title or string_format("divgpu bench: %d pairs, %s, %d items x %d dims, %d sequences x %d steps",
            n, meta.device, meta.items, meta.dim, meta.sequences, meta.steps),
        x_label = "pair (alternating order)", x_labels = math.min(n, 24),  -- whole pair numbers
        panels = {
            { y_label = "seconds per run", series = times },
            { y_label = "speed-up over " .. configs[1].name, series = ratios },
        },
    }
end

return _M
