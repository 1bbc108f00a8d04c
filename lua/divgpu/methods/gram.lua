-- The certified Gram method (docs/contract.md#gram; the proof is
-- shaders/gram.md). G = E Eᵀ is built once on the GPU (f64 sums, stored as
-- f32, in blocks reached by device address); each sequence then reads one G
-- row per step and rescores only the candidates its bound cannot rule out.
-- Here: the step kernel's plan, the job and its batches; G's build is
-- methods/gram_g.lua's, the filter's statistics methods/gram_figures.lua's.
--
--   local gram = require "divgpu.methods.gram"
--   local ok, why = gram.fits(ctx, e, { sequences = #starts })   -- true | nil, and why
--   local job = assert(gram.job(ctx, e, opts))   -- the interface of every method (methods.lua):
--   local batch = assert(job:batch(starts, ring, in_flight))
--   batch:record(first, count, rec); batch:submit(rec); batch:wait(rec)
--   batch:stats()                          -- windows and fallbacks of the batch
--   batch:chunk_stats(rec)                 -- ... of the chunk `rec` ran (after its wait)
--
-- Misuse raises error(msg, 2); what the device or table cannot do returns
-- nil, err.

local divgpu = require "divgpu"
local device = require "divgpu.device"
local device_profile = require "divgpu.device_profile"
local failure = require "divgpu.failure"
local kernel = require "divgpu.kernel"
local batches = require "divgpu.methods.batch"
local figures = require "divgpu.methods.gram_figures"
local gram_g = require "divgpu.methods.gram_g"

local need, catch, fail = failure.need, failure.catch, failure.fail
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local error, setmetatable, string_format, type, tostring, pairs, ipairs =
    error, setmetatable, string.format, type, tostring, pairs, ipairs
local huge = math.huge

local _M = { name = "gram", preference = 1, default_layout = "rows", setup_what = "tables uploaded, G built",
             doc = "the certified Gram filter: G = E Eᵀ built once, each step rescores only its window "
                .. "(docs/contract.md#gram)" }

-- The run's options (driver.run) its job takes: { run option = job option }.
_M.options = { layout = "layout", workgroup_size = "workgroup_size", window_capacity = "window_capacity",
               gram_defines = "defines", spirv = "spirv", memory_budget = "memory_budget",
               exact_underflow = "exact_underflow" }

-- Bench-only switches (driver.run's opts.tuning): where approx lives
-- (registers, the shared page), G's build tiling and blocks, a variant of
-- gram_build.comp.
_M.tuning = { reg_slots = "reg_slots", shared_slots = "shared_slots", build_tiling = "build_tiling",
              g_block_rows = "g_block_rows", gram_build_defines = "build_defines" }

local GRAM = kernel.descriptor("gram")
local GRAM_BUILD = kernel.descriptor("gram_build")

-- The per-sequence state (shaders/include/gram_state.glsl, through the
-- registry): words per sequence, and 1-based offsets into a sequence's words.
local S = GRAM.state
local U32_WORDS, F64_WORDS = S.STATE_U32, S.STATE_F64
local PREVIOUS = S.S_PREVIOUS + 1
local T_RATIO = S.T_RATIO + 1

-- The largest batch by default. Larger batches cost less per sequence: all
-- 8,359 starts of the seed table on an H200 took 7.86 s of GPU time in 2
-- batches of 4,180 against 8.24 s in 3 of 2,787 (the former cap of 4,096),
-- in one call (bench/RESULTS.md). 8,192 also gives two devices one such
-- batch each.
local MAX_BATCH = 8192

local function mib(bytes) return string_format("%.1f MiB", bytes / 1048576) end

--- Bytes of device memory a gram job needs: G', the table (twice while G'
--- is built from rows and the scan reads columns), norms; and per sequence.
function _M.memory_need(n, dim)
    local fixed = n * n * 4 + 2 * n * dim * 4 + n * 12
    local per_sequence = n * 8 + dim * 8 + U32_WORDS * 4 + F64_WORDS * 8
    return fixed, per_sequence
end

--- Bytes of device memory G and a batch's state need (the cost model's figure).
function _M.memory(job)
    return require("divgpu.cost").gram_bytes(job, min(job.sequences, 64))
end

--- Its seconds by the cost model, where the device can run it and G and a
--- batch's state fit 90% of the memory the job may use.
function _M.estimate(job, device)
    if not device.fits.gram then return nil, device.why_not.gram or "the device cannot run the Gram method" end
    if _M.memory(job) > 0.9 * device.memory then
        return nil, string_format("G (%d x %d f32) and the state need %.1f MiB, more than 90%% of %.1f MiB",
            job.n, job.n, _M.memory(job) / 1048576, device.memory / 1048576)
    end
    return { { seconds = require("divgpu.cost").gram_seconds(job, device.rates) } }
end

--- Whether gram runs `request` ({shape, precision, plain}): only the plain
--- fp32 job (the direct method's reference shape), with its own kernel.
function _M.serves(request)
    if request.plain then return true end
    return nil, "shapes and precisions other than baseline fp32 run only with the direct method"
end

--- gram.fits(ctx, e, opts) -> true, why; or nil, why the method cannot run
--- here. opts:
---   sequences      how many sequences the run has (the state of at least one
---                  batch must fit beside G)
---   memory_budget  bytes the job may use (default: the device's largest
---                  device-local heap); the 10% kept free is for the driver
function _M.fits(ctx, e, opts)
    opts = opts or {}
    local info = ctx.info
    if not info.buffer_device_address then
        return nil, string_format("device '%s' lacks bufferDeviceAddress, which gram needs for G", info.name)
    end
    if not info.int64 then
        return nil, string_format("device '%s' lacks shaderInt64, which gram needs for G's addresses", info.name)
    end
    local ok, why = device.table_fits(ctx, e, 4)
    if not ok then return nil, why end
    -- Memory first: the certificate reads the whole table (a second at a million rows).
    local budget = opts.memory_budget or info.device_local_bytes
    local fixed, per_sequence = _M.memory_need(e.n, e.dim)
    local sequences = min(opts.sequences or 1, 64)
    local need_bytes = fixed + per_sequence * sequences
    if need_bytes > 0.9 * budget then
        return nil, string_format("G (%d x %d f32) and the state of %d sequences need %s, more than 90%% of "
            .. "the %s of device memory%s", e.n, e.n, sequences, mib(need_bytes), mib(budget),
            opts.memory_budget and " given as the budget" or (" of '" .. info.name .. "'"))
    end
    ok, why = e:gram_admissible()
    if not ok then return nil, why end
    return true, string_format("G (%d x %d f32, %s) and the state fit the %s of device memory", e.n, e.n,
        mib(e.n * e.n * 4), mib(budget))
end


--- Where a job keeps each sequence's approx, for N items, `wg` threads and a
--- device (gram.comp): registers first (at most `reg_max` a thread), shared
--- memory for what they cannot hold (at most `shared_max` candidates), global
--- memory for the rest. Returns reg_slots, shared_count, global_count.
function _M.placement(n, wg, reg_max, shared_max)
    local reg = max(1, min(ceil(n / wg), reg_max))
    local shared = max(0, min(n - reg * wg, shared_max))
    return reg, shared, max(0, n - reg * wg - shared)
end

-- gram.comp's register page costs three registers a slot (the f64 and its
-- G' load issued ahead), the rest of the kernel about 64, and holds 40 slots
-- at most: at 512 threads on a file of 65,536 that is 21 (with 40 the page
-- did not fit 128 registers, and on the H200, driver 580, the spilled
-- kernel chose other items than the contract: 2,676 of 4,096 sequences
-- identical at 65,536 items, 0 of 16 at 20,000; 40 slots at 256 threads and
-- 17 at 512 were identical: bench/RESULTS.md). A CPU device (no register
-- budget) compiles the unrolled page into vector code, where a small page
-- keeps that fast.
_M.REGISTER_PAGE = { kernel_other = 64, per_slot = 3, slots_max = 40, cpu_slots = 8 }

--- The register page's slots a thread may hold at most with `wg` threads,
--- on a device of register budget `registers` (the device profile's: {
--- file, per_thread_max }; nil on a CPU device).
function _M.reg_max(registers, wg)
    local page = _M.REGISTER_PAGE
    if not registers then return page.cpu_slots end
    local budget = min(registers.per_thread_max, floor(registers.file / wg))
    return max(1, min(page.slots_max, floor((budget - page.kernel_other) / page.per_slot)))
end

-- Threads per sequence on a GPU: 256. 512 ran the seed batch faster on the
-- H200 (2.38 s of GPU time against 2.84 s at 256, 2026-12-01), but on
-- 2026-12-02 it stopped making progress there (no error, the GPU busy until
-- killed) on a synthetic table of 1,000 x 384 items (gram_parity.lua's table)
-- and on others of 600 to 2,103 items made like it, as did 384 threads,
-- while 256 and 448 ended, identical to the mirror
-- (bench/gram_stall_probe.lua; bench/RESULTS.md). The cause is not found;
-- 256 ran that table there, and every parity check on 2026-11-30, when it
-- was the default.
local GPU_WORKGROUP = 256

-- Window members whose rows are staged for their chains, at most: the seed
-- table's windows hold 2.1 on average and 15 at most (bench/RESULTS.md).
local STAGE_ROWS_MAX = 8

--- Shared memory of the step kernel beside its shared page, in bytes.
local function fixed_shared_bytes(dim, capacity, subgroup_slots, check)
    return dim * 4 + 2 * subgroup_slots * (8 + 4 + 8 + 16) + capacity * 4 + 8 + subgroup_slots * 8
        + (check and subgroup_slots * 8 or 0) + capacity * 8  -- (a twin's window_a, counted always)
end

--- Loop iterations one thread may run in one step, at worst (a fallback
--- scan, and in the instrumented build a rescoring of every candidate).
local function step_iterations(self, check)
    local n, dim, wg = self.n, self.dim, self.workgroup_size
    local per_thread = ceil(n / wg)
    local subgroups = self.subgroup_slots
    local worst = 2 * per_thread + self.dim_slots + 2 * subgroups + ceil(self.stage_rows * dim / wg)
        + max(per_thread, ceil(self.window_capacity / wg)) * (dim + 1) + 64
    if check then worst = worst + per_thread * (dim + 1) + subgroups end
    return worst
end

local Job = {}
Job.__index = Job

--- A workgroup size a kernel that combines per-subgroup partials over
--- gl_NumSubgroups (gram, tensor) can run, on this device: within its limits,
--- and whole subgroups (or one at most). Where the last subgroup is partial,
--- lavapipe (Mesa 22.3, subgroup size 8) reports gl_NumSubgroups =
--- floor(threads / 8) (12 for 100 threads, whose subgroup ids run to 12), so
--- that subgroup's candidates were never combined: wrong winners, an item out
--- of range or a segmentation fault. Fails with one line.
function _M.check_workgroup(info, wg, kernel_name)
    local most = min(info.max_workgroup_size, info.max_workgroup_invocations)
    if wg > most then
        fail(string_format("workgroup size %.0f: device '%s' runs at most %d threads a workgroup", wg, info.name, most))
    end
    local sub = info.subgroup_size
    if sub > 0 and wg > sub and wg % sub ~= 0 then
        fail(string_format("workgroup size %d: the %s kernel combines whole subgroups: it takes a multiple of "
            .. "device '%s''s subgroup size %d, or at most %d", wg, kernel_name, info.name, sub, sub))
    end
end

--- The step kernel's shape on this device: threads, window capacity, the
--- staged rows and where approx lives; fails where shared memory is short.
local function plan(ctx, e, opts)
    local info = need(device_profile.profile(ctx))
    local dim, kind = e.dim, info.type == "cpu" and "cpu" or "gpu"
    local wg = opts.workgroup_size or (kind == "gpu" and min(GPU_WORKGROUP, info.max_workgroup_invocations,
                                                              info.max_workgroup_size) or device.default_workgroup(info))
    _M.check_workgroup(info, wg, "gram")
    local capacity = opts.window_capacity or wg
    local check = opts.defines and opts.defines.DIVGPU_GRAM_CHECK
    local subgroup_slots = ceil(wg / max(1, info.subgroup_size))
    local function short_of(bytes)
        if bytes > info.max_shared_memory then
            fail(string_format("dimension %d needs %d bytes of shared memory with %d threads; device '%s' has %d",
                dim, bytes, wg, info.name, info.max_shared_memory))
        end
    end
    local fixed = fixed_shared_bytes(dim, capacity, subgroup_slots, check)
    short_of(fixed)
    -- Window members' rows staged in shared memory for their chains: up to
    -- STAGE_ROWS_MAX, before the shared page takes what is left.
    local stage_rows = max(1, min(opts.stage_rows or STAGE_ROWS_MAX, capacity,
                                  floor((info.max_shared_memory - fixed) / (4 * dim))))
    fixed = fixed + stage_rows * dim * 4
    short_of(fixed)
    local shared_room = floor((info.max_shared_memory - fixed) / 8)
    local reg, shared, global = _M.placement(e.n, wg, opts.reg_slots or _M.reg_max(info.registers, wg),
                                             min(opts.shared_slots or huge, shared_room))
    return { workgroup_size = wg, window_capacity = capacity, reg_slots = reg, shared_count = shared,
             global_count = global, subgroup_slots = subgroup_slots, dim_slots = ceil(dim / wg),
             stage_rows = stage_rows, check = check }
end

local function make_job(ctx, e, opts)
    local info = ctx.info
    local ok, why = _M.fits(ctx, e, { memory_budget = huge })
    if not ok then fail("the Gram method cannot run here: " .. why) end
    local self = setmetatable(plan(ctx, e, opts), Job)
    self.ctx, self.embeddings, self.n, self.dim, self.layout, self.method = ctx, e, e.n, e.dim, opts.layout, "gram"
    self.memory_budget = opts.memory_budget or info.device_local_bytes
    self.steps_per_dispatch = huge
    local cap = need(device_profile.profile(ctx)).loop_cap
    if cap then
        -- The device stops loops silently past `cap` iterations: keep every
        -- dispatch's steps under it (lavapipe: 65,535).
        local per_step = step_iterations(self, self.check)
        self.steps_per_dispatch = floor(cap / per_step)
        if self.steps_per_dispatch < 1 then
            fail(string_format("device '%s' stops shader loops after %d iterations, and one gram step needs up to %d "
                .. "per thread (%d items x %d dims, %d threads): use more threads or another device",
                info.name, cap, per_step, e.n, e.dim, self.workgroup_size))
        end
    end
    -- The set-up's parts, for the run's summary (`gram: set-up ...`). The
    -- table's certificate first: the kernels' defines depend on it.
    local now = divgpu.clock.now
    local t_setup = now()
    self.underflow, self.underflow_note = device.underflow_defines(ctx, e, opts.exact_underflow)
    self.underflow = self.underflow or nil
    local t_certified = now()
    -- What waits on the driver starts first, each on a thread of its own:
    -- G's allocation and the two pipelines' compiles.
    -- (The builder first: its tiling's checks may refuse the job before any
    -- of G is allocated.)
    local builder_pending = gram_g.begin_builder(self, ctx, e, opts)
    local g_pending = gram_g.begin_g(self, ctx, opts)
    local step_pending = need(kernel.begin(ctx, GRAM, {
        variant = kernel.variant(GRAM, { layout = opts.layout }),
        defines = gram_g.merged(opts.defines, self.underflow), spirv = opts.spirv,
        constants = { workgroup_size = self.workgroup_size, max_dim = e.dim, window_capacity = self.window_capacity,
                      reg_slots = self.reg_slots, shared_slots = max(1, self.shared_count), dim_slots = self.dim_slots,
                      subgroup_slots = self.subgroup_slots, stage_rows = self.stage_rows },
    }))
    local t_begun = now()
    local list = { { "rows_table", e, "embeddings", "rows" },
                   { "inv_norm_buffer", need(e:inv_norms()), "inv_norm" },
                   { "row_norm_buffer", need(e:norm_bounds()), "row norm bounds" },
                   { "factors_buffer", need(divgpu.jobs.gram_factors(e)), "gram bound factors" } }
    if opts.layout == "columns" then
        list[#list + 1] = { "table_buffer", e, "embeddings by columns", "columns" }
    end
    local t_prepared = now()
    local uploaded = need(device.upload_all(ctx, list, {}))
    local t_uploaded = now()
    local rows_table = uploaded.rows_table
    self.inv_norm_buffer, self.row_norm_buffer, self.factors_buffer = uploaded.inv_norm_buffer,
        uploaded.row_norm_buffer, uploaded.factors_buffer
    self.table_buffer = uploaded.table_buffer or rows_table
    local builder = need(builder_pending:wait())
    local t0 = now()
    self.build_gpu_seconds = gram_g.build_g(self, ctx, e, rows_table, builder, g_pending)
    self.build_seconds = now() - t0
    local t_built = now()
    local _, g_seconds = need(g_pending:wait())
    self.kernel = need(step_pending:wait())
    local t_done = now()
    self.setup_note = string_format("set-up %.2f s: certificate %.2f, kernels and G begun %.2f, tables prepared %.2f, "
        .. "uploaded %.2f, waited %.2f for G's kernel (%.2f), G built %.2f as its blocks came (allocated in %.2f; "
        .. "the build %.3f s GPU, %.3g TFLOP/s), waited %.2f for the step kernel (%.2f)", t_done - t_setup,
        t_certified - t_setup, t_begun - t_certified, t_prepared - t_begun, t_uploaded - t_prepared, t0 - t_uploaded,
        builder_pending.seconds or 0, t_built - t0, g_seconds, self.build_gpu_seconds,
        self.build_gpu_seconds > 0 and self.build_flops / self.build_gpu_seconds / 1e12 or 0,
        t_done - t_built, step_pending.seconds or 0)
    return self
end

--- gram.job(ctx, e, opts) -> job, or nil, err. opts:
---   layout           "rows" (default) | "columns": the table the exact chain reads. One
---                    thread reads one candidate's row, so rows measured 1.48x faster
---                    on the H200 (bench/RESULTS.md)
---   workgroup_size   threads per sequence
---   window_capacity  largest window rescored without the fallback (default: the workgroup size)
---   reg_slots        approx values a thread keeps in registers, at most (default: the device's)
---   shared_slots     candidates the shared page may hold, at most (default: what fits)
---   g_block_rows     G' rows per block (default: as many as one allocation holds)
---   build_tiling     G's build tiling { wx, wy, tm, tn, slice } (default: the device's)
---   defines, spirv   a variant of gram.comp (instrumented build, twins, the floor)
---   build_defines    a variant of gram_build.comp (its twin)
---   exact_underflow  false: no exact underflow path (tests; device.underflow_defines)
---   memory_budget    bytes the job may use (default: the device's); bounds the batch
function _M.job(ctx, e, opts)
    opts = opts or {}
    if type(e) ~= "userdata" then error("gram.job: embeddings must be a table loaded with divgpu.load_embeddings", 2) end
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.layout = o.layout or "rows"
    kernel.variant(GRAM, { layout = o.layout }, 2)
    if o.build_tiling then GRAM_BUILD.tiling(o.build_tiling) end
    return catch(make_job, ctx, e, o)
end

--- One line on where each sequence's state lives (the run prints it).
function Job:placement_note()
    local parts = { string_format("%d in registers (%d a thread x %d threads)", min(self.n, self.reg_slots * self.workgroup_size),
                                  self.reg_slots, self.workgroup_size) }
    if self.shared_count > 0 then parts[#parts + 1] = string_format("%d in shared memory", self.shared_count) end
    if self.global_count > 0 then parts[#parts + 1] = string_format("%d in global memory", self.global_count) end
    return "gram state per sequence: " .. table.concat(parts, ", ")
end

--- Bytes each sequence of a batch needs in its largest buffer.
function Job:bytes_per_sequence(ring)
    return max(self.n * 8, self.dim * 8, ring * 4, U32_WORDS * 4)
end

--- The largest batch whose buffers fit the device's buffer range and whose
--- state fits the memory left beside G, capped at `cap` (default
--- MAX_BATCH).
function Job:max_batch(ring, cap)
    local info = self.ctx.info
    local fixed, per_sequence = _M.memory_need(self.n, self.dim)
    local by_memory = floor((0.9 * self.memory_budget - fixed) / (per_sequence + ring * 4))
    return max(1, min(cap or MAX_BATCH, floor(info.max_storage_buffer_range / self:bytes_per_sequence(ring)),
        info.max_workgroup_count, by_memory))
end

local Batch = batches.class()

local function zeroed(ctx, bytes, name)
    local buffer = need(ctx:buffer(bytes, name))
    need(buffer:fill(0))  -- all-zero words are f64 +0.0
    return buffer
end

local function make_batch(self, starts, ring, in_flight)
    local count, n, ctx = #starts, self.n, self.ctx
    local b = setmetatable({ job = self, count = count, ring = ring }, Batch)
    local state_u32 = need(divgpu.array("u32", count * U32_WORDS))
    for i = 1, count do state_u32[(i - 1) * U32_WORDS + PREVIOUS] = starts[i] end
    b.approx = zeroed(ctx, count * n * 8, "approx")
    b.centroids = zeroed(ctx, count * self.dim * 8, "centroids")
    b.state_f64 = zeroed(ctx, count * F64_WORDS * 8, "gram state f64")
    b.state_u32 = need(ctx:upload(state_u32, "gram state u32"))
    b.winners_buffer = need(ctx:buffer(count * ring * 4, "winners", "host"))
    b.group = need(self.kernel:bind({
        embeddings = self.table_buffer, inv_norm = self.inv_norm_buffer, row_norms = self.row_norm_buffer,
        job_factors = self.factors_buffer, g_blocks = self.g_block_table, centroids = b.centroids,
        approx = b.approx, winners = b.winners_buffer, state_f64 = b.state_f64, state_u32 = b.state_u32,
    }, self.g_blocks))
    need(b:add_recorders(in_flight))
    return b
end

--- job:batch(starts, ring, in_flight) -> batch of #starts sequences, step 0
--- done: each start is the item appended last, to be applied by step 1; or nil, err.
Job.batch = batches.maker(make_batch)

--- Records steps first .. first+count-1 on `rec`, then a copy of the
--- filter's counters into this recorder's snapshot (read by chunk_stats
--- after the wait: reading state_u32 itself would race with the chunk
--- queued behind it); called by batch:record.
function Batch:record_steps(first, count, rec)
    local job = self.job
    local per = min(job.steps_per_dispatch, count)
    for t = first, first + count - 1, per do
        need(job.kernel:dispatch(rec, self.group, { num_items = job.n, dim = job.dim, first_step = t,
            steps = min(per, first + count - t), ring = self.ring, block_rows = job.block_rows,
            shared_count = job.shared_count }, self.count))
        -- Orders this dispatch's state writes before the next dispatch reads them.
        need(rec:barrier())
    end
    -- The driver turns the copy off when no one reads the figures (no on_chunk).
    if self.record_chunk_figures == false then return true end
    self.snapshots = self.snapshots or {}
    local snap = self.snapshots[rec]
    if not snap then
        snap = { buffer = need(job.ctx:buffer(self.count * U32_WORDS * 4, "gram counters snapshot", "host")) }
        self.snapshots[rec] = snap
    end
    need(rec:copy(self.state_u32, snap.buffer))
    snap.first, snap.count = first, count
    return true
end

--- The batch's filter statistics so far (call after waiting): steps, the sum
--- of window sizes, windows of one, fallbacks, the largest window, the
--- window-size histogram (counts in the bins of histogram_labels), and the
--- instrumented build's max |exact - a| / B; or nil, err.
function Batch:stats()
    return catch(function()
        local s = figures.of_state(need(self.state_u32:read("u32")), self.count)
        local f = need(self.state_f64:read("f64"))
        s.max_ratio = 0
        for i = 0, self.count - 1 do s.max_ratio = max(s.max_ratio, f[i * F64_WORDS + T_RATIO]) end
        return s
    end)
end

--- The filter's figures for the chunk last recorded on `rec`, after its wait,
--- exactly (the difference of two counter snapshots): sequence_steps, window_total,
--- window_mean, window_ones, fallbacks, window_histogram (the chunk's counts in
--- the bins of histogram_labels), window_max_bin (the label of the largest bin
--- the chunk used: its largest window lies in it) and window_max_batch (the
--- batch's largest window up to the chunk's end; the kernel keeps a running
--- maximum, so a chunk's own maximum is known to its bin). Every chunk must
--- be read, in order (misuse raises).
function Batch:chunk_stats(rec)
    rec = rec or self.recorder
    local snap = self.snapshots and self.snapshots[rec]
    if not snap or not snap.first then error("gram batch:chunk_stats: nothing was recorded on this recorder", 2) end
    local before = self.counted or { next_step = 1, window_total = 0, window_ones = 0, fallbacks = 0,
                                     window_histogram = figures.empty_histogram() }
    if snap.first ~= before.next_step then
        error(string_format("gram batch:chunk_stats: chunks must be read in order: this chunk starts at step %d, "
            .. "the last one read ended before step %d", snap.first, before.next_step), 2)
    end
    local words, err = snap.buffer:read("u32")
    if not words then return nil, err end
    local now = figures.of_state(words, self.count)
    now.next_step = snap.first + snap.count
    self.counted = now
    return figures.chunk_difference(now, before, snap.count * self.count)
end

-- The filter's statistics (methods/gram_figures.lua; the tensor filter
-- shares them): kept here as gram's, where the registry and the stats ask.
for _, k in ipairs{ "histogram_labels", "empty_histogram", "summary_of", "chunk_fields", "chunk_record", "chart",
                    "totals", "add_totals" } do
    _M[k] = figures[k]
end
_M.summary = figures.summary_of("gram")

return _M
