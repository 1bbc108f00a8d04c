-- tensor: the certified tensor filter (shaders/tensor.comp; the proof is
-- shaders/tensor.md). Each step: the centroids cut into int8 slices, the
-- approximate score of every pair from exact int32 sums of slice products,
-- one proven bound per sequence, and the contract's chain for the window.
--
--   local tensor = require "divgpu.tensor"
--   local ok, why = tensor.admissible(ctx, e)
--   local job = tensor.job(ctx, e, opts)      -- as vk_compute.job's jobs:
--   local batch = job:batch(starts, ring, in_flight)
--   batch:record(first, count, rec); batch:submit(rec); batch:wait(rec); batch:winners()
--   batch:stats()                              -- windows, fallbacks, the check's ratio
--
-- Misuse raises error(msg, 2).

local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local kernel = require "divgpu.kernel"
local gram = require "divgpu.gram"
local GRAM = require "divgpu.kernels.gram"  -- the counters' layout (gram_state.glsl)

local ceil, floor, max, min = math.ceil, math.floor, math.max, math.min
local error, pairs, setmetatable, string_format, type = error, pairs, setmetatable, string.format, type

local _M = {}

local DESCRIPTOR = {
    shader = "tensor",
    bindings = { "embeddings", "inv_norm", "job_factors", "table_slices", "exponents", "centroids",
                 "centroid_slices", "masks", "winners", "state_f64", "state_u32", "a_low", "partials",
                 "partial_index", "a_exact" },
    push = { "num_items", "dim", "step", "ring", "sequences", "tiles", "words", "seq_rows", "item_rows", "phase" },
    constants = { workgroup_size = 0, max_dim = 1, window_capacity = 2, subgroup_slots = 3 },
}
local PHASE_SLICE, PHASE_PRODUCTS, PHASE_DECIDE = 0, 1, 2
local STATE_F64 = 4

-- The products on tensor cores (shaders/tensor_coopmat.comp): the same
-- integers as the plain phase, 16 sequences x 64 candidates a workgroup.
local COOPMAT = {
    shader = "tensor_coopmat",
    bindings = { "inv_norm", "table_slices", "exponents", "centroid_slices", "masks", "state_f64", "a_low",
                 "partials", "partial_index" },
    push = { "num_items", "sequences", "row_bytes", "seq_rows", "item_rows", "tiles" },
    constants = {},
    tile_sequences = 16, tile_candidates = 64,
}

--- True when ctx's device multiplies int8 16 x 16 x 32 into int32 on its tensor cores.
function _M.has_coopmat(ctx)
    local info = ctx.info
    if not (info.int8 and info.storage_buffer_8bit and info.subgroup_size == 32) then return false end
    for _, c in ipairs(info.cooperative_matrix or {}) do
        if c.m == 16 and c.n == 16 and c.k == 32 and c.a == "i8" and c.b == "i8" and c.c == "i32"
           and c.result == "i32" and c.scope == "subgroup" then
            return true
        end
    end
    return false
end

--- True, or false and why the tensor filter cannot run this table here.
function _M.admissible(ctx, e)
    if not ctx.info.int64 then return false, "the device lacks shaderInt64" end
    local ok, why = e:gram_admissible()  -- the chain's no-overflow certificate (gram.md section 6)
    if not ok then return false, why end
    local slices, slice_why = divgpu.tensor_slices(e)
    if not slices then return false, slice_why end
    return true, nil, slices
end

local Job = {}
Job.__index = Job

