-- `divgpu run`: the output locked, the table read, the checkpoint opened
-- (an earlier run of this job resumes), the devices opened, the plan made
-- (divgpu.plan: method, shape, tile, layout, once), then driver.run with every finished batch committed to the
-- checkpoint; SIGINT and SIGTERM stop it at a chunk boundary.
--
--   local run = require "divgpu.cli.run"
--   local status = run.command(args)   -- args from cli/options.lua's parser

local divgpu = require "divgpu"
local device = require "divgpu.device"
local device_profile = require "divgpu.device_profile"
local driver = require "divgpu.driver"
local failure = require "divgpu.failure"
local methods = require "divgpu.methods"
local direct = require "divgpu.methods.direct"
local plan = require "divgpu.plan"
local options = require "divgpu.cli.options"
local report = require "divgpu.cli.report"

local need, fail = failure.need, options.fail
local positive_integer = options.positive_integer
-- An --out that is a stream (-, /dev/stdout, /dev/fd/N...) is written to its
-- descriptor: no lock, no checkpoint, no path printed after it.
local is_stream = divgpu.files.is_stream
local string_format, ceil = string.format, math.ceil
local ipairs, tostring, tonumber, error, pcall, require = ipairs, tostring, tonumber, error, pcall, require

local _M = {}

-- The contract each precision's cache is of.
local CONTRACT = { fp32 = "fp32", fp16 = "fp16", ["fp16-exact"] = "fp32" }

--- The --device value a scheduler's variable gives (the run says so), or nil.
local function assigned_devices(devices)
    local value, line = require("divgpu.assigned_devices").device_option(os.getenv, devices)
    if value then report.note("%s", line) end
    return value
end

