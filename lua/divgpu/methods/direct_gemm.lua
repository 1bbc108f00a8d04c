-- The direct method's GEMM shape (shaders/gemm.comp; docs/contract.md#direct-in-the-gemm-shape).
-- Every step: the scores of every (sequence, candidate) pair of a batch by
-- tiles, the table's tile in shared memory serving a block of centroids (one
-- chain a pair, d ascending: the contract's arithmetic in another loop
-- order), then a dispatch a sequence that takes the best of its tiles and
-- appends it. The direct method makes this job for `shape = "gemm"`.
--
--   local job = assert(require("divgpu.methods.direct").job(ctx, e, { shape = "gemm" }))
--   local batch = assert(job:batch(starts, ring, in_flight))
--   batch:record(first, count, rec); batch:submit(rec); batch:wait(rec)
--
-- Misuse raises error(msg, 2); what the device cannot do returns nil, err.

local divgpu = require "divgpu"
local device = require "divgpu.device"
local device_profile = require "divgpu.device_profile"
local failure = require "divgpu.failure"
local kernel = require "divgpu.kernel"
local batches = require "divgpu.methods.batch"

local need, catch, fail = failure.need, failure.catch, failure.fail
local ceil, floor, max, min = math.ceil, math.floor, math.max, math.min
local error, pairs, setmetatable, string_format, tostring, type = error, pairs, setmetatable, string.format, tostring, type

local _M = {}

local GEMM = kernel.descriptor("gemm")
local PHASE = GEMM.phases

