-- The driver: runs a whole job (every start, L steps) in batches of
-- sequences, each batch in chunks of steps sized by the chunk controller,
-- on one device or several. It runs a plan (divgpu.plan: the method, shape,
-- tile and layout, decided once; opts.plan, else made here from the run's
-- options), makes the jobs (at once, so that their builds overlap), and
-- gives the scheduling to divgpu.scheduler, a lane per device: this module
-- is what a lane does on a GPU.
--
--   local driver = require "divgpu.driver"
--   local result, stats = assert(driver.run{ ctx = ctx, embeddings = e, starts = starts, length = L })
--
-- `result` is a u32 array [#starts][length] (`result:sequence(start, L)`
-- gives one start's), or false when the batches were streamed to
-- opts.on_batch or the run was stopped. Misuse raises error(msg, 2); a
-- failure of a device, of the GPU or of a callback's file returns nil, err.

local divgpu = require "divgpu"
local device = require "divgpu.device"
local failure = require "divgpu.failure"
local methods = require "divgpu.methods"
local plan = require "divgpu.plan"
local scheduler = require "divgpu.scheduler"
local ChunkController = require "divgpu.chunk_controller"

local need, catch = failure.need, failure.catch
local min, max, ceil, floor = math.min, math.max, math.ceil, math.floor
local error, pcall, type, tostring, ipairs, pairs, next, setmetatable =
    error, pcall, type, tostring, ipairs, pairs, next, setmetatable
local now = divgpu.clock.now

local _M = {}

-- The GPU time a submission aims at. With two in flight, each chunk is
-- planned before the one ahead of it has reported; a tenfold rise in the cost
-- per step then meets two chunks sized at the old rate, and 0.09 s keeps both
-- under a second (tests/chunk_controller_spec.lua). Measured on lavapipe:
-- 4-8% slower than 0.25 s (more submissions); on a GPU the extra submissions
-- cost microseconds.
_M.DEFAULT_TARGET_SECONDS = 0.09

-- Steps kept on the GPU between read-backs; also the largest chunk.
local DEFAULT_RING = 512

local POLL_SECONDS = 0.0002  -- 0.2 ms between polls of several devices: a few per mille of a 90 ms submission
-- Between polls of one device's set-up while on_setup is told of it: set-up
-- takes seconds, and on a CPU device (lavapipe) the poller shares its cores.
local SETUP_POLL_SECONDS = 0.002

--- The plan of a run that names none: divgpu.plan's, from the run's
--- options (the sequences each device takes, the job's length).
local function plan_of(opts, contexts, e, sequences)
    return plan.make(contexts, e, { method = opts.method, shape = opts.shape, precision = opts.precision,
                                    spirv = opts.spirv, shader_name = opts.shader_name, length = opts.length,
                                    memory_budget = opts.memory_budget, sequences = sequences,
                                    layout = opts.layout, tile_size = opts.tile_size })
end

--- One device's job, made by the plan's method from the run's options it
--- takes, the tuning switches it takes, and what the plan settled.
local function make_job(ctx, e, opts, p)
    local m = methods.get(p.method)
    local job_opts = {}
    for from, to in pairs(m.options) do job_opts[to] = opts[from] end
    for from, to in pairs(m.tuning or {}) do job_opts[to] = (opts.tuning or {})[from] end
    for _, key in ipairs{ "shape", "precision", "layout", "tile_size" } do
        local value = p[key == "tile_size" and "tile" or key]
        if value ~= nil and m.options[key] then job_opts[m.options[key]] = value end
    end
    return need(m.job(ctx, e, job_opts))
end

--- opts.tuning checked: bench-only switches, each some method's (misuse
--- raises at run's caller); one given among the options is refused.
local function check_tuning(opts)
    local keys = methods.tuning_keys()
    for key, method in pairs(keys) do
        if opts[key] ~= nil then
            error(string.format("driver.run: %s is a tuning switch of the %s method (bench only): give it in opts.tuning",
                key, method), 4)
        end
    end
    if opts.tuning == nil then return end
    if type(opts.tuning) ~= "table" then error("driver.run: tuning must be a table", 4) end
    for key in pairs(opts.tuning) do
        if not keys[key] then error("driver.run: unknown tuning switch '" .. tostring(key) .. "'", 4) end
    end
end

--- Whether `c` is a context: a Vulkan device's (userdata), or one of
--- another kind that a method serves (a table with `kind` and `info`).
local function is_context(c)
    return type(c) == "userdata" or (type(c) == "table" and type(c.kind) == "string" and type(c.info) == "table")
end

--- The contexts a run uses (opts.ctx, contexts, job or jobs); raises on misuse.
local function contexts_of(opts)
    if opts.jobs ~= nil then
        if opts.ctx ~= nil or opts.contexts ~= nil or opts.job ~= nil then
            error("driver.run: jobs comes with its own contexts: give jobs, ctx, contexts or job, one of them", 4)
        end
        if type(opts.jobs) ~= "table" or #opts.jobs == 0 then error("driver.run: jobs must be a non-empty list of jobs", 4) end
        local contexts = {}
        for i, job in ipairs(opts.jobs) do
            if type(job) ~= "table" or not is_context(job.ctx) then
                error("driver.run: jobs[" .. i .. "] is not a job made by a method's job()", 4)
            end
            contexts[i] = job.ctx
        end
        return contexts
    end
    local contexts = opts.contexts
    if contexts == nil then
        if not is_context(opts.ctx) then error("driver.run: ctx is required", 4) end
        return { opts.ctx }
    end
    if opts.ctx ~= nil then error("driver.run: give ctx or contexts, not both", 4) end
    if type(contexts) ~= "table" or #contexts == 0 then error("driver.run: contexts must be a non-empty list of contexts", 4) end
    for i, c in ipairs(contexts) do
        if not is_context(c) then error("driver.run: contexts[" .. i .. "] is not a context", 4) end
    end
    if opts.job and #contexts > 1 then
        error("driver.run: a job belongs to one context; with several, the driver makes one per context", 4)
    end
    return contexts
end

--- The run's arguments checked (misuse raises at run's caller): the
--- contexts, the starts (a u32 array, or a plain list), in_flight, batch, method.
local function check_run(opts)
    local contexts = contexts_of(opts)
    local starts = opts.starts
    if type(starts) == "table" then starts = divgpu.array("u32", starts) end
    if type(starts) ~= "userdata" then error("driver.run: starts must be a u32 array or a list of item indices", 3) end
    local in_flight = opts.in_flight or 2
    if type(in_flight) ~= "number" or in_flight < 1 or in_flight % 1 ~= 0 then
        error("driver.run: in_flight must be a positive integer", 3)
    end
    if opts.batch ~= nil and (type(opts.batch) ~= "number" or opts.batch < 1) then error("driver.run: batch must be >= 1", 3) end
    if opts.checkpoint_seconds ~= nil and (type(opts.checkpoint_seconds) ~= "number" or not (opts.checkpoint_seconds > 0)) then
        error("driver.run: checkpoint_seconds must be a number > 0", 3)
    end
    if opts.on_setup ~= nil and type(opts.on_setup) ~= "function" then error("driver.run: on_setup must be a function", 3) end
    if opts.method ~= nil and opts.method ~= "auto" and not (opts.job or opts.jobs or opts.plan) then
        -- A method asked for must compute the request (gram has no fp16, no shape).
        local ok, why = methods.get(opts.method, 3).serves(methods.request(opts.shape, opts.precision))
        if not ok then error("driver.run: method " .. opts.method .. ": " .. why, 3) end
    end
    if opts.plan ~= nil and (type(opts.plan) ~= "table" or not methods.find(opts.plan.method)) then
        error("driver.run: plan must be a plan made by divgpu.plan.make", 3)
    end
    check_tuning(opts)
    -- (Through pcall, the native check's message carries no position: it is given the caller's.)
    local ok, err = pcall(divgpu.jobs.check_job, opts.embeddings, starts, opts.length)
    if not ok then error("driver.run: " .. tostring(err), 3) end
    return contexts, starts, in_flight
end

--- The batch size: the caller's, or the largest every device's limits allow,
--- made equal across batches, their count rounded up to a multiple of the
--- devices (equal sizes may then round it down a little: 5 starts on 4
--- devices are 3 batches of 2).
local function plan_batches(jobs, total, ring, asked, cap)
    if asked then return min(asked, total) end
    local size = cap or math.huge
    for _, job in ipairs(jobs) do size = min(size, job:max_batch(ring)) end
    size = min(size, total)
    -- Equal batches (a last batch of a few sequences would cost as many
    -- dependent steps as a full one), as many as a multiple of the devices.
    local count = ceil(total / size)
    count = min(total, ceil(count / #jobs) * #jobs)
    return ceil(total / count)
end

--- The seconds the plan's method is estimated to take for one sequence of
--- this run on one device (its cost model's estimate of the whole job, G's
--- build included, over the sequences: an upper side), or nil where there
--- is none (a job made by the caller, a method without an estimate, a
--- context that is not a Vulkan device: the cpu method sizes its own batches).
local function seconds_per_sequence(p, ctx, e, total, length)
    if not p or total < 1 or length < 2 then return nil end
    local m = methods.find(p.method)
    local key = p.method == "direct" and p.shape or p.method
    local seconds = p.estimates and p.estimates[key]
    if not seconds and m and m.estimate and methods.device_kind(ctx) == "vulkan" and type(ctx) == "userdata" then
        -- A method asked for by name: its estimate on this device's rates.
        local ok, choice = pcall(function()
            local device = { rates = require("divgpu.rates").of(ctx), memory = math.huge, name = ctx.info.name,
                             info = ctx.info, shapes = p.shape and { p.shape } or nil, fits = { [m.name] = true },
                             why_not = {} }
            return require("divgpu.cost").choose({ n = e.n, dim = e.dim, sequences = total, length = length,
                                                   precision = p.precision }, device, { m })
        end)
        seconds = ok and choice and choice.estimates[key] or nil
    end
    return seconds and seconds / total or nil
end

--- The largest batch the checkpoint interval allows (opts.checkpoint_seconds:
--- a batch estimated to take at most that long, so that a finished batch is
--- committed about that often; the bytes do not depend on the batch size),
--- or nil for no cap.
local function batch_cap(opts, p, jobs, e, total, length)
    if not opts.checkpoint_seconds then return nil end
    local per = seconds_per_sequence(p, jobs[1].ctx, e, total, length)
    if not per or per <= 0 then return nil end
    return max(1, floor(opts.checkpoint_seconds / per))
end

--- The set-up's estimated seconds (the cost model's, where it has one for
--- the plan's method: gram's build of G), for the set-up line, or nil.
local function setup_estimate(p, ctx, e)
    local f = p and require("divgpu.cost").SETUP_SECONDS[p.method]
    if not f or type(ctx) ~= "userdata" then return nil end
    local ok, seconds = pcall(f, { n = e.n, dim = e.dim }, require("divgpu.rates").of(ctx))
    return ok and seconds or nil
end

--- One job per context (no more than there are sequences): given, or made
--- by the plan's method (opts.plan, else one made here, once for every
--- device), several at once, each in a coroutine whose GPU waits yield
--- (device.await), so that their uploads and builds overlap.
local function make_jobs(opts, contexts, e, total)
    local used = {}
    for d = 1, min(#contexts, max(total, 1)) do used[d] = contexts[d] end
    local given = opts.jobs or (opts.job and { opts.job })
    local p = not given and (opts.plan or need(plan_of(opts, used, e, total))) or nil
    local jobs, makers, count = {}, {}, 0
    for d, ctx in ipairs(used) do
        jobs[d] = given and given[d]
        if not jobs[d] then
            makers[d] = coroutine.create(function() return make_job(ctx, e, opts, p) end)
            count = count + 1
        end
    end
    -- overlap_setup = false makes them one after another (the twin of
    -- tests/multidevice_spec.lua's check that they overlap). With on_setup,
    -- one device's set-up yields too, so that it is told how long it runs.
    local setup = opts.on_setup
    if (count > 1 and opts.overlap_setup ~= false) or (setup and count == 1) then
        for _, maker in pairs(makers) do device.yield_in(maker) end
    end
    local t0 = now()
    local estimate = setup and count > 0 and setup_estimate(p, used[1], e) or nil
    if setup and count > 0 then setup{ phase = "start", elapsed = 0, method = p and p.method, estimate = estimate } end
    while next(makers) do
        for d, maker in pairs(makers) do
            local job = failure.resume(maker)
            if coroutine.status(maker) == "dead" then jobs[d], makers[d] = job, nil end
        end
        if next(makers) then
            if setup then setup{ phase = "running", elapsed = now() - t0, method = p and p.method, estimate = estimate } end
            divgpu.clock.sleep(count > 1 and POLL_SECONDS or SETUP_POLL_SECONDS)
        end
    end
    if setup and count > 0 then setup{ phase = "done", elapsed = now() - t0, method = p and p.method } end
    return jobs, p
end

--- The chunk controller of `lane` for its next batch (ChunkController.new's
--- opts): the one it learned the cost per step with in its earlier batches,
--- made at its first. The batches of a run are equal and of one job, so a
--- batch starts at the cost the one before started at; only the first
--- probes (a rise since the last chunk is taken at once, as within a batch).
function _M.lane_controller(lane, opts)
    lane.controller = lane.controller or ChunkController.new(opts)
    return lane.controller
end

--- A lane: one job on its device, the batch it works on, its chunk
--- controller; what the scheduler asks of a lane, done on the GPU.
local Lane = {}
Lane.__index = Lane

function Lane:start(b)
    local run = self.run
    local first = b * run.batch_size
    local count = min(run.batch_size, run.total - first)
    -- This batch's rows: in the whole result, or an array of its own when streamed.
    local out, row0 = run.result, first
    if not out then out, row0 = need(divgpu.array("u32", count * run.length)), 0 end
    local ids = need(divgpu.array("u32", count))
    for i = 1, count do
        local s = run.starts[first + i]
        ids[i] = s
        out[(row0 + i - 1) * run.length + 1] = s  -- step 0 is the start itself
    end
    self.b, self.first, self.count, self.out, self.row0 = b, first, count, out, row0
    local t = now()
    self.batch = need(self.job:batch(ids, run.ring, run.in_flight))
    -- gram copies its counters after each chunk only for on_chunk's figures.
    self.batch.record_chunk_figures = run.opts.on_chunk ~= nil
    run.stats.batch_setup_seconds = run.stats.batch_setup_seconds + (now() - t)
    _M.lane_controller(self, { target_seconds = run.opts.target_seconds or _M.DEFAULT_TARGET_SECONDS,
                               max_iterations = run.chunk_cap })
    self.free = 1
end

function Lane:plan_chunk(remaining)
    return self.controller:next_chunk(remaining)
end

function Lane:submit(first, n)
    local rec = self.batch.recorders[self.free]
    self.free = self.free % self.run.in_flight + 1
    need(self.batch:record(first, n, rec))
    need(self.batch:submit(rec))
    return rec
end

function Lane:done(rec)
    return need(rec:done())
end

function Lane:complete(c, spent)
    local run, stats, share, batch = self.run, self.run.stats, self.share, self.batch
    local waited = now()
    local gpu = need(c.handle:wait(spent))
    stats.wait_seconds = stats.wait_seconds + (now() - waited)
    local seconds = gpu or (now() - c.submitted)
    self.controller:observe(c.n, seconds)
    stats.gpu_seconds, stats.chunks = stats.gpu_seconds + seconds, stats.chunks + 1
    stats.chunk_sizes[#stats.chunk_sizes + 1] = c.n
    share.chunks, share.gpu_seconds = share.chunks + 1, share.gpu_seconds + seconds
    -- Straight from the mapped winners buffer: only this chunk's words are read.
    -- (A batch whose winners are not in a device buffer stores them itself.)
    if batch.store_winners then
        need(batch:store_winners(self.out, self.row0, self.count, run.ring, c.first, c.n, run.length))
    else
        need(divgpu.jobs.store_winners(self.out, batch.winners_buffer, self.row0, self.count, run.ring, c.first, c.n,
                                       run.length))
    end
    run.steps_done = run.steps_done + c.n
    local t = now()
    if run.opts.on_chunk then
        -- The method's own figures of the chunk, under its name (gram: windows, fallbacks).
        run.opts.on_chunk{ device = self.device, batch = self.b + 1, first_step = c.first, steps = c.n,
                           sequences = self.count, gpu_seconds = seconds, wall_seconds = t - c.submitted,
                           elapsed = t - run.t0,
                           [self.method] = batch.chunk_stats and need(batch:chunk_stats(c.handle)) or nil }
    end
end

function Lane:finish()
    local run = self.run
    run.sequences_finished = run.sequences_finished + self.count
    local record = { first = self.first, count = self.count, out = self.out, lane = self,
                     filter = self.batch.stats and need(self.batch:stats()) or nil }
    self.batch = nil
    return record
end

--- The run's stats before the first batch: the method(s), the devices' shares.
local function initial_stats(lanes, p, jobs_seconds, batches, batch_size)
    local first = lanes[1].job
    local stats = { gpu_seconds = 0, chunks = 0, batches = batches, batch_size = batch_size, sequences = 0,
                    workgroup_size = first.workgroup_size, chunk_sizes = {}, method = first.method or "direct",
                    shape = first.shape,  -- the direct method's (nil for the others)
                    method_reason = p and p.why.method or "a job made by the caller", plan = p, underflow = first.underflow_note, products = first.products_note,
                    devices = {},
                    -- Where the wall time went on the CPU's side: making the jobs
                    -- (tables uploaded, G built), making batches, blocked waiting.
                    jobs_seconds = jobs_seconds, batch_setup_seconds = 0, wait_seconds = 0 }
    for d, lane in ipairs(lanes) do
        local job = lane.job
        stats.devices[d] = lane.share
        if lane.method ~= stats.method then stats.method = "mixed" end
        -- G's builds overlap across devices: the longest is the run's.
        if job.build_seconds then stats.build_seconds = max(stats.build_seconds or 0, job.build_seconds) end
        -- Where the first device's job set-up went, for the summary.
        if job.setup_note and not stats.setup_note then
            stats.setup_note = (#lanes > 1 and "device 1's " or "") .. job.setup_note
        end
        local m = methods.get(lane.method)
        if m.totals and not stats[lane.method] then stats[lane.method] = m.totals() end
    end
    return stats
end

--- Hands a finished batch to on_batch and counts it in the stats.
local function deliver(run, record)
    local stats, share = run.stats, record.lane.share
    stats.sequences = stats.sequences + record.count
    share.sequences, share.batches = share.sequences + record.count, share.batches + 1
    if record.filter then
        local method = record.lane.method
        methods.get(method).add_totals(stats[method], record.filter, record.count * (run.length - 1))
    end
    if run.opts.on_batch then run.opts.on_batch(record.first, record.count, record.out) end
end

local function progress(run, lane, c)
    if not run.opts.on_progress then return end
    run.opts.on_progress{ batch = lane.b + 1, batches = run.batches, step = c.first + c.n, length = run.length,
                          done = run.steps_done, total = run.batches * (run.length - 1), elapsed = now() - run.t0,
                          -- The seconds since the steps began (after the set-up): the rate's.
                          steps_elapsed = now() - run.t_steps,
                          chunk = c.n, device = lane.device, sequences_total = run.total,
                          sequences = run.sequences_finished }
end

local function run_job(opts, contexts, starts, in_flight)
    local e, length, t0 = opts.embeddings, opts.length, now()
    local total = #starts
    local jobs, p = make_jobs(opts, contexts, e, total)
    -- Chunks in flight write disjoint slots of the ring: each chunk is at most
    -- ring / in_flight steps.
    local ring = max(min(opts.ring or DEFAULT_RING, max(1, length) * in_flight), in_flight)
    local batch_size = plan_batches(jobs, total, ring, opts.batch, batch_cap(opts, p, jobs, e, total, length))
    local run = { opts = opts, starts = starts, total = total, length = length, in_flight = in_flight, ring = ring,
                  chunk_cap = floor(ring / in_flight), batch_size = batch_size, batches = ceil(total / batch_size),
                  result = not opts.on_batch and need(divgpu.array("u32", total * length)) or nil,
                  t0 = t0, steps_done = 0, sequences_finished = 0 }
    local lanes = {}
    for d, job in ipairs(jobs) do
        local method = job.method or "direct"
        lanes[d] = setmetatable({ run = run, device = d, job = job, method = method, timeout = job.ctx.timeout,
                                  share = { name = job.ctx.info.name, method = method, sequences = 0, batches = 0,
                                            chunks = 0, gpu_seconds = 0, build_seconds = job.build_seconds } }, Lane)
    end
    run.stats = initial_stats(lanes, p, now() - t0, run.batches, batch_size)
    run.t_steps = now()
    local outcome = scheduler.run(
        { batches = run.batches, length = length, in_flight = in_flight, now = now, sleep = divgpu.clock.sleep,
          poll_seconds = POLL_SECONDS },
        lanes,
        { deliver = function(_, record) deliver(run, record) end,
          after_chunk = function(lane, c) progress(run, lane, c) end,
          stop = opts.stop })
    local stats = run.stats
    stats.wait_seconds = stats.wait_seconds + outcome.polled_seconds
    stats.wall_seconds = now() - t0
    -- A stop that came after the last batch stopped nothing.
    stats.stopped = stats.sequences < total and outcome.stopped or nil
    if stats.stopped or not run.result then return false, stats end
    return run.result, stats
end

--- driver.run(opts) -> result, stats; false, stats when the batches went to
--- on_batch or the run stopped; nil, err when a device, the GPU or a
--- callback fails. opts: docs/api.md#divgpudriverrun (ctx or contexts or
--- job or jobs, embeddings, starts, length, method, the methods' options,
--- batch, checkpoint_seconds, in_flight, target_seconds, on_setup, on_progress, on_chunk, on_batch, stop).
function _M.run(opts)
    if type(opts) ~= "table" then error("driver.run: opts must be a table", 2) end
    local contexts, starts, in_flight = check_run(opts)
    return catch(run_job, opts, contexts, starts, in_flight)
end

return _M
