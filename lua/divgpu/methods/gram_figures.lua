-- gram_figures: the certified filters' statistics (gram's, and the tensor
-- filter's): the window-size histogram, the counters summed from a batch's
-- state, a chunk's figures, the run's totals and its summary line, the
-- --stats record and the chart. Pure functions of numbers; no GPU.
--
--   local figures = require "divgpu.methods.gram_figures"
--   local t = figures.totals(); figures.add_totals(t, batch_stats, steps)
--   print(figures.summary_of("gram")(t, {}))

local kernel = require "divgpu.kernel"

local max = math.max
local string_format, ipairs = string.format, ipairs

local _M = {}

-- The per-sequence state's counters (shaders/include/gram_state.glsl,
-- through the registry): words per sequence, 1-based offsets.
local S = kernel.descriptor("gram").state
local U32_WORDS = S.STATE_U32
local WINDOW_TOTAL, WINDOW_ONES = S.S_WINDOW_TOTAL + 1, S.S_WINDOW_ONES + 1
local FALLBACKS, WINDOW_MAX, HIST_FIRST, HIST_BINS = S.S_FALLBACKS + 1, S.S_WINDOW_MAX + 1, S.S_HIST, S.HIST_BINS

--- Window-size histogram bins (gram.comp's window_bin): labels and a zeroed count per bin.
_M.histogram_labels = { "1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129-256", "257+", "0" }
function _M.empty_histogram()
    local h = {}
    for k = 1, HIST_BINS do h[k] = 0 end
    return h
end

--- Counters summed over the batch's sequences, from a copy of state_u32:
--- window total, windows of one, fallbacks, the histogram, and the largest
--- window so far (a running maximum per sequence).
function _M.of_state(u, count)
    local t = { window_total = 0, window_ones = 0, fallbacks = 0, window_max = 0, window_histogram = _M.empty_histogram() }
    local hist = t.window_histogram
    for i = 0, count - 1 do
        local o = i * U32_WORDS
        t.window_total = t.window_total + u[o + WINDOW_TOTAL]
        t.window_ones = t.window_ones + u[o + WINDOW_ONES]
        t.fallbacks = t.fallbacks + u[o + FALLBACKS]
        t.window_max = max(t.window_max, u[o + WINDOW_MAX])
        for k = 1, HIST_BINS do hist[k] = hist[k] + u[o + HIST_FIRST + k] end
    end
    return t
end

--- A chunk's figures: the difference of the counters `now` (of_state at the
--- chunk's end) and `before` (at its start), over `sequence_steps` steps.
function _M.chunk_difference(now, before, sequence_steps)
    local c = { sequence_steps = sequence_steps, window_total = now.window_total - before.window_total,
                window_ones = now.window_ones - before.window_ones, fallbacks = now.fallbacks - before.fallbacks,
                window_max_batch = now.window_max, window_histogram = {} }
    c.window_mean = c.window_total / c.sequence_steps
    for k = 1, HIST_BINS do
        c.window_histogram[k] = now.window_histogram[k] - before.window_histogram[k]
        -- The last bin counts windows of size 0 (a fallback), not the largest sizes.
        if c.window_histogram[k] > 0 and k < HIST_BINS then c.window_max_bin = _M.histogram_labels[k] end
    end
    return c
end

--- The line of a run's summary on a certified filter's totals `t` (gram's,
--- or the tensor filter's: `name`): windows, fallbacks; G's build where
--- `stats` has it.
function _M.summary_of(name)
    return function(t, stats)
        if not t or t.steps == 0 then return nil end
        -- The window-size histogram, as shares of the steps, bins that occurred only.
        local bins = {}
        for k, c in ipairs(t.window_histogram or {}) do
            if c > 0 then bins[#bins + 1] = string_format("%s: %.3g%%", _M.histogram_labels[k], 100 * c / t.steps) end
        end
        local built = stats.build_seconds and string_format(" G built in %.2f s%s;", stats.build_seconds,
            stats.setup_note and " (" .. stats.setup_note .. ")" or "") or ""
        return string_format("%s:%s windows: mean %.3f, %.1f%% of steps a window of one, largest %d; "
            .. "%d fallback(s) to a full scan in %d sequence-steps; window sizes %s", name, built,
            t.window_total / t.steps, 100 * t.window_ones / t.steps, t.window_max, t.fallbacks, t.steps,
            table.concat(bins, ", "))
    end
end

-- A chunk's figures as the --stats file keeps them (divgpu.stats), and their names.
_M.chunk_fields = { "sequence_steps", "window_mean", "window_total", "window_ones", "fallbacks", "window_max_bin",
                    "window_max_batch", "window_histogram" }
function _M.chunk_record(g)
    local r = {}
    for _, k in ipairs(_M.chunk_fields) do r[k] = g[k] end
    return r
end

-- The panel divgpu plot draws of a chunk's figures.
_M.chart = { label = "gram: mean window", value = function(g) return g.window_mean end }

--- The run's totals of the filter (the driver sums each finished batch's
--- `stats()` into them): steps, window_total, window_ones, fallbacks,
--- window_max, max_ratio, window_histogram.
function _M.totals()
    return { steps = 0, window_total = 0, window_ones = 0, fallbacks = 0, window_max = 0, max_ratio = 0,
             window_histogram = _M.empty_histogram() }
end

--- Adds a finished batch's stats (`s`, of `sequence_steps` steps) to `t`.
function _M.add_totals(t, s, sequence_steps)
    t.steps = t.steps + sequence_steps
    t.window_total = t.window_total + s.window_total
    t.window_ones = t.window_ones + s.window_ones
    t.fallbacks = t.fallbacks + s.fallbacks
    t.window_max = max(t.window_max, s.window_max)
    t.max_ratio = max(t.max_ratio, s.max_ratio)
    for k, c in ipairs(s.window_histogram) do t.window_histogram[k] = t.window_histogram[k] + c end
end

return _M
