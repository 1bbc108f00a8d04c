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

--- driver.run(opts) -> result, stats. opts:
---   ctx, embeddings, starts (u32 array), length        required
---   method         "auto" (default) | "direct" | "gram" (SPEC section 8). auto
---                  picks gram where G and the state fit the device's memory
---                  (memory_budget: bytes, to plan for less), else direct;
---                  stats.method and stats.method_reason say which and why
---   shape, precision, tile_size, layout, workgroup_size, spirv  passed to vk_compute.job
---   window_capacity, g_block_rows, gram_defines (and layout, workgroup_size,
---                  spirv)  passed to gram.job
---   job            a job made earlier with vk_compute.job or gram.job (instead of the above)
---   batch          sequences per batch (default: from the device's limits)
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
---                  order: rows [first, first + count) of starts (0-based) as a u32
---                  array [count][length]. Only one batch is then held in memory
---                  and run returns nil for the result (a full ordering of 100,000
---                  items would be 40 GB).
---   stop           function() polled between chunks (and before each batch); once
---                  it returns a true value, no more chunks are submitted, those in
---                  flight are waited for, a batch they finish is still delivered,
---                  and run returns nil, stats with stats.stopped = that value
---                  (stats.sequences: how many were finished)
---   exact_underflow  false turns off the exact underflow path
---                  (vk.underflow_defines): tests only, the output may differ
function _M.run(opts)
    local e, starts, length = opts.embeddings, opts.starts, opts.length
    if type(opts.ctx) ~= "userdata" then error("driver.run: ctx is required", 2) end
    if type(starts) ~= "userdata" then error("driver.run: starts must be a u32 array", 2) end
    local in_flight = opts.in_flight or 2
    if type(in_flight) ~= "number" or in_flight < 1 or in_flight % 1 ~= 0 then
        error("driver.run: in_flight must be a positive integer", 2)
    end
    divgpu.check_job(e, starts, length)
    local now_ = _M.now
    local t0 = now_()
    local method, method_reason = _M.choose_method(opts.ctx, e, opts, #starts)
    local job = opts.job
    if not job and method == "gram" then
        job = gram.job(opts.ctx, e, {
            layout = opts.layout, workgroup_size = opts.workgroup_size, window_capacity = opts.window_capacity,
            g_block_rows = opts.g_block_rows, defines = opts.gram_defines, spirv = opts.spirv,
            memory_budget = opts.memory_budget, exact_underflow = opts.exact_underflow })
    elseif not job then
        job = vk.job(opts.ctx, e, {
            shape = opts.shape, precision = opts.precision, tile_size = opts.tile_size, layout = opts.layout,
            spirv = opts.spirv, name = opts.shader_name, workgroup_size = opts.workgroup_size,
            exact_underflow = opts.exact_underflow })
    end
    -- Chunks in flight write disjoint slots of the ring: each chunk is at most
    -- ring / in_flight steps.
    local ring = min(opts.ring or DEFAULT_RING, max(1, length) * in_flight)
    ring = max(ring, in_flight)
    local chunk_cap = floor(ring / in_flight)
    local total = #starts
    local batch_size = opts.batch or job:max_batch(ring)
    if batch_size < 1 then error("driver.run: batch must be >= 1", 2) end
    batch_size = min(batch_size, total)
    if not opts.batch then
        -- Equal batches: a last batch of a few sequences would cost as many
        -- dependent steps as a full one.
        batch_size = ceil(total / ceil(total / batch_size))
    end
    local on_batch, stop = opts.on_batch, opts.stop
    local result = not on_batch and divgpu.array("u32", total * length) or nil
    local batches = ceil(total / batch_size)
    local stats = { gpu_seconds = 0, chunks = 0, batches = batches, batch_size = batch_size, sequences = 0,
                    workgroup_size = job.workgroup_size, chunk_sizes = {},
                    method = job.method or "direct", method_reason = method_reason,
                    underflow = job.underflow_note }
    if stats.method == "gram" then
        stats.build_seconds = job.build_seconds
        stats.gram = { steps = 0, window_total = 0, window_ones = 0, fallbacks = 0, window_max = 0, max_ratio = 0,
                       window_histogram = gram.empty_histogram() }
    end
    local steps_total, steps_done = batches * (length - 1), 0
    for b = 0, batches - 1 do
        if stop and not stats.stopped then stats.stopped = stop() or nil end
        if stats.stopped then break end
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
        local batch = job:batch(ids, ring, in_flight)
        local controller = ChunkController.new{
            target_seconds = opts.target_seconds or _M.DEFAULT_TARGET_SECONDS,
            max_iterations = chunk_cap,
        }
        -- A queue of submitted chunks, oldest first.
        local queue, head, tail = {}, 1, 0
        local next_step, free = 1, 1
        while next_step < length or head <= tail do
            -- Keep up to in_flight chunks on the GPU.
            while next_step < length and tail - head + 1 < in_flight and not stats.stopped do
                local n = controller:next_chunk(length - next_step)
                local rec = batch.recorders[free]
                free = free % in_flight + 1
                batch:record(next_step, n, rec)
                batch:submit(rec)
                tail = tail + 1
                queue[tail] = { rec = rec, first = next_step, n = n, wall = now_() }
                next_step = next_step + n
            end
            if head > tail then break end  -- stopped, nothing in flight
            local c = queue[head]
            queue[head] = nil
            head = head + 1
            local gpu = batch:wait(c.rec)
            local seconds = gpu or (now_() - c.wall)
            controller:observe(c.n, seconds)
            stats.gpu_seconds = stats.gpu_seconds + seconds
            stats.chunks = stats.chunks + 1
            stats.chunk_sizes[#stats.chunk_sizes + 1] = c.n
            divgpu.store_winners(out, batch:winners(), row0, count, ring, c.first, c.n, length)
            steps_done = steps_done + c.n
            if opts.on_chunk then
                local t = now_()
                opts.on_chunk{ device = 1, batch = b + 1, first_step = c.first, steps = c.n, sequences = count,
                               gpu_seconds = seconds, wall_seconds = t - c.wall, elapsed = t - t0,
                               gram = batch.chunk_stats and batch:chunk_stats(c.rec) or nil }
            end
            if opts.on_progress then
                opts.on_progress{ batch = b + 1, batches = batches, step = c.first + c.n, length = length,
                                  done = steps_done, total = steps_total, elapsed = now_() - t0,
                                  chunk = c.n, sequences_total = total,
                                  sequences = stats.sequences + (c.first + c.n >= length and count or 0) }
            end
            if stop and not stats.stopped then stats.stopped = stop() or nil end
        end
        if next_step < length then break end  -- stopped mid-batch: the batch is dropped
        if batch.stats then
            -- The filter's windows and fallbacks, summed over batches.
            local g, bs = stats.gram, batch:stats()
            g.steps = g.steps + count * (length - 1)
            g.window_total = g.window_total + bs.window_total
            g.window_ones = g.window_ones + bs.window_ones
            g.fallbacks = g.fallbacks + bs.fallbacks
            g.window_max = max(g.window_max, bs.window_max)
            g.max_ratio = max(g.max_ratio, bs.max_ratio)
            for k, c in ipairs(bs.window_histogram) do g.window_histogram[k] = g.window_histogram[k] + c end
        end
        stats.sequences = stats.sequences + count
        if on_batch then on_batch(first, count, out) end
    end
    stats.wall_seconds = now_() - t0
    if stats.stopped then return nil, stats end
    return result, stats
end

return _M
