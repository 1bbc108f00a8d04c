-- The command line's smaller commands: verify, convert, merge, synth, info,
-- convert-fp16 and plot (run and bench have modules of their own). Each
-- takes the parsed options, already checked (cli/options.lua).

local divgpu = require "divgpu"
local device = require "divgpu.device"
local failure = require "divgpu.failure"
local options = require "divgpu.cli.options"
local report = require "divgpu.cli.report"

local need, fail = failure.need, options.fail
local write_stdout = report.write_stdout
local is_stream = divgpu.files.is_stream
local string_format = string.format
local ipairs, tostring, tonumber, require = ipairs, tostring, tonumber, require

local _M = {}

-- verify's exit status for each outcome (docs/cli.md#verify): what was
-- asked to be compared differs (a sequence, or the table itself), or the
-- input cannot be read or is not valid.
local AGREES, DIFFERS, UNREADABLE = 0, 1, 2
-- The exit status after a caught signal: 128 + its number.
local SIGNAL_STATUS = { SIGINT = 130, SIGTERM = 143 }

--- f(...) with SIGINT and SIGTERM caught (the streamed copies of convert and
--- merge stop between batches, their temporary removed): f's results, or
--- the exit status of the signal that stopped it, its line said.
local function stoppable(f, ...)
    divgpu.process.catch_signals(true)
    local result, err = f(...)
    divgpu.process.catch_signals(false)
    local signal = divgpu.process.interrupted()
    if signal then
        report.note("interrupted by %s; nothing was written", signal)
        return nil, SIGNAL_STATUS[signal] or 130
    end
    return need(result, err)
end

--- What verify checks: { sequences = K }, { sample = K, seed = S } or every sequence.
local function verify_selection(a)
    if a.sample then return { sample = tonumber(a.sample), seed = tonumber(a.seed or 1) } end
    if a.sequences then return { sequences = tonumber(a.sequences) } end
    return nil
end

--- The line verify prints when every sequence checked agrees.
local function agreement(a, v)
    local how = v.form .. " form"
    if v.positions then
        local positions = {}
        for i = 1, #v.positions do positions[i] = string_format("%d", v.positions[i]) end
        how = string_format("%s; the sample of seed %s: positions %s", how, a.seed or "1", table.concat(positions, ", "))
    end
    return string_format("%s: %d of %d sequences (length %d, contract %s) match the CPU mirror (%s)\n",
        a.cache, v.done, v.count, v.length, v.contract, how)
end

--- verify's work: its exit status; unreadable input is thrown as a failure.
local function check_cache(a)
    local e = need(divgpu.load_embeddings(a.embeddings))
    local v = need(divgpu.files.verifier(a.cache, e, verify_selection(a)))
    if v.other_table then
        report.note("%s", v.other_table)
        return DIFFERS
    end
    local show, finish = report.progress(a.quiet, options.progress_how(a))
    local t0 = divgpu.clock.now()
    divgpu.process.catch_signals(true)
    repeat
        local more = need(v:step())
        local signal = divgpu.process.interrupted()
        if signal then
            divgpu.process.catch_signals(false)
            finish()
            report.note("interrupted by %s after %d of %d sequences: nothing was found to differ so far", signal,
                v.done, v.total)
            return SIGNAL_STATUS[signal] or 130
        end
        local done, total = v.done, v.total
        show{ batch = 1, batches = 1, step = done, length = total, done = done, total = total,
              elapsed = divgpu.clock.now() - t0 }
    until not more
    divgpu.process.catch_signals(false)
    finish()
    local d = v.difference
    if d then
        report.note("%s: sequence %d (start %d) differs at step %d: the cache has %d, the CPU mirror gives %d",
            a.cache, d.position, d.start, d.step, d.cache, d.mirror)
        return DIFFERS
    end
    write_stdout(agreement(a, v))
    return AGREES
end