-- Tilings by device kind: a GPU 128 x 128 pairs a workgroup of 16 x 16
-- threads, 8 x 8 pairs a thread (gemm.comp's own, the shipped variants); a
-- CPU device, whose threads are loop iterations, 16 x 16 pairs of 8 x 8
-- threads (compiled when first used).
_M.TILINGS = {
    gpu = { wx = 16, wy = 16, rows = 8, columns = 8, slice = 8 },
    cpu = { wx = 8, wy = 8, rows = 2, columns = 2, slice = 8 },
}
local SHIPPED = _M.TILINGS.gpu
local MICROTILE = { [1] = true, [2] = true, [4] = true, [8] = true }

--- The sequences one tile computes at once on this device (its default tiling).
function _M.tile_rows(info)
    local t = _M.TILINGS[info.type == "cpu" and "cpu" or "gpu"]
    return t.wy * t.rows
end

local function same_tiling(a, b)
    return a.wx == b.wx and a.wy == b.wy and a.rows == b.rows and a.columns == b.columns and a.slice == b.slice
end

--- The defines of a tiling, none for the shipped one (raises on one the shader cannot take).
local function tiling_defines(t)
    if not (MICROTILE[t.rows] and MICROTILE[t.columns]) then
        error(string_format("gemm: a thread's pairs must be 1, 2, 4 or 8 a side, not %s x %s",
            tostring(t.rows), tostring(t.columns)), 4)  -- at direct.job's caller
    end
    if same_tiling(t, SHIPPED) then return {} end
    return { GEMM_WX = t.wx, GEMM_WY = t.wy, TILE_ROWS = t.rows, TILE_COLUMNS = t.columns, GEMM_SLICE = t.slice }
end

local function check_fit(info, tiling)
    local threads = tiling.wx * tiling.wy
    if threads > info.max_workgroup_invocations then
        fail(string_format("gemm: %d threads a workgroup; device '%s' allows %d", threads, info.name,
            info.max_workgroup_invocations))
    end
    local tile_rows = tiling.wy * tiling.rows
    -- gemm.comp's two stages of slices, a row's key and tie, the append's subgroup bests.
    local shared = 2 * 4 * tiling.slice * (tile_rows + tiling.wx * tiling.columns) + 8 * tile_rows + 8 * threads
    if shared > info.max_shared_memory then
        fail(string_format("gemm: the tiling needs %d bytes of shared memory; device '%s' has %d", shared,
            info.name, info.max_shared_memory))
    end
end

local Job = {}
Job.__index = Job

--- Candidates a block of a table past one storage buffer: as many as one
--- allocation holds, whole tiles of candidates, so no tile straddles two.
local function block_items(info, e, tiling)
    local tile = tiling.wx * tiling.columns
    return max(tile, floor(info.max_memory_allocation_size / (e.dim * 4) / tile) * tile)
end

--- The table in blocks of self.block_items candidates, each its own buffer in
--- `layout`, and the table of their addresses the shader reads (the binding
--- "embeddings"); the blocks stay alive with every bind group (self.table_blocks).
local function upload_blocks(self, ctx, e, layout)
    local size, count = self.block_items, ceil(e.n / self.block_items)
    local list = {}
    for b = 1, count do
        local first = (b - 1) * size
        local items = min(size, e.n - first)
        local rows = need(e:rows(first, items))
        list[b] = { b, layout == "columns" and need(rows:transposed(items, e.dim)) or rows, "table block " .. b }
    end
    self.table_blocks = need(device.upload_all(ctx, list, {}))
    local addresses = need(divgpu.array("u32", 2 * count))
    for b = 1, count do
        local address = self.table_blocks[b].address
        addresses[2 * b - 1], addresses[2 * b] = address[1], address[2]
    end
    self.table_buffer = need(ctx:upload(addresses, "table block addresses"))
end

local function make_job(ctx, e, opts, defines)
    local now = divgpu.clock.now
    local t0 = now()
    local info = need(device_profile.profile(ctx))
    local tiling = opts.tiling or _M.TILINGS[info.type == "cpu" and "cpu" or "gpu"]
    check_fit(info, tiling)
    local n, dim = e.n, e.dim
    -- direct.job fills the layout; a caller of this module directly gets gemm.axes.json's first.
    local layout = opts.layout or kernel.axis_values(GEMM, "layout")[1]
    local self = setmetatable({ ctx = ctx, embeddings = e, n = n, dim = dim, layout = layout, tiling = tiling,
                                method = "direct", shape = "gemm", precision = "fp32",
                                workgroup_size = tiling.wx * tiling.wy, tile_rows = tiling.wy * tiling.rows,
                                tiles = ceil(n / (tiling.wx * tiling.columns)) }, Job)
    self.block_items = opts.table_block_items or (not device.table_fits(ctx, e, 4) and block_items(info, e, tiling))
    if self.block_items and not device_profile.reaches_blocks(info) then
        need(device.table_fits(ctx, e, 4))  -- a table past one buffer: that is the message
        fail(string_format("gemm: a table in blocks needs buffer device addresses and 64-bit integers, which "
            .. "device '%s' lacks", info.name))
    end
    if self.block_items then
        upload_blocks(self, ctx, e, layout)
        defines.DIVGPU_TABLE_BLOCKS = 1
    else
        need(device.upload_all(ctx, {
            { "table_buffer", e, "embeddings", layout } }, self))
    end
    need(device.upload_all(ctx, { { "inv_norm_buffer", need(e:inv_norms()), "inv_norm" } }, self))
    local t_uploaded = now()
    local underflow
    underflow, self.underflow_note = device.underflow_defines(ctx, e, opts.exact_underflow)
    local t_certified = now()
    for k, v in pairs(underflow or {}) do defines[k] = v end
    for k, v in pairs(opts.defines or {}) do defines[k] = v end
    self.shader_name = kernel.variant(GEMM, { layout = layout })
    self.kernel = need(kernel.new(ctx, GEMM, { variant = self.shader_name, spirv = opts.spirv, name = opts.name,
                                               defines = next(defines) and defines or nil }))
    self.pipeline = self.kernel.pipeline
    local t_end = now()
    self.setup_note = string_format("set-up %.2f s: table uploaded %.2f, subnormal certificate %.2f, kernel %.2f",
        t_end - t0, t_uploaded - t0, t_certified - t_uploaded, t_end - t_certified)
    return self
end

--- gemm's job (direct.job with shape "gemm"), or nil, err. opts:
---   layout           "rows" (default: no transposition on the host; the GPU time level) | "columns"
---   tiling           { wx, wy, rows, columns, slice } (default: the device kind's)
---   defines, spirv   a variant of gemm.comp (twins, experiments), name
---   exact_underflow  false: no exact underflow path (tests; device.underflow_defines)
---   table_block_items the table in blocks of this many candidates, reached by device
---                    address (default: one buffer where the table fits one, else
---                    blocks as large as an allocation allows)
function _M.job(ctx, e, opts)
    -- Called by direct.job (its OWN_JOBS): misuse is raised at
    -- direct.job's caller (level 3 here, 4 in tiling_defines). Its tiling sets its threads: a
    -- workgroup size is not taken silently (a tile size, as for every shape
    -- that does not tile, has nothing to set).
    if opts.workgroup_size ~= nil then
        error("direct.job: shape gemm takes no workgroup_size (its tiling sets its threads: opts.tiling)", 3)
    end
    local b = opts.table_block_items
    if b ~= nil and (type(b) ~= "number" or b < 1 or b % 1 ~= 0 or b >= 2 ^ 32) then
        error("direct.job: table_block_items must be a positive integer, not " .. tostring(b), 3)
    end
    local defines = tiling_defines(opts.tiling or _M.TILINGS[ctx.info.type == "cpu" and "cpu" or "gpu"])
    return catch(make_job, ctx, e, opts, defines)
end

--- Bytes each sequence of a batch needs in its largest buffer.
function Job:bytes_per_sequence(ring)
    return max(self.dim * 8, self.tiles * 8, ceil(self.n / 32) * 4, ring * 4)
end

--- The largest batch whose buffers fit the device's buffer range (and whose
--- append dispatch fits the workgroup count), capped at `cap` (default 4,096).
function Job:max_batch(ring, cap)
    local info = self.ctx.info
    return max(1, min(cap or 4096, floor(info.max_storage_buffer_range / self:bytes_per_sequence(ring)),
        info.max_workgroup_count))
end

local Batch = batches.class()

local function make_batch(self, starts, ring, in_flight)
    local count, ctx = #starts, self.ctx
    local b = setmetatable({ job = self, count = count, ring = ring }, Batch)
    b.centroids = need(ctx:upload(need(self.embeddings:gather_f64(starts)), "centroids"))
    -- After step 0 each centroid is its start's row exactly (c = (f32) csum).
    b.centers = need(ctx:upload(need(self.embeddings:gather_columns(starts)), "centers"))
    b.masks = need(ctx:upload(need(divgpu.jobs.initial_masks(starts, self.n)), "masks"))
    b.winners_buffer = need(ctx:buffer(count * ring * 4, "winners", "host"))
    b.partials = need(ctx:buffer(count * self.tiles * 8, "partials"))
    -- The scores' tiles x sequence tiles, folded into x by y within the
    -- device's workgroup count (gemm.comp's scores() unfolds them).
    local groups = self.tiles * ceil(count / self.tile_rows)
    b.scores_x = min(groups, ctx.info.max_workgroup_count)
    b.scores_y = ceil(groups / b.scores_x)
    if b.scores_y > ctx.info.max_workgroup_count then
        fail(string.format("gemm: %d candidate tiles x %d sequence tiles are more workgroups than %d x %d, the most "
            .. "device '%s' dispatches", self.tiles, ceil(count / self.tile_rows), ctx.info.max_workgroup_count,
            ctx.info.max_workgroup_count, ctx.info.name))
    end
    b.group = need(self.kernel:bind({ embeddings = self.table_buffer, inv_norm = self.inv_norm_buffer,
                                      centroids = b.centroids, centers = b.centers, masks = b.masks,
                                      winners = b.winners_buffer, partials = b.partials }, self.table_blocks))
    need(b:add_recorders(in_flight))
    return b
end

--- job:batch(starts, ring, in_flight) -> batch of #starts sequences, step 0 done; or nil, err.
Job.batch = batches.maker(make_batch)

--- Records steps first .. first+count-1 on `rec`: per step the scores by
--- tiles, then the append, each ordered before the next by a barrier;
--- called by batch:record.
function Batch:record_steps(first, count, rec)
    local job = self.job
    local push = { num_items = job.n, dim = job.dim, ring = self.ring, sequences = self.count, tiles = job.tiles,
                   block_items = job.block_items or 0 }
    for t = first, first + count - 1 do
        push.step, push.phase = t, PHASE.scores
        need(job.kernel:dispatch(rec, self.group, push, self.scores_x, self.scores_y))
        -- Orders every tile's partials before the append reads them.
        need(rec:barrier())
        push.phase = PHASE.append
        need(job.kernel:dispatch(rec, self.group, push, self.count))
        -- Orders the append's mask, centroid and centers before the next step's scores.
        need(rec:barrier())
    end
    return true
end

return _M
