-- The certified tensor filter (docs/contract.md#tensor; the proof is
-- shaders/tensor.md). Each step: the centroids cut into int8 slices, the
-- approximate score of every pair from exact int32 sums of slice products
-- (the plain shader, or tensor cores where the device has them and the job
-- asks), one proven bound per sequence, and the contract's chain for the
-- window. The approximations are the same integers on every device.
--
--   local tensor = require "divgpu.methods.tensor"
--   local ok, why = tensor.fits(ctx, e)            -- true, why | nil, why
--   local job = assert(tensor.job(ctx, e, opts))   -- the interface of every method (methods.lua)
--   local batch = assert(job:batch(starts, ring, in_flight))
--   batch:record(first, count, rec); batch:submit(rec); batch:wait(rec)
--   batch:stats()                                  -- windows, fallbacks, the check's ratio
--
-- Misuse raises error(msg, 2); what the device or table cannot do returns
-- nil, err.

local divgpu = require "divgpu"
local device = require "divgpu.device"
local device_profile = require "divgpu.device_profile"
local failure = require "divgpu.failure"
local kernel = require "divgpu.kernel"
local batches = require "divgpu.methods.batch"
local gram = require "divgpu.methods.gram"
local figures = require "divgpu.methods.gram_figures"

local need, catch, fail = failure.need, failure.catch, failure.fail
local ceil, floor, max, min = math.ceil, math.floor, math.max, math.min
local error, pairs, ipairs, setmetatable, string_format, type =
    error, pairs, ipairs, setmetatable, string.format, type

-- Below direct in preference: auto weighs it by cost (divgpu.plan) where
-- the device has tensor cores; --method tensor asks for it anywhere.
local _M = { name = "tensor", preference = -1, default_layout = "rows",
             doc = "the certified tensor filter: int8 slice products bound each step's window "
                .. "(docs/contract.md#tensor)" }

-- The run's options (driver.run) its job takes: { run option = job option }.
_M.options = { workgroup_size = "workgroup_size", window_capacity = "window_capacity",
               tensor_defines = "defines", spirv = "spirv", exact_underflow = "exact_underflow" }

-- Bench-only switches (driver.run's opts.tuning): the products on tensor
-- cores or not, their tiling, a variant of tensor_coopmat.comp, the
-- combine's fused sums, the export of every pair's â (see job's options).
_M.tuning = { coopmat = "coopmat", coopmat_tiling = "coopmat_tiling", coopmat_defines = "coopmat_defines",
              fused_sums = "fused_sums", coopmat_export = "coopmat_export" }

--- Its seconds by the cost model, where the filter may run and the device's
--- int8 multiply-add rate is known.
function _M.estimate(job, device)
    if not device.fits.tensor then return nil, device.why_not.tensor end
    if not device.rates.int8_mac then return nil end
    return { { seconds = require("divgpu.cost").tensor_seconds(job, device.rates) } }
end

--- What auto asks once the filter is the cheapest: the chain's certificate.
function _M.confirm(ctx, e)
    return e:gram_admissible()
end

local TENSOR = kernel.descriptor("tensor")
local COOPMAT = kernel.descriptor("tensor_coopmat")
local PHASE = TENSOR.phases
local STATE_F64 = TENSOR.state_f64_words
local U32_WORDS = TENSOR.state.STATE_U32
local WINDOW_TOTAL, WINDOW_ONES = TENSOR.state.S_WINDOW_TOTAL + 1, TENSOR.state.S_WINDOW_ONES + 1
local FALLBACKS, WINDOW_MAX = TENSOR.state.S_FALLBACKS + 1, TENSOR.state.S_WINDOW_MAX + 1
local HIST_FIRST, HIST_BINS = TENSOR.state.S_HIST, TENSOR.state.HIST_BINS

-- The products' tiling on tensor cores (tensor_coopmat.comp): wr x wc
-- subgroups a workgroup, each fr x fc blocks of 16 x 16 pairs, k 32-byte
-- steps of the slices staged at a time, in `stages` buffers (1 or 2).
_M.COOPMAT_TILING = { wr = 4, wc = 2, fr = 2, fc = 4, k = 2, stages = 1 }

-- The largest D whose 128 A_2 + A_3 fits int32 (|q_1| <= 127, |q_2| <= 64:
-- D (128 * 127^2 + 2 * 127 * 64) < 2^31; shaders/tensor.md section 2):
-- up to it the tensor cores' combine forms that sum on its accumulators.
_M.FUSED_SUMS_MAX_DIM = 1032

-- Bytes of shared memory tensor_coopmat.comp declares for tiling t: its
-- stages of rows (k steps of 32 bytes and 16 of padding, both slices), or,
-- where larger, the combine's scratch (two 16 x 16 int32 blocks a subgroup)
-- or the rows' minima that replace it (16 bytes and 4 a part, two parts a
-- subgroup column); and the tile's constants beside them (a weight a
-- column, a scale a row, a mask word a row and 32 columns).
function _M.coopmat_shared_bytes(t, planes)
    local k, stages = t.k or _M.COOPMAT_TILING.k, t.stages or _M.COOPMAT_TILING.stages
    local sequences, candidates = t.wr * t.fr * 16, t.wc * t.fc * 16
    local staged = stages * planes * (sequences + candidates) * (32 * k + 16)
    local scratch = t.wr * t.wc * 2 * 16 * 16 * 4
    local minima = sequences * t.wc * 2 * (16 + 4)
    local constants = candidates * 8 + sequences * 8 + sequences * candidates / 32 * 4
    return math.max(staged, scratch, minima) + constants