--- `divgpu verify`: the cache's sequences (every one, the first K or a
--- seeded sample) recomputed by the CPU mirror, streamed; the first
--- difference is named. Returns the exit status.
function _M.verify(a)
    local status, err = failure.catch(check_cache, a)
    if status then return status end
    report.note("%s", err)
    return UNREADABLE
end

--- `divgpu convert CACHE --out OTHER`: the cache in its other form (or --format's).
function _M.convert(a)
    -- To standard output, the text form unless --format says otherwise.
    local format = a.format or (a.out == "-" and "json" or nil)
    local c, stopped = stoppable(divgpu.files.convert, a.cache, a.out, { format = format })
    if not c then return stopped end
    if not a.quiet then
        report.note("converted %d sequences of length %d to the %s form%s", c.sequences, c.length, c.form,
            c.upgraded and " (a version 1 cache: written as version 2, its starts counted and hashed)" or "")
    end
    if not is_stream(a.out) then write_stdout(a.out, "\n") end
end

--- `divgpu synth`: a clustered table, written as .npy or .json by its name
--- ("-" streams JSON).
function _M.synth(a)
    local e = need(divgpu.synth{ n = tonumber(a.n), dim = tonumber(a.dim), clusters = tonumber(a.clusters),
                                 seed = tonumber(a.seed) })
    need(e:write(a.out))
    if not is_stream(a.out) then write_stdout(a.out, "\n") end
end

--- `divgpu merge`: the parts of a sharded run checked and merged (cache::shard).
function _M.merge(a)
    local m, stopped = stoppable(divgpu.files.merge, a.out, a.parts, { format = a.format })
    if not m then return stopped end
    if not a.quiet then
        report.note("merged %d parts: %d sequences of length %d (%s form)", m.parts, m.sequences, m.length, m.form)
    end
    if not is_stream(a.out) then write_stdout(a.out, "\n") end
end

--- `divgpu convert-fp16`: embeddings_fp16.bin and its meta file beside the table.
function _M.convert_fp16(a)
    local bin, meta = need(divgpu.convert_fp16(a.embeddings))
    write_stdout(bin, "\n", meta, "\n")
end

local function measure_l2(a)
    local ctx = need(device.open{ device = options.device_option(a.device) })
    local opts = a.max_mib and { max_bytes = options.positive_integer(a.max_mib, "--max-mib") * 1048576 } or nil
    local knee, points = need(require("divgpu.l2_probe").measure(ctx, opts))
    local lines = { string_format("%s: read bandwidth by working-set size\n", ctx.info.name) }
    for _, p in ipairs(points) do
        lines[#lines + 1] = string_format("  %10.2f MiB  %9.1f GB/s\n", p.bytes / 1048576, p.gbps)
    end
    lines[#lines + 1] = string_format("measured L2 size (bandwidth knee): %d bytes (%.1f MiB)\n", knee, knee / 1048576)
    write_stdout(table.concat(lines))
end

--- `divgpu info`: every device and its features, or --measure-l2's sweep.
function _M.info(a)
    if a.measure_l2 then return measure_l2(a) end
    local devices = need(divgpu.devices{})
    if #devices == 0 then fail("no Vulkan devices found") end
    for _, d in ipairs(devices) do write_stdout(table.concat(report.device_lines(d), "\n"), "\n") end
    for name, why in pairs(divgpu.shaders.not_built()) do
        write_stdout(string_format("kernel %s not in this build: %s\n", name, why))
    end
end

--- `divgpu plot STATS... --out PNG`: each file read and checked (one line
--- naming the file and line on error), then one chart.
function _M.plot(a)
    local stats = require "divgpu.stats"
    local runs = {}
    for i, path in ipairs(a.stats) do
        local run = need(stats.read(path))
        if #run.chunks == 0 then fail("%s: no chunk records to draw", path) end
        runs[i] = run
    end
    need(require("divgpu.charts").runs(runs, { out = a.out, x = a.x, scale = a.scale, title = a.title,
                                               width = tonumber(a.width), height = a.height and tonumber(a.height) }))
    write_stdout(a.out, "\n")
end

return _M
