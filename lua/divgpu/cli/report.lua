-- What the command line tells the user: progress (a live line on a terminal,
-- plain or JSON lines in a log), the run's summary lines on stderr, results
-- on stdout (a failed write is an error, not a silent loss), and errors as
-- one line without divgpu's Lua file and line.
--
--   local report = require "divgpu.cli.report"
--   local show, finish = report.progress(quiet, { resumed = n, format = "auto", interval = 10 })
--                                                            -- show: driver.run's on_progress
--   report.note("%d sequences", n)                          -- "divgpu: 12 sequences" on stderr

local divgpu = require "divgpu"
local failure = require "divgpu.failure"
local methods = require "divgpu.methods"
local json = require "dkjson"

local io_stderr, io_stdout = io.stderr, io.stdout
local string_format, floor, min, max = string.format, math.floor, math.min, math.max
local tostring, ipairs = tostring, ipairs
local concat = table.concat

local _M = {}

--- One line on stderr: "divgpu: " and the text.
function _M.note(fmt, ...)
    io_stderr:write("divgpu: ", _M.printable(string_format(fmt, ...)), "\n")
end

-- Control characters as escapes: a newline in a path must not break the
-- one line, an escape sequence must not dress it.
local ESCAPES = { ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

--- A message as one line of printable text: control characters, and bytes
--- that are not UTF-8, written as escapes (\n, \t, \r, \xNN).
function _M.printable(s)
    s = tostring(s)
    local class = divgpu.files.is_utf8(s) and "[%z\1-\31\127]" or "[%z\1-\31\127-\255]"
    return (s:gsub(class, function(c) return ESCAPES[c] or string_format("\\x%02x", c:byte()) end))
end

--- A message without the "path/file.lua:NN: " prefixes error() adds: the
--- user is told what went wrong, not where in divgpu's Lua it was noticed.
function _M.strip_location(msg)
    msg = tostring(msg):gsub("^runtime error: ", "")
    local n
    repeat msg, n = msg:gsub("^[^%s:]*%.lua:%d+: ", "") until n == 0
    return msg
end

--- An error's one line: a failure's message, or the first line of any other.
function _M.first_line(err)
    if failure.is(err) then return tostring(err) end
    return (_M.strip_location(err):match("^[^\n]*"))
end

--- Writes to standard output; a failed write (a full disk behind a
--- redirection, a closed pipe) is an error, not a silent loss.
function _M.write_stdout(...)
    local ok, err = io_stdout:write(...)
    if ok then ok, err = io_stdout:flush() end
    if not ok then failure.fail("standard output: write failed: " .. tostring(err)) end
end

local function format_duration(s)
    if s ~= s or s == math.huge then return "?" end
    s = floor(s + 0.5)
    if s >= 3600 then return string_format("%dh%02dm", floor(s / 3600), floor(s % 3600 / 60)) end
    if s >= 60 then return string_format("%dm%02ds", floor(s / 60), s % 60) end
    return string_format("%ds", s)
end

--- What a progress report says, from driver.run's `p` (done and total are
--- sequence-steps of batches, with sequences finished beside them) or from a
--- simpler caller's (done and total are whole units: verify's sequences,
--- bench's pairs). `resumed`: units an earlier run did, counted in done and
--- total but not in the rate. `first`: the { fraction, at } of the first
--- report, which the rate is measured from: the rate and the ETA are of the
--- steps alone (neither the set-up before them nor the first chunk, which
--- carries the warm-up, is in it), and there is none (nil) until a later
--- report has measured it.
local function figures(p, resumed, first)
    local fraction = p.total > 0 and min(p.done / p.total, 1) or 1
    local this_run = p.sequences_total or p.total
    local at = p.steps_elapsed or p.elapsed
    local f = { done = p.done, total = p.total, resumed = resumed, elapsed = p.elapsed }
    local spent, gained = at - first.at, fraction - first.fraction
    if fraction >= 1 then
        f.eta = 0
        if spent > 0 and gained > 0 then f.rate = gained * this_run / spent end
    elseif spent > 0 and gained > 0 then
        f.rate = gained * this_run / spent
        f.eta = (1 - fraction) * spent / gained
    end
    if p.sequences_total then
        f.done, f.total = p.sequences + resumed, p.sequences_total + resumed
        f.batch, f.batches, f.step, f.length = p.batch, p.batches, min(p.step, p.length), p.length
    end
    f.percent = 100 * (resumed + fraction * this_run) / max(resumed + this_run, 1)
    return f
end

-- A rate not measured yet (the first report) is "?", and so is its ETA.
local function rate_text(rate, digits)
    return rate and string_format("%." .. digits .. "f", rate) or "?"
end

local function eta_text(eta)
    return eta and format_duration(eta) or "?"
end

--- The live line on a terminal, redrawn in place (carriage return, erase).
local function live_line(f, unit)
    local where = f.batch and string_format("  batch %d/%d  step %d/%d", f.batch, f.batches, f.step, f.length) or ""
    return string_format("\r\27[K%s %d/%d (%.0f%%%s)%s  %s %s/s  elapsed %s  ETA %s", unit, f.done, f.total,
        f.percent, f.resumed > 0 and string_format(", %d resumed", f.resumed) or "", where, rate_text(f.rate, 1), unit,
        format_duration(f.elapsed), eta_text(f.eta))
