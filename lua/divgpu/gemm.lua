-- gemm: the direct method as an exact GEMM (shaders/gemm.comp). Every step:
-- the scores of every (sequence, candidate) pair of a batch by tiles, the
-- table's tile in shared memory serving a block of centroids (one chain a
-- pair, d ascending: the contract's arithmetic, another loop order), then a
-- dispatch a sequence that takes the best of its tiles and appends it.
--
--   local gemm = require "divgpu.gemm"
--   local job = gemm.job(ctx, e, { layout = "columns" })   -- as vk_compute.job's jobs:
--   local batch = job:batch(starts, ring, in_flight)
--   batch:record(first, count, rec); batch:submit(rec); batch:wait(rec); batch:winners()
--
-- Misuse raises error(msg, 2).

local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local kernel = require "divgpu.kernel"

local ceil, floor, max, min = math.ceil, math.floor, math.max, math.min
local error, pairs, setmetatable, string_format, tostring, type = error, pairs, setmetatable, string.format, tostring, type

local _M = {}

local DESCRIPTOR = {
    shader = "gemm",
    bindings = { "embeddings", "inv_norm", "centroids", "centers", "masks", "winners", "partials" },
    push = { "num_items", "dim", "step", "ring", "sequences", "tiles", "phase" },
    constants = {},
}
local PHASE_SCORES, PHASE_APPEND = 0, 1

-- Tilings by device kind: a GPU 128 x 128 pairs a workgroup of 16 x 16
-- threads, 8 x 8 pairs a thread (shaders/gemm.comp's default); a CPU device,
-- whose threads are loop iterations, 16 x 16 pairs of 8 x 8 threads.
_M.TILINGS = {
    gpu = { wx = 16, wy = 16, rows = 8, columns = 8, slice = 8 },
    cpu = { wx = 8, wy = 8, rows = 2, columns = 2, slice = 8 },
}
local MICROTILE = { [1] = true, [2] = true, [4] = true, [8] = true }

local function merged(a, b)
    local m = {}
    for k, v in pairs(a or {}) do m[k] = v end
    for k, v in pairs(b or {}) do m[k] = v end
    return m
end

--- The defines of a tiling (raises on one the shader cannot take).
local function tiling_defines(t)
    if not (MICROTILE[t.rows] and MICROTILE[t.columns]) then
        error(string_format("gemm: a thread's pairs must be 1, 2, 4 or 8 a side, not %s x %s",
            tostring(t.rows), tostring(t.columns)), 3)
    end
    return { GEMM_WX = t.wx, GEMM_WY = t.wy, TILE_ROWS = t.rows, TILE_COLUMNS = t.columns, GEMM_SLICE = t.slice }
end

local Job = {}
Job.__index = Job

--- gemm.job(ctx, e, opts) -> job. opts:
---   layout           "columns" (default: contiguous tile loads) | "rows"
---   tiling           { wx, wy, rows, columns, slice } (default: the device kind's)
---   defines, spirv   a variant of gemm.comp (twins, experiments)
---   exact_underflow  false: no exact underflow path (tests; vk.underflow_defines)
function _M.job(ctx, e, opts)
    opts = opts or {}
    if type(e) ~= "userdata" then error("gemm.job: embeddings must be a table loaded with divgpu.load_embeddings", 2) end
    local info = ctx.info
    local layout = opts.layout or "columns"
    if layout ~= "rows" and layout ~= "columns" then error("gemm.job: unknown layout '" .. tostring(layout) .. "'", 2) end
    local tiling = opts.tiling or _M.TILINGS[info.type == "cpu" and "cpu" or "gpu"]
    local threads = tiling.wx * tiling.wy
    if threads > info.max_workgroup_invocations then
        error(string_format("gemm: %d threads a workgroup; device '%s' allows %d", threads, info.name,
            info.max_workgroup_invocations), 2)
    end
    local tile_rows, tile_columns = tiling.wy * tiling.rows, tiling.wx * tiling.columns
    local shared = 4 * tiling.slice * (tile_rows + tile_columns) + 8 * tile_rows * tiling.wx + 8 * threads
    if shared > info.max_shared_memory then
        error(string_format("gemm: the tiling needs %d bytes of shared memory; device '%s' has %d", shared,
            info.name, info.max_shared_memory), 2)
    end
    local n, dim = e.n, e.dim
    local self = setmetatable({ ctx = ctx, embeddings = e, n = n, dim = dim, layout = layout, tiling = tiling,
                                method = "direct", shape = "gemm", precision = "fp32",
                                workgroup_size = threads, tile_rows = tile_rows, tile_columns = tile_columns,
                                tiles = ceil(n / tile_columns) }, Job)
    local values = e:values()
    self.table_buffer = ctx:upload(layout == "columns" and values:transposed(n, dim) or values, "embeddings")
    self.inv_norm_buffer = ctx:upload(e:inv_norms(), "inv_norm")
    local underflow
    underflow, self.underflow_note = vk.underflow_defines(ctx, e, opts.exact_underflow)
    local defines = merged(merged(tiling_defines(tiling), underflow), opts.defines)
    if layout == "columns" then defines.DIVGPU_COLUMNS = 1 end
    self.kernel = kernel.new(ctx, DESCRIPTOR, { spirv = opts.spirv or vk.shader(ctx, "gemm", defines),
                                                name = "gemm" })
    return self
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

local Batch = setmetatable({}, { __index = vk.Batch })  -- recorders, submit, wait, winners
Batch.__index = Batch

--- job:batch(starts, ring, in_flight) -> batch of #starts sequences, step 0
--- done: each centroid is its start's row (c = (f32) csum is that row exactly).
function Job:batch(starts, ring, in_flight)
    local count, n, dim, ctx = #starts, self.n, self.dim, self.ctx
    local b = setmetatable({ job = self, count = count, ring = ring }, Batch)
    local values = self.embeddings:values()
    local centers = divgpu.array("f32", dim * count)
    for i = 1, count do
        local row = starts[i] * dim
        for d = 0, dim - 1 do centers[d * count + i] = values[row + d + 1] end
    end
    b.centroids = ctx:upload(self.embeddings:gather_f64(starts), "centroids")
    b.centers = ctx:upload(centers, "centers")
    b.masks = ctx:upload(divgpu.initial_masks(starts, n), "masks")
    b.winners_buffer = ctx:buffer(count * ring * 4, "winners", "host")
    b.partials = ctx:buffer(count * self.tiles * 8, "partials")
    b.group = self.kernel:bind{ embeddings = self.table_buffer, inv_norm = self.inv_norm_buffer,
                                centroids = b.centroids, centers = b.centers, masks = b.masks,
                                winners = b.winners_buffer, partials = b.partials }
    b:add_recorders(in_flight)
    return b
end

--- Records steps first .. first+count-1 on `rec`: per step the scores by
--- tiles, then the append, each ordered before the next by a barrier.
function Batch:record(first, count, rec)
    self:check_chunk(count)
    rec = rec or self.recorder
    local job = self.job
    local push = { num_items = job.n, dim = job.dim, ring = self.ring, sequences = self.count, tiles = job.tiles }
    for t = first, first + count - 1 do
        push.step, push.phase = t, PHASE_SCORES
        job.kernel:dispatch(rec, self.group, push, job.tiles, ceil(self.count / job.tile_rows))
        -- Orders every tile's partials before the append reads them.
        rec:barrier()
        push.phase = PHASE_APPEND
        job.kernel:dispatch(rec, self.group, push, self.count)
        -- Orders the append's mask, centroid and centers before the next step's scores.
        rec:barrier()
    end
end

return _M