end

--- True when ctx's device multiplies int8 16 x 16 x 32 into int32 on its
--- tensor cores (the device profile's int8_matrices: src/gpu/profile.rs).
function _M.has_coopmat(ctx)
    local p = device_profile.profile(ctx)
    return p and p.int8_matrices or false
end

--- Why the slice products cannot run on ctx's tensor cores (nil when they
--- can): the device lacks the matrices, or this build lacks their kernel
--- (Debian 12's shaderc cannot compile tensor_coopmat.comp: `divgpu info`).
function _M.coopmat_unavailable(ctx)
    if not _M.has_coopmat(ctx) then
        return string_format("device '%s' has no int8 16 x 16 x 32 cooperative matrices", ctx.info.name)
    end
    local why = divgpu.shaders.not_built().tensor_coopmat
    if why then return "this build has no tensor_coopmat kernel (" .. why .. ")" end
end

--- tensor.may_fit(ctx, e) -> true, or nil and why: what auto asks before
--- weighing the filter, without cutting the slices: tensor cores, 64-bit
--- integers, the table in one storage buffer, D within the exact int32 sums
--- (the chain's certificate is asked once the filter is the cheapest).
function _M.may_fit(ctx, e)
    local no_coopmat = _M.coopmat_unavailable(ctx)
    if no_coopmat then return nil, no_coopmat end
    if not need(device_profile.profile(ctx)).int64 then return nil, string_format("device '%s' lacks shaderInt64", ctx.info.name) end
    if e.dim > divgpu.jobs.tensor_max_dim then
        return nil, string_format("the int32 sums are exact for D <= %d; the table has D = %d", divgpu.jobs.tensor_max_dim, e.dim)
    end
    return device.table_fits(ctx, e, 4)
end

--- Whether the tensor filter runs `request`: only the plain fp32 job, as gram.
function _M.serves(request)
    if request.plain then return true end
    return nil, "shapes and precisions other than baseline fp32 run only with the direct method"
end

-- fits' refusals that need no slices: nil, why; or true.
local function refusal(ctx, e)
    if not need(device_profile.profile(ctx)).int64 then
        return nil, string_format("device '%s' lacks shaderInt64, which the tensor filter needs", ctx.info.name)
    end
    local ok, why = device.table_fits(ctx, e, 4)
    if not ok then return nil, why end
    return e:gram_admissible()  -- the chain's no-overflow certificate (docs/contract.md#no-overflow)
end

--- tensor.fits(ctx, e) -> true, why; or nil, why the filter cannot run this
--- table here (no int64, the chain's no-overflow certificate, a table its
--- slices cannot certify).
function _M.fits(ctx, e)
    local ok, why = refusal(ctx, e)
    if not ok then return nil, why end
    local slices, slice_why = divgpu.jobs.tensor_slices(e)
    if not slices then return nil, slice_why end
    return true, "the table's int8 slices certify every pair", slices
end

local Job = {}
Job.__index = Job

local function merged(a, b)
    local m = {}
    for k, v in pairs(a or {}) do m[k] = v end
    for k, v in pairs(b or {}) do m[k] = v end
    return m
end

local function upload(self, ctx, e, slices)
    need(device.upload_all(ctx, {
        { "table_buffer", e, "embeddings", "rows" },
        { "inv_norm_buffer", need(e:inv_norms()), "inv_norm" },
        { "factors_buffer", slices.factors, "tensor bound factors" },
        { "slices_buffer", slices.slices, "table slices" },
        { "exponents_buffer", slices.exponents, "table exponents" },
        { "weights_buffer", slices.weights, "column weights" } }, self))
end

-- The tensor cores' kernel of opts (its tiling, defines, descriptor) begun: pending.
local function begin_coopmat(self, ctx, e, opts)
    local t = opts.coopmat_tiling or _M.COOPMAT_TILING
    self.coopmat_tiling = t
    self.coopmat_tile = { sequences = t.wr * t.fr * 16, candidates = t.wc * t.fc * 16 }
    local defines = merged(opts.coopmat_tiling and { CM_WR = t.wr, CM_WC = t.wc, CM_FR = t.fr, CM_FC = t.fc,
        CM_KSTEPS = t.k or _M.COOPMAT_TILING.k, CM_STAGES = t.stages or _M.COOPMAT_TILING.stages }, opts.coopmat_defines)
    local descriptor = COOPMAT
    if opts.coopmat_export then
        -- The same kernel, every pair's â also stored: its own bindings (the descriptor's export).
        descriptor = setmetatable({ bindings = COOPMAT.export.bindings }, { __index = COOPMAT })
        defines = merged(defines, COOPMAT.export.defines)
        self.export = true
    end
    self.coopmat_descriptor = descriptor
    self.tile_width = self.coopmat_tile.candidates
    self.products_note = string_format("tensor: the slice products on tensor cores (int8 cooperative matrices, "
        .. "tiles of %d sequences x %d candidates)", self.coopmat_tile.sequences, self.coopmat_tile.candidates)
    return need(kernel.begin(ctx, descriptor, { name = "tensor_coopmat", defines = next(defines) and defines or nil,
        constants = { fused_sums = (opts.fused_sums ~= false and e.dim <= _M.FUSED_SUMS_MAX_DIM) and 1 or 0 } }))
end

-- The tiling's threads and shared memory against the device's limits (the slices' planes known).
local function check_coopmat_tiling(self, info)
    local t = self.coopmat_tiling
    local threads = t.wr * t.wc * 32
    local k, stages = t.k or _M.COOPMAT_TILING.k, t.stages or _M.COOPMAT_TILING.stages
    local shared_bytes = _M.coopmat_shared_bytes(t, self.planes)
    if threads > info.max_workgroup_invocations or shared_bytes > info.max_shared_memory then
        fail(string_format("tensor: the cooperative-matrix tiling %dx%dx%dx%d (k %d, %d stages) needs %d threads and "
            .. "%d bytes of shared memory; device '%s' allows %d and %d", t.wr, t.wc, t.fr, t.fc, k, stages, threads,
            shared_bytes, info.name, info.max_workgroup_invocations, info.max_shared_memory))
    end
end

local function make_job(ctx, e, opts)
    local now = divgpu.clock.now
    local t0 = now()
    local ok, why = refusal(ctx, e)
    if not ok then fail("the tensor filter cannot run here: " .. why) end
    local info = need(device_profile.profile(ctx))
    local wg = opts.workgroup_size or device.default_workgroup(info)
    gram.check_workgroup(info, wg, "tensor")
    local capacity = opts.window_capacity or wg
    local subgroup_slots = ceil(wg / max(1, info.subgroup_size))
    -- tensor.comp's shared arrays: the centroid, the reductions', the window and its reaching tiles.
    local shared = e.dim * 4 + subgroup_slots * (8 + 32 + 16 + 8 + 8 + 4 + 4 + 4) + 2 * (capacity * 4 + 4)
    if shared > info.max_shared_memory then
        fail(string_format("dimension %d needs %d bytes of shared memory with %d threads; device '%s' has %d",
            e.dim, shared, wg, info.name, info.max_shared_memory))
    end
    local self = setmetatable({ ctx = ctx, embeddings = e, n = e.n, dim = e.dim, method = "tensor",
                                workgroup_size = wg, window_capacity = capacity, tile_width = wg,
                                check = opts.defines and opts.defines.DIVGPU_TENSOR_CHECK }, Job)
    local underflow
    underflow, self.underflow_note = device.underflow_defines(ctx, e, opts.exact_underflow)
    local t_certified = now()
    -- The pipelines compile on threads of their own while the host cuts the slices.
    local defines = merged(underflow, opts.defines)
    local tensor_pending = need(kernel.begin(ctx, TENSOR, {
        spirv = opts.spirv, defines = next(defines) and defines or nil, name = "tensor",
        constants = { workgroup_size = wg, max_dim = e.dim, window_capacity = capacity, subgroup_slots = subgroup_slots },
    }))
    local coopmat_pending = opts.coopmat and begin_coopmat(self, ctx, e, opts)
    if not opts.coopmat then
        local no_coopmat = _M.coopmat_unavailable(ctx)
        self.products_note = no_coopmat and "tensor: the slice products in plain shader code (" .. no_coopmat .. ")"
            or "tensor: the slice products in plain shader code (as asked)"
    end
    local t_begun = now()
    local slices, slice_why = divgpu.jobs.tensor_slices(e)
    if not slices then fail("the tensor filter cannot run here: " .. slice_why) end
    self.words, self.planes, self.item_rows = slices.words, slices.planes, slices.item_rows
    if opts.coopmat then check_coopmat_tiling(self, info) end
    local t_sliced = now()
    upload(self, ctx, e, slices)
    local t_uploaded = now()
    self.kernel = need(tensor_pending:wait())
    if coopmat_pending then self.coopmat = need(coopmat_pending:wait()) end
    self.tiles = ceil(e.n / self.tile_width)
    local t_end = now()
    self.setup_note = string_format("set-up %.2f s: subnormal certificate %.2f, kernels begun %.2f, certificate and "
        .. "slices %.2f, tables uploaded %.2f, waited %.2f for the kernels", t_end - t0, t_certified - t0,
        t_begun - t_certified, t_sliced - t_begun, t_uploaded - t_sliced, t_end - t_uploaded)
    return self
end

--- tensor.job(ctx, e, opts) -> job, or nil, err. opts:
---   workgroup_size   threads a workgroup (default the device's, as gram)
---   window_capacity  largest window rescored without the fallback (default: the workgroup size)
---   defines, spirv   a variant of tensor.comp (the instrumented build, twins)
---   coopmat          the products on tensor cores (tensor_coopmat.comp): true (misuse on
---                    a device without them or with the instrumented build), false (the
---                    plain shader), nil (default: tensor cores where the device has them
---                    and the job asks for no variant of tensor.comp)
---   coopmat_tiling   { wr, wc, fr, fc, k, stages } (bench: the products' tiling; default COOPMAT_TILING)
---   coopmat_defines  a variant of tensor_coopmat.comp (DIVGPU_COOPMAT_PERTURB = 1: the twin;
---                    DIVGPU_COOPMAT_PRODUCTS_ONLY = 1 .. 4: bench levels, garbage results)
---   fused_sums       false: the tensor cores' combine reads A_2 and A_3 apart even where
---                    D <= FUSED_SUMS_MAX_DIM (bench/tensor_paths.lua's A/B)
---   coopmat_export   true: the tensor cores' kernel also stores every pair's â in the
---                    batch's buffers.a_exact (bench/tensor_paths.lua's parity check)
---   exact_underflow  false: no exact underflow path (tests)
function _M.job(ctx, e, opts)
    opts = opts or {}
    if type(e) ~= "userdata" then error("tensor.job: embeddings must be a table loaded with divgpu.load_embeddings", 2) end
    if opts.coopmat then
        local no_coopmat = _M.coopmat_unavailable(ctx)
        if no_coopmat then error("tensor.job: " .. no_coopmat, 2) end
        if opts.defines and opts.defines.DIVGPU_TENSOR_CHECK then
            error("tensor.job: the instrumented build runs the plain products only", 2)
        end
    end
    if opts.coopmat == nil then
        local copy = {}
        for k, v in pairs(opts) do copy[k] = v end
        copy.coopmat = not _M.coopmat_unavailable(ctx) and not opts.defines and not opts.spirv
        opts = copy
    end
    return catch(make_job, ctx, e, opts)
end

--- Bytes each sequence of a batch needs in its largest buffer.
function Job:bytes_per_sequence(ring)
    return max((self.check or self.export) and self.n * 8 or 0, self.dim * 8, self.planes * self.words * 4,
               self.tiles * 16, ring * 4)
end

--- The largest batch whose buffers fit the device's buffer range, capped at `cap` (default 4,096).
function Job:max_batch(ring, cap)
    local info = self.ctx.info
    return max(1, min(cap or 4096, floor(info.max_storage_buffer_range / self:bytes_per_sequence(ring)),
        info.max_workgroup_count, 65535))
end

local Batch = batches.class()

-- The buffers a kernel of `descriptor` binds, by name, of a batch's `buffers`.
local function bindings_of(descriptor, buffers)
    local named = {}
    for _, name in ipairs(descriptor.bindings) do named[name] = buffers[name] end
    return named
end

local function zeroed(ctx, bytes, name)
    local buffer = need(ctx:buffer(bytes, name))
    need(buffer:fill(0))
    return buffer
end

local function make_batch(self, starts, ring, in_flight)
    local count, n, ctx = #starts, self.n, self.ctx
    local b = setmetatable({ job = self, count = count, ring = ring }, Batch)
    b.state_f64 = zeroed(ctx, count * STATE_F64 * 8, "tensor state f64")
    b.state_u32 = zeroed(ctx, count * U32_WORDS * 4, "tensor counters")
    b.winners_buffer = need(ctx:buffer(count * ring * 4, "winners", "host"))
    local buffers = {
        embeddings = self.table_buffer, inv_norm = self.inv_norm_buffer, job_factors = self.factors_buffer,
        table_slices = self.slices_buffer, exponents = self.exponents_buffer, column_weights = self.weights_buffer,
        centroids = need(ctx:upload(need(self.embeddings:gather_f64(starts)), "centroids")),
        centroid_slices = need(ctx:buffer(self.planes * ceil(count / 16) * 16 * self.words * 4, "centroid slices")),
        masks = need(ctx:upload(need(divgpu.jobs.initial_masks(starts, n)), "masks")),
        winners = b.winners_buffer, state_f64 = b.state_f64, state_u32 = b.state_u32,
        partials = need(ctx:buffer(count * self.tiles * 16, "tile minima")),
        partial_index = need(ctx:buffer(count * self.tiles * 4, "tile argmins")),
        a_exact = need(ctx:buffer((self.check or self.export) and count * n * 8 or 8, "approximations (the check)")),
    }
    b.buffers = buffers  -- by binding name (bench/tensor_paths.lua reads a_exact and the partials)
    b.group = need(self.kernel:bind(bindings_of(TENSOR, buffers)))
    if self.coopmat then b.coopmat_group = need(self.coopmat:bind(bindings_of(self.coopmat_descriptor, buffers))) end
    need(b:add_recorders(in_flight))
    return b
end

--- job:batch(starts, ring, in_flight) -> batch of #starts sequences, step 0 done; or nil, err.
Job.batch = batches.maker(make_batch)

--- The products of one step: on tensor cores, or tensor.comp's own phase.
-- `variant`: another tensor_coopmat kernel of the same tiling (a bench
-- variant), bound once to this batch's buffers.
local function record_products(self, rec, push, variant)
    local job = self.job
    if job.coopmat then
        local kernel, group = job.coopmat, self.coopmat_group
        if variant then
            self.variant_groups = self.variant_groups or {}
            self.variant_groups[variant] = self.variant_groups[variant]
                or need(variant:bind(bindings_of(variant.descriptor, self.buffers)))
            kernel, group = variant, self.variant_groups[variant]
        end
        return kernel:dispatch(rec, group, { num_items = job.n, sequences = self.count,
            row_bytes = job.words * 4, seq_rows = push.seq_rows, item_rows = job.item_rows, tiles = job.tiles },
            job.tiles, ceil(self.count / job.coopmat_tile.sequences))
    end
    push.phase = PHASE.products
    return job.kernel:dispatch(rec, self.group, push, job.tiles, self.count)
end

--- The push constants of a step of this batch (the phase set by the caller).
local function step_push(self, step)
    local job = self.job
    return { num_items = job.n, dim = job.dim, step = step, ring = self.ring, sequences = self.count,
             tiles = job.tiles, tile_width = job.tile_width, words = job.words,
             seq_rows = ceil(self.count / 16) * 16, item_rows = job.item_rows }
end

--- Records the current step's products alone on `rec` (bench/tensor_paths.lua
--- times them): the slices of the step last recorded are read again, and
--- the tile minima written again with the same values. `variant`
--- (optional): a tensor_coopmat kernel of the job's tiling built with other
--- defines (a bench variant), dispatched instead on this batch's buffers.
--- true, or nil, err.
function Batch:record_products(rec, variant)
    return catch(function()
        if variant and not self.job.coopmat then fail("tensor: a products variant needs the tensor-core path") end
        need(record_products(self, rec, step_push(self, 1), variant))
        -- Orders each repetition's writes before the next.
        need(rec:barrier())
        return true
    end)
end

--- Records steps first .. first+count-1 on `rec`: per step the slices, the
--- products, the decision, each ordered after the one before; called by
--- batch:record.
function Batch:record_steps(first, count, rec)
    local job = self.job
    local push = step_push(self, first)
    for t = first, first + count - 1 do
        push.step, push.phase = t, PHASE.slice
        need(job.kernel:dispatch(rec, self.group, push, self.count))
        -- Orders the centroids' slices and bounds before the products read them.
        need(rec:barrier())
        need(record_products(self, rec, push))
        -- Orders every tile's minima before the decision.
        need(rec:barrier())
        push.phase = PHASE.decide
        need(job.kernel:dispatch(rec, self.group, push, self.count))
        -- Orders the append's mask and centroid before the next step's slices.
        need(rec:barrier())
    end
    return true
end

--- The batch's filter statistics so far (after a wait), as gram's
--- batch:stats: windows, fallbacks, the histogram, the check's ratio; or nil, err.
function Batch:stats()
    return catch(function()
        local u = need(self.state_u32:read("u32"))
        local s = { window_total = 0, window_ones = 0, fallbacks = 0, window_max = 0,
                    window_histogram = figures.empty_histogram(), max_ratio = 0 }
        for i = 0, self.count - 1 do
            local o = i * U32_WORDS
            s.window_total = s.window_total + u[o + WINDOW_TOTAL]
            s.window_ones = s.window_ones + u[o + WINDOW_ONES]
            s.fallbacks = s.fallbacks + u[o + FALLBACKS]
            s.window_max = max(s.window_max, u[o + WINDOW_MAX])
            for k = 1, HIST_BINS do s.window_histogram[k] = s.window_histogram[k] + u[o + HIST_FIRST + k] end
        end
        local f = need(self.state_f64:read("f64"))
        for i = 0, self.count - 1 do s.max_ratio = max(s.max_ratio, f[i * STATE_F64 + 4]) end
        return s
    end)
end

-- The run's totals: gram's figures, summed the same way.
_M.totals, _M.add_totals = figures.totals, figures.add_totals
_M.summary = figures.summary_of("tensor")

return _M
