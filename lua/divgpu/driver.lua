-- The driver: runs a whole job (every start, L steps) in batches of
-- sequences, each batch in chunks of steps sized by the chunk controller.
--
--   local driver = require "divgpu.driver"
--   local result, stats = driver.run{ ctx = ctx, embeddings = e, starts = starts, length = L,
--                                    batch = nil, target_seconds = 0.09, on_progress = fn }
--
-- `result` is a u32 array [#starts][length], or nil when the batches are
-- streamed to opts.on_batch (or the run was stopped). Misuse raises
-- error(msg, 2); device and input failures propagate as errors from the
-- native module.

local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local gram = require "divgpu.gram"
local ChunkController = require "divgpu.chunk_controller"

local min, max, ceil, floor = math.min, math.max, math.ceil, math.floor
local clock = os.clock
local error, type, tostring = error, type, tostring

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

local function now()
    -- Wall clock with sub-second resolution where LuaJIT's ffi can reach it.
    local ok, ffi = pcall(require, "ffi")
    if ok then
        pcall(ffi.cdef, "typedef struct { long tv_sec; long tv_nsec; } divgpu_timespec;"
            .. "int clock_gettime(int clk_id, divgpu_timespec *tp);")
        local ts = ffi.new("divgpu_timespec")
        return function()
            ffi.C.clock_gettime(1, ts)  -- CLOCK_MONOTONIC
            return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
        end
    end
    return clock
end
_M.now = now()

--- The method a run uses and why: opts.method "direct" or "gram" as given;
--- "auto" (the default) asks gram.choose, except for what only direct runs
--- (another shape or precision than baseline fp32).
function _M.choose_method(ctx, e, opts, sequences)
    if opts.job then return opts.job.method or "direct", "a job made by the caller" end
    local method = opts.method or "auto"
    if method == "direct" or method == "gram" then return method, "asked for" end
    if opts.spirv or opts.shader_name then return "direct", "a direct-method shader was given" end
    if method ~= "auto" then error("driver.run: method must be auto, direct or gram, not '" .. tostring(method) .. "'", 3) end
    if (opts.shape or "baseline") ~= "baseline" or (opts.precision or "fp32") ~= "fp32" then
        return "direct", "shapes and precisions other than baseline fp32 run only with the direct method"
    end
    return gram.choose(ctx, e, { sequences = sequences, memory_budget = opts.memory_budget })
end

--- A short sleep (LuaJIT's ffi: usleep), used while polling several devices'
--- fences; nil where ffi is unavailable (then the driver waits on one device).
local sleep = (function()
    local ok, ffi = pcall(require, "ffi")
    if not ok then return nil end
    pcall(ffi.cdef, "int usleep(unsigned int usec);")
    return function(seconds) ffi.C.usleep(seconds * 1e6) end
end)()
local POLL_SECONDS = 0.0002  -- 0.2 ms: a few per mille of a 90 ms submission

--- driver.run(opts) -> result, stats. opts:
---   ctx, embeddings, starts (u32 array), length        required (ctx, or contexts)
---   contexts       a list of contexts (several devices, or several contexts on
---                  one): the batches are dealt to them as each becomes free,
---                  every device keeps its own submissions in flight, and the
---                  result is the same bytes as one device's (each sequence
---                  depends only on its start). stats.devices has each one's share.
---                  stats.jobs_seconds, batch_setup_seconds, wait_seconds: the
---                  wall time spent making jobs, making batches, and waiting on
---                  the GPUs (the rest is recording and reading back)
---   method         "auto" (default) | "direct" | "gram" (SPEC section 8). auto
---                  picks gram where G and the state fit the device's memory
---                  (memory_budget: bytes, to plan for less), else direct;
---                  stats.method and stats.method_reason say which and why
---   shape, precision, tile_size, layout, workgroup_size, spirv  passed to vk_compute.job
---   window_capacity, g_block_rows, gram_defines (and layout, workgroup_size,
---                  spirv)  passed to gram.job
---   job            a job made earlier with vk_compute.job or gram.job (instead of
---                  the above; one context only)
---   jobs           a list of such jobs, one per context (instead of ctx,
---                  contexts and job): each device runs its own
---   batch          sequences per batch (default: from the devices' limits, and at
---                  least one batch per device)
---   in_flight      submissions kept in flight (default 2): the CPU records
---                  chunk n+1 while the GPU runs chunk n
---   target_seconds GPU time each submission aims at (default
---                  DEFAULT_TARGET_SECONDS: 0.09 s, so that a tenfold rise in
---                  the cost per step keeps even the chunks already planned,
---                  the running one and the one queued behind it, under a second)
---   on_progress    function(progress) called after every chunk: batch, batches,
---                  step, length, done, total (batch-steps of this run), elapsed,
---                  chunk, sequences (finished in this run), sequences_total
---   on_chunk       function(chunk) called after every chunk, in the order the
---                  chunks finish: device (1 with one device), batch, first_step,
---                  steps, sequences (rows of the batch), gpu_seconds, wall_seconds
---                  (submit to done), elapsed (since run began), gram (the filter's
---                  figures for this chunk, from batch:chunk_stats(rec), where the
---                  job provides it)
---   on_batch       function(first, count, sequences) called after each batch, in
---                  the order of the starts (with several devices a batch that
---                  finishes early waits for those before it): rows [first, first + count) of starts (0-based) as a u32
---                  array [count][length]. Only the batches in progress (and any waiting for an
---                  earlier one) are then held in memory
---                  and run returns nil for the result (a full ordering of 100,000
---                  items would be 40 GB).
---   stop           function() polled between chunks (and before each batch); once
---                  it returns a true value, no more chunks are submitted, those in
---                  flight are waited for, a batch they finish is still delivered,
---                  and run returns nil, stats with stats.stopped = that value
---                  (stats.sequences: how many were finished)
---   exact_underflow  false turns off the exact underflow path
---                  (vk.underflow_defines): tests only, the output may differ
--- One device's job: the method's own (the bytes are the same either way).
local function make_job(ctx, e, opts, method)
    if method == "gram" then
        return gram.job(ctx, e, {
            layout = opts.layout, workgroup_size = opts.workgroup_size, window_capacity = opts.window_capacity,
            reg_slots = opts.reg_slots, shared_slots = opts.shared_slots, build_tiling = opts.build_tiling,
            g_block_rows = opts.g_block_rows, defines = opts.gram_defines, build_defines = opts.gram_build_defines,
            spirv = opts.spirv, memory_budget = opts.memory_budget, exact_underflow = opts.exact_underflow })
    end
    return vk.job(ctx, e, {
        shape = opts.shape, precision = opts.precision, tile_size = opts.tile_size, layout = opts.layout,
        spirv = opts.spirv, name = opts.shader_name, workgroup_size = opts.workgroup_size,
        exact_underflow = opts.exact_underflow })
end

--- The contexts a run uses (opts.ctx or opts.contexts); raises on misuse.
local function contexts_of(opts)
    local contexts = opts.contexts
    if opts.jobs ~= nil then
        if opts.ctx ~= nil or contexts ~= nil or opts.job ~= nil then
            error("driver.run: jobs comes with its own contexts: give jobs, ctx, contexts or job, one of them", 3)
        end
        if type(opts.jobs) ~= "table" or #opts.jobs == 0 then error("driver.run: jobs must be a non-empty list of jobs", 3) end
        contexts = {}
        for i, job in ipairs(opts.jobs) do
            if type(job) ~= "table" or type(job.ctx) ~= "userdata" then
                error("driver.run: jobs[" .. i .. "] is not a job made by vk_compute.job or gram.job", 3)
            end
            contexts[i] = job.ctx
        end
        return contexts
    end
    if contexts == nil then
        if type(opts.ctx) ~= "userdata" then error("driver.run: ctx is required", 3) end
        return { opts.ctx }
    end
    if opts.ctx ~= nil then error("driver.run: give ctx or contexts, not both", 3) end
    if type(contexts) ~= "table" or #contexts == 0 then
        error("driver.run: contexts must be a non-empty list of contexts", 3)
    end
    for i, c in ipairs(contexts) do
        if type(c) ~= "userdata" then error("driver.run: contexts[" .. i .. "] is not a context", 3) end
    end
    if opts.job and #contexts > 1 then
        error("driver.run: a job belongs to one context; with several, the driver makes one per context", 3)
    end
    return contexts
end

--- The batch size: the caller's, or the largest every device's limits allow,
--- made equal across batches, their count rounded up to a multiple of the
--- devices (equal sizes may then round it down a little: 5 starts on 4
--- devices are 3 batches of 2).
local function plan_batches(lanes, total, ring, asked)
    if asked then
        if asked < 1 then error("driver.run: batch must be >= 1", 3) end
        return min(asked, total)
    end
    local size = math.huge
    for _, lane in ipairs(lanes) do size = min(size, lane.job:max_batch(ring)) end
    size = min(size, total)
    -- Equal batches (a last batch of a few sequences would cost as many
    -- dependent steps as a full one), as many as a multiple of the devices.
    local count = ceil(total / size)
    count = min(total, ceil(count / #lanes) * #lanes)
    return ceil(total / count)
end

function _M.run(opts)
    local e, starts, length = opts.embeddings, opts.starts, opts.length
    local contexts = contexts_of(opts)
    if type(starts) ~= "userdata" then error("driver.run: starts must be a u32 array", 2) end
    local in_flight = opts.in_flight or 2
    if type(in_flight) ~= "number" or in_flight < 1 or in_flight % 1 ~= 0 then
        error("driver.run: in_flight must be a positive integer", 2)
    end
    divgpu.check_job(e, starts, length)
    local now_ = _M.now
    local t0 = now_()
    local total = #starts
    -- A lane per context (no more than there are sequences): its job, and
    -- the batch it is working on.
    local lanes, makers = {}, {}
    for d, ctx in ipairs(contexts) do
        if d > max(total, 1) then break end
        local given = opts.jobs and opts.jobs[d] or opts.job
        local method, reason = _M.choose_method(ctx, e, given and { job = given } or opts,
                                                ceil(total / min(#contexts, max(total, 1))))
        lanes[d] = { device = d, ctx = ctx, job = given, reason = reason, queue = {}, head = 1, tail = 0 }
        if not given then
            makers[d] = coroutine.create(function()
                local job = make_job(ctx, e, opts, method)
                return job  -- (not a tail call: misuse errors keep this line as their position)
            end)
        end
    end
    -- Several devices make their jobs at once: each in a coroutine whose GPU
    -- waits yield (vk.await), resumed in turn, so that their G builds overlap.
    local makers_count = 0
    for _ in pairs(makers) do makers_count = makers_count + 1 end
    if sleep and makers_count > 1 then
        for _, maker in pairs(makers) do vk.yield_in(maker) end
    end
    repeat
        local pending = false
        for d, maker in pairs(makers) do
            local ok, job = coroutine.resume(maker)
            if not ok then error(job, 0) end
            if coroutine.status(maker) == "dead" then
                lanes[d].job, makers[d] = job, nil
            else
                pending = true
            end
        end
        if pending then sleep(POLL_SECONDS) end
    until not pending
    for _, lane in ipairs(lanes) do
        local job = lane.job
        lane.method = job.method or "direct"
        lane.share = { name = lane.ctx.info.name, method = lane.method, sequences = 0, batches = 0, chunks = 0,
                       gpu_seconds = 0, build_seconds = job.build_seconds }
    end
    local jobs_seconds = now_() - t0
    -- Chunks in flight write disjoint slots of the ring: each chunk is at most
    -- ring / in_flight steps.
    local ring = min(opts.ring or DEFAULT_RING, max(1, length) * in_flight)
    ring = max(ring, in_flight)
    local chunk_cap = floor(ring / in_flight)
    local batch_size = plan_batches(lanes, total, ring, opts.batch)
    local on_batch, stop = opts.on_batch, opts.stop
    local result = not on_batch and divgpu.array("u32", total * length) or nil
    local batches = ceil(total / batch_size)
    local stats = { gpu_seconds = 0, chunks = 0, batches = batches, batch_size = batch_size, sequences = 0,
                    workgroup_size = lanes[1].job.workgroup_size, chunk_sizes = {},
                    method = lanes[1].method, method_reason = lanes[1].reason,
                    underflow = lanes[1].job.underflow_note, devices = {},
                    -- Where the wall time went on the CPU's side: making the jobs
                    -- (tables uploaded, G built), making batches, blocked waiting.
                    jobs_seconds = jobs_seconds, batch_setup_seconds = 0, wait_seconds = 0 }
    for d, lane in ipairs(lanes) do
        stats.devices[d] = lane.share
        if lane.method ~= stats.method then stats.method = "mixed" end
        -- G's builds overlap across devices: the longest is the run's.
        if lane.job.build_seconds then stats.build_seconds = max(stats.build_seconds or 0, lane.job.build_seconds) end
        if (lane.method == "gram" or lane.method == "tensor") and not stats.gram then  -- the certified filters
            stats.gram = { steps = 0, window_total = 0, window_ones = 0, fallbacks = 0, window_max = 0, max_ratio = 0,
                           window_histogram = gram.empty_histogram() }
        end
    end

    local function poll_stop()
        if stop and not stats.stopped then stats.stopped = stop() or nil end
        return stats.stopped
    end

    -- Batches are dealt in order to whichever lane is free, and delivered in
    -- order: one that finishes early waits in `finished` for those before it.
    local next_batch, next_delivery, finished = 0, 0, {}
    local sequences_finished = 0  -- in batches finished, delivered or waiting to be
    -- Batches that finished ahead of an earlier one wait in `finished`; a lane
    -- takes no new batch while this many wait (a slow device then holds the
    -- others back instead of their results piling up in memory).
    local MAX_WAITING = 2 * #lanes
    local steps_total, steps_done = batches * (length - 1), 0

    local function start_batch(lane)
        if next_batch >= batches or next_batch - next_delivery >= MAX_WAITING + #lanes or poll_stop() then return end
        local b = next_batch
        next_batch = b + 1
        local first = b * batch_size
        local count = min(batch_size, total - first)
        -- This batch's rows: in the whole result, or an array of its own when streamed.
        local out, row0 = result, first
        if not out then out, row0 = divgpu.array("u32", count * length), 0 end
        local ids = divgpu.array("u32", count)
        for i = 1, count do
            local s = starts[first + i]
            ids[i] = s
            out[(row0 + i - 1) * length + 1] = s  -- step 0 is the start itself
        end
        lane.b, lane.first, lane.count, lane.out, lane.row0 = b, first, count, out, row0
        local t = now_()
        lane.batch = lane.job:batch(ids, ring, in_flight)
        -- gram copies its counters after each chunk only for on_chunk's figures.
        lane.batch.record_chunk_figures = opts.on_chunk ~= nil
        stats.batch_setup_seconds = stats.batch_setup_seconds + (now_() - t)
        lane.controller = ChunkController.new{
            target_seconds = opts.target_seconds or _M.DEFAULT_TARGET_SECONDS,
            max_iterations = chunk_cap,
        }
        lane.next_step, lane.free = 1, 1
    end

    -- Keeps up to in_flight chunks of the lane's batch on its device.
    local function fill(lane)
        local batch = lane.batch
        while lane.next_step < length and lane.tail - lane.head + 1 < in_flight and not stats.stopped do
            local n = lane.controller:next_chunk(length - lane.next_step)
            local rec = batch.recorders[lane.free]
            lane.free = lane.free % in_flight + 1
            batch:record(lane.next_step, n, rec)
            batch:submit(rec)
            lane.tail = lane.tail + 1
            lane.queue[lane.tail] = { rec = rec, first = lane.next_step, n = n, wall = now_() }
            lane.next_step = lane.next_step + n
        end
    end

    -- The lane's batch is over: kept if all its steps ran (a batch stopped
    -- midway is dropped), to be delivered in order.
    local function end_batch(lane)
        local batch = lane.batch
        lane.batch = nil
        if lane.next_step < length then return end
        sequences_finished = sequences_finished + lane.count
        finished[lane.b] = { first = lane.first, count = lane.count, out = lane.out, lane = lane,
                             filter = batch.stats and batch:stats() or nil }
    end

    -- Hands every finished batch now in order to on_batch, and counts it (a
    -- batch held back by a stop is not counted). Called once the lanes have
    -- their next chunks queued: on_batch's work (the CLI copies the batch to
    -- its checkpoint writer) then overlaps the GPUs'.
    local function deliver()
        while finished[next_delivery] do
            local f = finished[next_delivery]
            finished[next_delivery] = nil
            next_delivery = next_delivery + 1
            stats.sequences = stats.sequences + f.count
            f.lane.share.sequences = f.lane.share.sequences + f.count
            f.lane.share.batches = f.lane.share.batches + 1
            if f.filter then
                -- The filter's windows and fallbacks, summed over batches.
                local g, bs = stats.gram, f.filter
                g.steps = g.steps + f.count * (length - 1)
                g.window_total = g.window_total + bs.window_total
                g.window_ones = g.window_ones + bs.window_ones
                g.fallbacks = g.fallbacks + bs.fallbacks
                g.window_max = max(g.window_max, bs.window_max)
                g.max_ratio = max(g.max_ratio, bs.max_ratio)
                for k, c in ipairs(bs.window_histogram) do g.window_histogram[k] = g.window_histogram[k] + c end
            end
            if on_batch then on_batch(f.first, f.count, f.out) end
        end
    end

    -- Takes the lane's oldest chunk (done, or waited for) into the output.
    local function complete(lane, spent)
        local c = lane.queue[lane.head]
        lane.queue[lane.head] = nil
        lane.head = lane.head + 1
        local batch = lane.batch
        local waited = now_()
        local gpu = c.rec:wait(spent)
        stats.wait_seconds = stats.wait_seconds + (now_() - waited)
        local seconds = gpu or (now_() - c.wall)
        lane.controller:observe(c.n, seconds)
        stats.gpu_seconds = stats.gpu_seconds + seconds
        stats.chunks = stats.chunks + 1
        stats.chunk_sizes[#stats.chunk_sizes + 1] = c.n
        lane.share.chunks = lane.share.chunks + 1
        lane.share.gpu_seconds = lane.share.gpu_seconds + seconds
        -- Straight from the mapped winners buffer: only this chunk's words are read.
        divgpu.store_winners(lane.out, batch.winners_buffer or batch:winners(), lane.row0, lane.count, ring, c.first,
                             c.n, length)
        steps_done = steps_done + c.n
        local t = now_()
        if opts.on_chunk then
            opts.on_chunk{ device = lane.device, batch = lane.b + 1, first_step = c.first, steps = c.n,
                           sequences = lane.count, gpu_seconds = seconds, wall_seconds = t - c.wall,
                           elapsed = t - t0, gram = batch.chunk_stats and batch:chunk_stats(c.rec) or nil }
        end
        local b = lane.b
        if lane.next_step >= length and lane.head > lane.tail then end_batch(lane) end
        if opts.on_progress then
            opts.on_progress{ batch = b + 1, batches = batches, step = c.first + c.n, length = length,
                              done = steps_done, total = steps_total, elapsed = t - t0, chunk = c.n,
                              device = lane.device, sequences_total = total, sequences = sequences_finished }
        end
        poll_stop()
    end

    -- The lane whose oldest chunk is done first. One lane: wait on it. Several:
    -- poll their fences so that no device waits on another's; past a context's
    -- fence timeout, wait on that chunk (the bounded wait then reports it).
    local function next_done()
        local oldest
        for _, lane in ipairs(lanes) do
            if lane.head <= lane.tail and (not oldest or lane.queue[lane.head].wall < oldest.queue[oldest.head].wall) then
                oldest = lane
            end
        end
        if #lanes == 1 or not sleep then return oldest end
        local polled = now_()
        while true do
            for _, lane in ipairs(lanes) do
                if lane.head <= lane.tail and lane.queue[lane.head].rec:done() then
                    stats.wait_seconds = stats.wait_seconds + (now_() - polled)
                    return lane
                end
            end
            -- Past the context's timeout since it was submitted: a wait of no
            -- time left reports the timeout (and marks that context dead).
            local spent = now_() - oldest.queue[oldest.head].wall
            if spent > oldest.ctx.timeout then return oldest, spent end
            sleep(POLL_SECONDS)
        end
    end

    while true do
        local busy = false
        for _, lane in ipairs(lanes) do
            if not lane.batch then start_batch(lane) end
            if lane.batch then
                fill(lane)
                -- Nothing in flight: a batch of length 1, or one stopped midway.
                if lane.head > lane.tail then end_batch(lane) else busy = true end
            end
        end
        deliver()
        if not busy then
            if stats.stopped or next_batch >= batches then break end
        else
            complete(next_done())
        end
    end
    deliver()
    stats.wall_seconds = now_() - t0
    -- A stop that came after the last batch stopped nothing.
    if stats.stopped and stats.sequences == total then stats.stopped = nil end
    if stats.stopped then return nil, stats end
    return result, stats
end

return _M