end

--- One plain line for a log: no carriage return, no escape code.
local function plain_line(f, unit)
    local where = f.batch and string_format(" (batch %d/%d, step %d/%d)", f.batch, f.batches, f.step, f.length) or ""
    return string_format("divgpu: progress: %d/%d %s%s, %.1f%%%s, %s %s/s, elapsed %s, ETA %s\n", f.done, f.total,
        unit, f.resumed > 0 and string_format(" (%d resumed)", f.resumed) or "", f.percent, where, rate_text(f.rate, 2),
        unit, format_duration(f.elapsed), eta_text(f.eta))
end

-- The JSON line's fields, in this order (docs/cli.md#progress).
local JSON_KEYS = { "event", "unit", "done", "total", "resumed", "percent", "batch", "batches", "step", "length",
                    "elapsed_s", "rate_per_s", "eta_s" }

--- One JSON line (dkjson) for a machine reading the log.
local function json_line(f, unit)
    local finite = function(x) if x == nil or x == math.huge or x ~= x then return json.null end return x end
    return json.encode({ event = "progress", unit = unit, done = f.done, total = f.total, resumed = f.resumed,
                         percent = f.percent, batch = f.batch, batches = f.batches, step = f.step, length = f.length,
                         elapsed_s = f.elapsed, rate_per_s = finite(f.rate), eta_s = finite(f.eta) },
                       { keyorder = JSON_KEYS }) .. "\n"
end

_M.PROGRESS_FORMATS = { "auto", "plain", "json" }
_M.PROGRESS_INTERVAL = 10