--- tensor.job(ctx, e, opts) -> job. opts:
---   workgroup_size   threads a workgroup (default the device's, as gram)
---   window_capacity  largest window rescored without the fallback (default: the workgroup size)
---   defines, spirv   a variant of tensor.comp (the instrumented build, twins)
---   coopmat          true: the products on tensor cores (tensor_coopmat.comp), where
---                    the device has them; not with the instrumented build
---   exact_underflow  false: no exact underflow path (tests)
function _M.job(ctx, e, opts)
    opts = opts or {}
    if type(e) ~= "userdata" then error("tensor.job: embeddings must be a table loaded with divgpu.load_embeddings", 2) end
    local ok, why, slices = _M.admissible(ctx, e)
    if not ok then error("the tensor filter cannot run here: " .. why, 2) end
    local info = ctx.info
    local wg = opts.workgroup_size or vk.default_workgroup(info)
    local capacity = opts.window_capacity or wg
    local subgroup_slots = ceil(wg / max(1, info.subgroup_size))
    local shared = e.dim * 4 + subgroup_slots * (8 + 32 + 16 + 8 + 8 + 4 + 4 + 4) + capacity * 4 + 4
    if shared > info.max_shared_memory then
        error(string_format("dimension %d needs %d bytes of shared memory with %d threads; device '%s' has %d",
            e.dim, shared, wg, info.name, info.max_shared_memory), 2)
    end
    local self = setmetatable({ ctx = ctx, embeddings = e, n = e.n, dim = e.dim, method = "tensor",
                                workgroup_size = wg, window_capacity = capacity, words = slices.words,
                                item_rows = slices.item_rows,
                                tiles = ceil(e.n / wg), check = opts.defines and opts.defines.DIVGPU_TENSOR_CHECK }, Job)
    self.table_buffer = ctx:upload(e:values(), "embeddings")
    self.inv_norm_buffer = ctx:upload(e:inv_norms(), "inv_norm")
    self.factors_buffer = ctx:upload(slices.factors, "tensor bound factors")
    self.slices_buffer = ctx:upload(slices.slices, "table slices")
    self.exponents_buffer = ctx:upload(slices.exponents, "table exponents")
    local underflow
    underflow, self.underflow_note = vk.underflow_defines(ctx, e, opts.exact_underflow)
    local defines = {}
    for k, v in pairs(underflow or {}) do defines[k] = v end
    for k, v in pairs(opts.defines or {}) do defines[k] = v end
    self.kernel = kernel.new(ctx, DESCRIPTOR, {
        spirv = opts.spirv or vk.shader(ctx, "tensor", defines), name = "tensor",
        constants = { workgroup_size = wg, max_dim = e.dim, window_capacity = capacity, subgroup_slots = subgroup_slots },
    })
    if opts.coopmat then
        if not _M.has_coopmat(ctx) then
            error(string_format("device '%s' has no int8 16 x 16 x 32 cooperative matrices", info.name), 2)
        end
        if self.check then error("tensor.job: the instrumented build runs the plain products only", 2) end
        self.coopmat = kernel.new(ctx, COOPMAT, { name = "tensor_coopmat" })
        self.tiles = ceil(e.n / COOPMAT.tile_candidates)
    end
    return self
end

--- Bytes each sequence of a batch needs in its largest buffer.
function Job:bytes_per_sequence(ring)
    return max(self.n * (self.check and 8 or 4), self.dim * 8, 3 * self.words * 4, self.tiles * 16, ring * 4)
end

--- The largest batch whose buffers fit the device's buffer range, capped at `cap` (default 4,096).
function Job:max_batch(ring, cap)
    local info = self.ctx.info
    return max(1, min(cap or 4096, floor(info.max_storage_buffer_range / self:bytes_per_sequence(ring)),
        info.max_workgroup_count, 65535))
end

local Batch = setmetatable({}, { __index = vk.Batch })
Batch.__index = Batch

--- job:batch(starts, ring, in_flight) -> batch of #starts sequences, step 0 done.
function Job:batch(starts, ring, in_flight)
    local count, n, ctx = #starts, self.n, self.ctx
    local b = setmetatable({ job = self, count = count, ring = ring }, Batch)
    b.state_f64 = ctx:buffer(count * STATE_F64 * 8, "tensor state f64")
    b.state_f64:fill(0)
    b.state_u32 = ctx:buffer(count * GRAM.state_u32_words * 4, "tensor counters")
    b.state_u32:fill(0)
    b.winners_buffer = ctx:buffer(count * ring * 4, "winners", "host")
    b.group_buffers = {
        embeddings = self.table_buffer, inv_norm = self.inv_norm_buffer, job_factors = self.factors_buffer,
        table_slices = self.slices_buffer, exponents = self.exponents_buffer,
        centroids = ctx:upload(self.embeddings:gather_f64(starts), "centroids"),
        centroid_slices = ctx:buffer(3 * ceil(count / 16) * 16 * self.words * 4, "centroid slices"),
        masks = ctx:upload(divgpu.initial_masks(starts, n), "masks"),
        winners = b.winners_buffer, state_f64 = b.state_f64, state_u32 = b.state_u32,
        a_low = ctx:buffer(count * n * 4, "approximations rounded down"),
        partials = ctx:buffer(count * self.tiles * 16, "tile minima"),
        partial_index = ctx:buffer(count * self.tiles * 4, "tile argmins"),
        a_exact = ctx:buffer(self.check and count * n * 8 or 8, "approximations (the check)"),
    }
    b.group = self.kernel:bind(b.group_buffers)
    if self.coopmat then
        local named = {}
        for _, name in ipairs(COOPMAT.bindings) do named[name] = b.group_buffers[name] end
        b.coopmat_group = self.coopmat:bind(named)
    end
    b:add_recorders(in_flight)
    return b
end

--- Records steps first .. first+count-1 on `rec`: per step the slices, the
--- products, the decision, each ordered after the one before.
function Batch:record(first, count, rec)
    self:check_chunk(count)
    rec = rec or self.recorder
    local job = self.job
    local push = { num_items = job.n, dim = job.dim, ring = self.ring, sequences = self.count,
                   tiles = job.tiles, words = job.words, seq_rows = ceil(self.count / 16) * 16, item_rows = job.item_rows }
    for t = first, first + count - 1 do
        push.step = t
        push.phase = PHASE_SLICE
        job.kernel:dispatch(rec, self.group, push, self.count)
        -- Orders the centroids' slices and bounds before the products read them.
        rec:barrier()
        if job.coopmat then
            job.coopmat:dispatch(rec, self.coopmat_group, { num_items = job.n, sequences = self.count,
                row_bytes = job.words * 4, seq_rows = push.seq_rows, item_rows = job.item_rows, tiles = job.tiles },
                job.tiles, ceil(self.count / COOPMAT.tile_sequences))
        else
            push.phase = PHASE_PRODUCTS
            job.kernel:dispatch(rec, self.group, push, job.tiles, self.count)
        end
        -- Orders every tile's minima and approximations before the decision.
        rec:barrier()
        push.phase = PHASE_DECIDE
        job.kernel:dispatch(rec, self.group, push, self.count)
        -- Orders the append's mask and centroid before the next step's slices.
        rec:barrier()
    end
end

--- The batch's filter statistics so far (after a wait), as gram's batch:stats.
function Batch:stats()
    local u = self.state_u32:read("u32")
    local s = { window_total = 0, window_ones = 0, fallbacks = 0, window_max = 0,
                window_histogram = gram.empty_histogram(), max_ratio = 0 }
    for i = 0, self.count - 1 do
        local o = i * GRAM.state_u32_words
        s.window_total = s.window_total + u[o + GRAM.window_total]
        s.window_ones = s.window_ones + u[o + GRAM.window_ones]
        s.fallbacks = s.fallbacks + u[o + GRAM.fallbacks]
        s.window_max = max(s.window_max, u[o + GRAM.window_max])
        for k = 1, GRAM.hist_bins do s.window_histogram[k] = s.window_histogram[k] + u[o + GRAM.hist_first + k] end
    end
    local f = self.state_f64:read("f64")
    for i = 0, self.count - 1 do s.max_ratio = max(s.max_ratio, f[i * STATE_F64 + 4]) end
    return s
end

return _M