--- Opens the contexts --device names: "all" is every discrete GPU, else every
--- other GPU (integrated, virtual), else every device (a CI machine with
--- lavapipe only); a list may name a device twice, which opens two contexts
--- on it (their queues run side by side).
function _M.open_devices(value, method)
    -- The host's cores: no Vulkan device is opened (the CPU method).
    if value == "cpu" or method == "cpu" then
        if value ~= nil and value ~= "cpu" then fail("--method cpu runs on the host: give --device cpu or no --device") end
        return { require("divgpu.methods.cpu").host_context() }
    end
    -- No --device: the GPUs a job scheduler assigned, if it did (CUDA_VISIBLE_DEVICES, ...).
    if value == nil then value = assigned_devices(need(divgpu.devices{})) end
    local entries = options.device_entries(value)
    if entries == "all" then
        local devices = need(divgpu.devices{})
        entries = {}
        for _, wanted in ipairs{ function(d) return d.type == "discrete" end,
                                 function(d) return d.type ~= "cpu" end,
                                 function() return true end } do
            for _, d in ipairs(devices) do
                if wanted(d) then entries[#entries + 1] = d.index end
            end
            if #entries > 0 then break end
        end
        if #entries == 0 then fail("--device all: no Vulkan devices found") end
    end
    local contexts = {}
    for i, entry in ipairs(entries) do contexts[i] = need(device.open{ device = entry or nil }) end
    return contexts
end

--- What the run asks of the plan (divgpu.plan), from the options.
function _M.asked(a, r, sequences)
    local tile = a.tile_size or "auto"
    return { method = a.method, shape = r.shape, precision = r.precision, length = r.length, sequences = sequences,
             memory_budget = a.memory_budget and positive_integer(a.memory_budget, "--memory-budget") * 1048576,
             layout = a.layout, tile_size = tile ~= "auto" and positive_integer(tile, "--tile-size") or nil,
             l2_bytes = a.l2_bytes and positive_integer(a.l2_bytes, "--l2-bytes"), measure_l2 = a.measure_l2,
             workgroup_size = a.workgroup_size and positive_integer(a.workgroup_size, "--workgroup-size") }
end

--- The run's plan on its devices: made once (divgpu.plan); what cannot run
--- here ends the run with the plan's reason.
function _M.make_plan(contexts, e, asked)
    local p, why = plan.make(contexts, e, asked)
    if not p then
        if asked.method and asked.method ~= "auto" then fail("--method %s", why) end
        fail("%s", why)
    end
    return p
end

--- run --stats: the writer of the per-chunk figures (divgpu.stats), its
--- header describing this run.
local function stats_writer(a, r)
    local m = methods.get(r.method)
    return need(require("divgpu.stats").writer(a.stats, {
        command = "run", table = a.embeddings, table_sha256 = r.e.sha256, items = r.e.n, dim = r.e.dim,
        method = r.method, method_reason = r.method_note, shape = r.plan.shape, precision = r.plan.precision,
        layout = r.layout, in_flight = r.in_flight, target_ms = r.target_ms, devices = report.device_names(r.contexts),
        sequences = #r.starts, resumed = r.resumed, length = r.length,
        window_bins = m.chunk_fields and m.histogram_labels or nil,
    }))
end

--- Commits the --stats file of a run that ended (`stats`), or removes it
--- after an error (`stats` false). A stats file that cannot be written ends
--- the run with an error; the sequences stay in the checkpoint.
local function close_stats(recorder, stats, cp)
    if not stats then return recorder:abort() end
    local written, why = recorder:finish(stats)
    if not written then
        fail("%s (%d of %d sequences are kept in %s: run the same command again to write the cache)",
            why, cp.done, cp.total, cp.path)
    end
end

--- The device the run names: --device, else DIVGPU_DEVICE (its default), or nil.
local function named_device(a)
    local named = a.device or os.getenv("DIVGPU_DEVICE")
    if named == "" then named = nil end
    return named
end

-- The kernels that combine per-subgroup partials over gl_NumSubgroups
-- (shaders/gram.comp, tensor.comp; methods/gram.lua's check_workgroup says
-- why a partial last subgroup is refused).
local WHOLE_SUBGROUPS = { gram = true, tensor = true }

--- --workgroup-size against every device's limits (maxComputeWorkGroupSize,
--- maxComputeWorkGroupInvocations) and, for `method` (the one asked, then the
--- plan's), its kernel's own: whole subgroups. Checked once the devices are
--- open, before any work: a usage error (exit 2) naming the option, never a
--- pipeline the validation layer refuses or a kernel that drops a subgroup.
function _M.check_workgroup(a, contexts, method)
    if not a.workgroup_size or method == "cpu" then return end
    local wg = positive_integer(a.workgroup_size, "--workgroup-size")
    for _, ctx in ipairs(contexts) do
        local info = need(device_profile.profile(ctx))
        local most = math.min(info.max_workgroup_size, info.max_workgroup_invocations)
        if most and wg > most then
            failure.usage(string_format("--workgroup-size %.0f: device '%s' runs at most %d threads a workgroup "
                .. "(maxComputeWorkGroupSize %d, maxComputeWorkGroupInvocations %d)", wg, info.name, most,
                info.max_workgroup_size, info.max_workgroup_invocations))
        end
        local sub = info.subgroup_size or 0
        if WHOLE_SUBGROUPS[method] and sub > 0 and wg > sub and wg % sub ~= 0 then
            local below = wg - wg % sub
            failure.usage(string_format("--workgroup-size %d: the %s kernel combines whole subgroups: it takes a "
                .. "multiple of device '%s''s subgroup size %d, or at most %d (%d or %d here); a partial last "
                .. "subgroup is left out of gl_NumSubgroups on lavapipe", wg, method, info.name, sub, sub,
                below, below + sub))
        end
    end
end

--- What the rest of the run is: its starts, devices, and plan.
local function plan_rest(a, e, starts, cp, r)
    r.e, r.resumed = e, cp.done
    r.starts = need(divgpu.array("u32", #starts - r.resumed))
    for i = 1, #r.starts do r.starts[i] = starts[r.resumed + i] end
    local named = named_device(a)
    r.contexts = _M.open_devices(named, a.method)
    _M.check_workgroup(a, r.contexts, a.method)
    local asked = _M.asked(a, r, #r.starts)
    asked.host = named == nil  -- no device named: auto may take the host's cores instead of a CPU-only device
    r.plan = _M.make_plan(r.contexts, e, asked)
    -- Auto may move a CPU-only device's job to the host's cores (divgpu.plan).
    r.contexts = r.plan.contexts or r.contexts
    _M.check_workgroup(a, r.contexts, r.plan.method)
    r.method, r.shape, r.layout, r.tile = r.plan.method, r.plan.shape or r.shape, r.plan.layout, r.plan.tile
    r.method_note = r.plan.why.method
    r.fma = r.plan.method == "cpu" and "exact on the host" or need(device.fma_mode(r.contexts[1]))
end

--- Runs the starts the checkpoint `cp` does not have yet, committing each
--- finished batch to it (stats.stopped names a signal that stopped it).
local function run_rest(a, e, starts, cp, r)
    plan_rest(a, e, starts, cp, r)
    local show, finish = report.progress(a.quiet, options.progress_how(a, r.resumed))
    if not a.quiet then report.run_header(r) end
    local recorder = a.stats and stats_writer(a, r)
    local delivered = 0
    local result, stats = driver.run{
        contexts = r.contexts, embeddings = e, starts = r.starts, length = r.length, batch = r.batch, plan = r.plan,
        in_flight = r.in_flight, target_seconds = r.target_ms / 1000, on_progress = show,
        checkpoint_seconds = a.out ~= "-" and tonumber(a.checkpoint_interval) or nil,
        on_setup = report.setup_progress(a.quiet, options.progress_how(a, r.resumed)),
        workgroup_size = a.workgroup_size and positive_integer(a.workgroup_size, "--workgroup-size"),
        -- Each finished batch goes to the checkpoint, in order: cp:append hands
        -- it to a writer thread (formatted and synced there) and returns.
        on_batch = function(first, count, sequences)
            if first ~= delivered then error("batches arrive in order", 0) end
            delivered = delivered + count
            need(cp:append(sequences))
        end,
        stop = divgpu.process.interrupted,
        on_chunk = recorder and function(c) need(recorder:chunk(c)) end,
    }
    finish()
    if recorder then close_stats(recorder, result ~= nil and stats, cp) end
    if result == nil then
        if not is_stream(a.out) and cp.done > 0 then
            fail("%s (%d of %d sequences are kept in %s: run the same command again to resume)", stats, cp.done,
                cp.total, cp.path)
        end
        failure.fail(stats)
    end
    return stats
end

--- Loads the table a precision runs on: fp16 reads embeddings_fp16.bin next
--- to the JSON (E' = (f32)E16); fp32 and fp16-exact read the JSON.
local function load_for(path, precision)
    if precision == "fp16" then return need(divgpu.load_fp16(path)) end
    return need(divgpu.load_embeddings(path))
end

--- The job from the options: table, starts (and shard), length, checkpoint.
local function open_job(a, held, r)
    local e = load_for(a.embeddings, r.precision)
    local starts = options.parse_starts(a.starts, e.n)
    local shard
    if a.shard then starts, shard = options.shard_starts(a.shard, starts) end
    r.length = a.length and tonumber(a.length) or e.n
    if r.length > e.n then
        fail("--length %s is out of range: it must be between 1 and the number of items, %d", tostring(a.length), e.n)
    end
    -- Before the device: a checkpoint of another job is refused at once.
    local cp = need(divgpu.files.checkpoint(a.out, { contract = CONTRACT[r.precision], table = e, length = r.length,
                                                     starts = starts, restart = a.restart, shard = shard, lock = held.lock,
                                                     format = a.format }))
    held.cp, held.lock = cp, nil
    -- Batches that failed their check are said even with --quiet.
    for _, note in ipairs(cp.notes) do report.note("%s", note) end
    if shard and not a.quiet then
        report.note("shard %d/%d: starts at positions %d..%d of %d, written as a part for 'divgpu merge'",
            shard.index, shard.count, shard.first, shard.first + #starts - 1, #shard.starts)
    end
    if cp.done > 0 and not a.quiet then
        report.note("resuming from %s: %d of %d sequences already done", cp.path, cp.done, cp.total)
    end
    return e, starts, cp
end

--- The exit status of a run a signal stopped (130 or 143), after saying what was kept.
local function stopped_status(a, stats, cp)
    if is_stream(a.out) then
        report.note("interrupted by %s; the cache streamed to %s is incomplete (nothing is kept: "
            .. "a stream has no checkpoint)", stats.stopped, a.out == "-" and "standard output" or a.out)
    else
        local kept = cp.done > 0 and string_format("%d of %d sequences are kept in %s", cp.done, cp.total, cp.path)
            or "no batch had finished, nothing was kept"
        report.note("interrupted by %s; %s: run the same command again to %s", stats.stopped, kept,
            cp.done > 0 and "resume" or "start over")
    end
    return stats.stopped == "SIGTERM" and 143 or 130
end

--- run --plan-only: the table and starts read, the devices opened, the
--- plan printed on stdout; nothing is written.
local function plan_only(a, r)
    local e = load_for(a.embeddings, r.precision)
    local starts = options.parse_starts(a.starts, e.n)
    if a.shard then starts = options.shard_starts(a.shard, starts) end
    r.length = a.length and tonumber(a.length) or e.n
    -- The devices and plan the run would have (DIVGPU_DEVICE, the host offered where no device is named).
    local named = named_device(a)
    local asked = _M.asked(a, r, #starts)
    asked.host = named == nil
    local contexts = _M.open_devices(named, a.method)
    _M.check_workgroup(a, contexts, a.method)
    local p = _M.make_plan(contexts, e, asked)
    _M.check_workgroup(a, p.contexts or contexts, p.method)
    for _, line in ipairs(plan.lines(p)) do report.write_stdout(line, "\n") end
    return 0
end

local function run_locked(a, held)
    -- A workgroup size is the scanning shapes': auto then weighs the reference only.
    local shape = (a.workgroup_size and a.shape == methods.AUTO_SHAPE) and direct.default_shape() or a.shape
    local r = { shape = shape, precision = a.precision, in_flight = positive_integer(a.in_flight, "--in-flight"),
                batch = a.batch and positive_integer(a.batch, "--batch"), target_ms = tonumber(a.target_ms) }
    if a.plan_only then return plan_only(a, r) end
    local e, starts, cp = open_job(a, held, r)
    local stats
    if cp.done < cp.total then
        stats = run_rest(a, e, starts, cp, r)
        if stats.stopped then return stopped_status(a, stats, cp) end
    end
    need(cp:finish())
    if not a.quiet and stats then report.run_summary(stats) end
    if not is_stream(a.out) then report.write_stdout(a.out, "\n") end
end

--- The lock of --out (OUT.lock), taken before the table is read, so a second
--- run on the same output is refused at once (or waits with --wait). Its
--- notes (a wait, a stale lock taken over) are printed even with --quiet.
local function lock_output(a)
    if is_stream(a.out) then return nil end
    local lock = need(divgpu.files.lock(a.out, { wait = a.wait, on_wait = function(msg)
        io.stderr:write("divgpu: ", msg, " (--wait)\n") io.stderr:flush()
    end }))
    if lock.note then report.note("%s", lock.note) end
    return lock
end

--- `divgpu run`: returns the exit status (130/143 when a signal stopped it).
function _M.command(a)
    local held = { lock = not a.plan_only and lock_output(a) or nil }
    -- From the lock on, SIGINT and SIGTERM only set a flag, so that one during
    -- the set-up (the table read, G's build) too ends in the lines below and
    -- the "interrupted" line: the driver stops before its first batch.
    if held.lock or a.out == "-" then divgpu.process.catch_signals(true) end
    local ok, status = pcall(run_locked, a, held)
    -- os.exit runs no finaliser: the lock (and the checkpoint holding it) are
    -- released here, also after an error or a signal.
    if held.cp then held.cp:close() end
    if held.lock then held.lock:release() end
    divgpu.process.catch_signals(false)
    if not ok then error(status, 0) end
    return status
end

return _M