--- Shows progress on stderr: returns show(p) (driver.run's on_progress) and
--- finish(). how: `format` auto (a live line on a terminal, plain lines
--- elsewhere), plain or json; `interval`, the seconds between lines (not
--- the live line's); `resumed`, units done by an earlier run (from the
--- checkpoint); `unit`, what is counted (default "sequences"). quiet: nothing.
function _M.progress(quiet, how)
    local function nothing() end
    if quiet then return nothing, nothing end
    how = how or {}
    local format, unit, resumed = how.format or "auto", how.unit or "sequences", how.resumed or 0
    local live = format == "auto" and divgpu.process.stderr_is_terminal()
    local line = live and live_line or (format == "json" and json_line or plain_line)
    local interval = live and 0.2 or (how.interval or _M.PROGRESS_INTERVAL)
    local last, first
    local function show(p)
        local t = divgpu.clock.now()
        first = first or { fraction = p.total > 0 and min(p.done / p.total, 1) or 1, at = p.steps_elapsed or p.elapsed }
        -- The live line also draws its last state; a log gets its first line at once.
        if last and t - last < interval and not (live and p.done >= p.total) then return end
        last = t
        io_stderr:write(line(figures(p, resumed, first), unit))
        io_stderr:flush()
    end
    local function finish()
        if live and last then io_stderr:write("\r\27[K") io_stderr:flush() end
    end
    return show, finish
end

--- Shows the set-up of a run (driver.run's on_setup: the jobs made, tables
--- uploaded, G built, kernels compiled) on stderr: a line when it begins,
--- one every `interval` seconds while it lasts (in place on a terminal),
--- and one when it is done. how: as progress's; quiet: nothing.
function _M.setup_progress(quiet, how)
    if quiet then return nil end
    how = how or {}
    local format = how.format or "auto"
    local live = format == "auto" and divgpu.process.stderr_is_terminal()
    local interval = live and 0.2 or (how.interval or _M.PROGRESS_INTERVAL)
    local last, what = nil, "the jobs"
    return function(s)
        local t = divgpu.clock.now()
        if s.phase == "start" then
            local m = s.method and methods.find(s.method)
            what = m and string_format("the %s job%s", m.name, m.setup_what and " (" .. m.setup_what .. ")" or "")
                or "the jobs"
        elseif s.phase == "running" and last and t - last < interval then
            return
        end
        last = t
        local text
        if format == "json" then
            text = json.encode({ event = "setup", phase = s.phase, elapsed_s = s.elapsed, estimate_s = s.estimate },
                               { keyorder = { "event", "phase", "elapsed_s", "estimate_s" } }) .. "\n"
        elseif s.phase == "done" then
            text = string_format("%sdivgpu: set-up done in %s (%s)\n", live and "\r\27[K" or "",
                string_format("%.1f s", s.elapsed), what)
        else
            -- Its own progress where the cost model estimates it (G's build): the estimate beside the time spent.
            local of = s.estimate and string_format(" of about %s (estimated)", format_duration(s.estimate)) or ""
            text = string_format(live and "\r\27[Ksetting up: making %s, elapsed %s%s"
                or "divgpu: setting up: making %s, elapsed %s%s\n", what, format_duration(s.elapsed), of)
        end
        io_stderr:write(text)
        io_stderr:flush()
    end
end

--- The lines of the run's methods on their own figures (each method's
--- summary of its totals, stats[name]: gram's and the tensor filter's windows).
function _M.method_lines(stats)
    local lines = {}
    for _, m in ipairs(methods.modules()) do
        local line = m.summary and stats[m.name] and m.summary(stats[m.name], stats)
        if line then lines[#lines + 1] = line end
    end
    return lines
end

--- The names of the contexts' devices, in --device's order (a chunk's
--- "device" in the stats is a position in this list, from 1).
function _M.device_names(contexts)
    local names = {}
    for i, c in ipairs(contexts) do names[i] = c.info.name end
    return names
end

--- run's first lines: what runs where, how the method and tile were chosen.
function _M.run_header(r)
    local where = r.contexts[1].info.name
    if #r.contexts > 1 then
        where = string_format("%d devices (%s)", #r.contexts, concat(_M.device_names(r.contexts), ", "))
    end
    local what = r.method == "direct" and string_format("shape %s, %s, ", r.shape, r.precision) or ""
    local layout = r.layout and (r.layout .. " layout") or "the table in host memory"
    _M.note("%d sequences x %d steps on %s (%d items, dim %d), %s%s, %d in flight%s, fma %s", #r.starts, r.length,
        where, r.e.n, r.e.dim, what, layout, r.in_flight, #r.contexts > 1 and " per device" or "", r.fma)
    -- The plan's reasons, once (divgpu.plan).
    for _, line in ipairs(require("divgpu.plan").lines(r.plan)) do _M.note("%s", line) end
end

--- run's last lines: times, where the wall time went, each device's share,
--- the filter's work and the denormal path.
function _M.run_summary(stats)
    local several = #stats.devices > 1
    _M.note("done in %.2f s wall, %.2f s GPU%s, %d batch(es) of up to %d, %d submissions", stats.wall_seconds,
        stats.gpu_seconds, several and " (summed over the devices)" or "", stats.batches, stats.batch_size, stats.chunks)
    _M.note("wall time: %.2f s making the jobs%s, %.2f s making batches, %.2f s waiting for the GPU%s, "
        .. "%.2f s recording and reading back", stats.jobs_seconds,
        " (" .. (methods.find(stats.method) and methods.find(stats.method).setup_what or "tables uploaded") .. ")",
        stats.batch_setup_seconds,
        stats.wait_seconds, several and "s" or "",
        stats.wall_seconds - stats.jobs_seconds - stats.batch_setup_seconds - stats.wait_seconds)
    if several then
        for d, share in ipairs(stats.devices) do
            _M.note("device %d (%s): %d sequences in %d batch(es), %.2f s GPU%s", d, share.name, share.sequences,
                share.batches, share.gpu_seconds,
                share.build_seconds and string_format(", G built in %.2f s", share.build_seconds) or "")
        end
    end
    for _, line in ipairs(_M.method_lines(stats)) do _M.note("%s", line) end
    if stats.underflow then _M.note("%s", stats.underflow) end
    if stats.products then _M.note("%s", stats.products) end
    -- (gram's set-up is part of its windows line, beside G's build)
    if stats.setup_note and not stats.build_seconds then _M.note("%s", stats.setup_note) end
end

--- A device UUID (32 hex digits) as CUDA spells it, GPU-8-4-4-4-12: the
--- form CUDA_VISIBLE_DEVICES takes (lua/divgpu/assigned_devices.lua).
local function cuda_uuid(hex)
    return string_format("GPU-%s-%s-%s-%s-%s", hex:sub(1, 8), hex:sub(9, 12), hex:sub(13, 16), hex:sub(17, 20),
        hex:sub(21, 32))
end

--- `divgpu info`'s lines for one device.
function _M.device_lines(d)
    local yes = function(b) return b and "yes" or "no" end
    return {
        string_format("%d: %s (%s)", d.index, d.name, d.type),
        string_format("   UUID %s (CUDA_VISIBLE_DEVICES may name it so)", cuda_uuid(d.device_uuid)),
        string_format("   driver %s %s, Vulkan %s, vendor 0x%04x device 0x%04x", d.driver, d.driver_info,
            d.api_version, d.vendor_id, d.device_id),
        string_format("   shared memory %d B, workgroup <= %d threads, subgroup %d, storage buffer range %d B",
            d.max_shared_memory, d.max_workgroup_invocations, d.subgroup_size, d.max_storage_buffer_range),
        string_format("   16-bit storage %s, float16 %s, float64 %s, int64 %s, int64 atomics %s, timestamps %s (%.3g ns/tick)",
            yes(d.storage_buffer_16bit), yes(d.float16), yes(d.float64), yes(d.int64), yes(d.int64_atomics),
            yes(d.timestamps), d.timestamp_period_ns),
        string_format("   f32 denormals: preserve %s, flush %s, in divgpu's shaders %s%s; f32 round-to-nearest-even %s",
            yes(d.denorm_preserve_f32), yes(d.denorm_flush_f32), d.denormals,
            d.denormals_need_certificate and " (tables without the subnormal certificate run the exact underflow path)" or "",
            yes(d.rounding_rte_f32)),
    }
end

return _M
