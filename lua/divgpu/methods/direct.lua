-- The direct method: every step scans every candidate with the contract's
-- exact chain (docs/contract.md#direct). Its shapes are the kernels whose
-- descriptor says `method = "direct"` (lua/divgpu/kernels/: baseline, the
-- reference; tiled; tile-dispatch; gemm, whose job is methods/direct_gemm.lua, named in OWN_JOBS below); each has the axes precision (fp32,
-- fp16, fp16-exact) and layout (rows, columns) where its shader declares
-- them. A new shape is its `.comp` and its descriptor: this module, the
-- CLI, bench and the tests find it through the registry.
--
--   local direct = require "divgpu.methods.direct"
--   local job = assert(direct.job(ctx, embeddings, { shape = "tiled", tile_size = 512 }))
--   local batch = assert(job:batch(starts, ring, in_flight))  -- step 0 done
--   assert(batch:record(first_step, count, rec)); assert(batch:submit(rec)); batch:wait(rec)
--
-- The interface every method implements (methods.lua): name, preference,
-- serves, fits, job; a job's max_batch and batch; a batch's record, submit,
-- wait and winners_buffer. Misuse raises error(msg, 2); what the device
-- cannot do returns nil, err.

local divgpu = require "divgpu"
local device = require "divgpu.device"
local failure = require "divgpu.failure"
local kernel = require "divgpu.kernel"
local batches = require "divgpu.methods.batch"
local profile = require "divgpu.device_profile"

local need, catch, fail = failure.need, failure.catch, failure.fail
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local error, type, pairs, ipairs, tostring, setmetatable, string_format, concat =
    error, type, pairs, ipairs, tostring, setmetatable, string.format, table.concat

local _M = { name = "direct", preference = 0, default_layout = "columns",
             doc = "the contract's exact chain for every candidate, every step (docs/contract.md#direct)" }

-- What a request names when it names nothing: the fp32 contract, by rows.
_M.DEFAULTS = { precision = "fp32", layout = "rows" }

-- The run's options (driver.run) its job takes: { run option = job option }.
_M.options = { shape = "shape", precision = "precision", tile_size = "tile_size", layout = "layout",
               workgroup_size = "workgroup_size", spirv = "spirv", shader_name = "name",
               exact_underflow = "exact_underflow", direct_defines = "defines" }

-- Bench-only switches (driver.run's opts.tuning): the GEMM shape's tiling
-- and its table blocks' size.
_M.tuning = { gemm_tiling = "tiling", gemm_table_block_items = "table_block_items" }

-- The shapes auto weighs where the request leaves the shape open: those
-- whose share of the chain rate is measured (divgpu.cost's EFFICIENCY).
_M.WEIGHED_SHAPES = { "gemm", "baseline" }

--- Its seconds by the cost model, a shape each (device.shapes, default
--- WEIGHED_SHAPES; device.gemm_rows, else the GEMM tile's rows on device.info).
function _M.estimate(job, device)
    local cost = require "divgpu.cost"
    local rows = device.gemm_rows
    if not rows and device.info then rows = require("divgpu.methods.direct_gemm").tile_rows(device.info) end
    local list = {}
    for _, shape in ipairs(device.shapes or _M.WEIGHED_SHAPES) do
        list[#list + 1] = { key = shape, label = "direct " .. shape, shape = shape,
                            seconds = cost.direct_seconds(job, device.rates, shape, rows) }
    end
    return list
end

--- Bytes of device memory the table needs (f32, fp16 halves, or both).
function _M.memory(job)
    local bytes = { fp32 = 4, fp16 = 2, ["fp16-exact"] = 6 }
    return job.n * job.dim * (bytes[job.precision or "fp32"] or 4)
end

--- The direct method's shapes, the reference first.
function _M.shapes()
    local names = {}
    for i, d in ipairs(kernel.serving("direct")) do names[i] = d.name end
    return names
end

--- The shape every request without one runs (the reference kernel).
function _M.default_shape()
    return _M.shapes()[1]
end

--- The descriptor of `shape`, or nil when the direct method has no such shape.
function _M.descriptor(shape)
    local d = kernel.descriptor(shape)
    return d and d.method == "direct" and d or nil
end

--- The values a shape takes on `axis` ("precision", "layout"): its
--- kernel's, or only the default where its shader has no such axis.
function _M.axis_values(shape, axis)
    local d = _M.descriptor(shape)
    return d and kernel.axis_values(d, axis) or { _M.DEFAULTS[axis] }
end

--- The layout a run of `shape` takes by default: the method's, where the
--- shape's kernel has it, else the shape's first.
function _M.layout_for(shape)
    local values = _M.axis_values(shape or _M.default_shape(), "layout")
    for _, v in ipairs(values) do
        if v == _M.default_layout then return v end
    end
    return values[1]
end

--- Whether the direct method runs `request` ({shape, precision}): every
--- shape it has, in each of its precisions.
function _M.serves(request)
    local shape = request.shape or _M.default_shape()
    if not _M.descriptor(shape) then
        return nil, string_format("the direct method has no shape '%s' (%s)", tostring(shape), concat(_M.shapes(), ", "))
    end
    for _, p in ipairs(_M.axis_values(shape, "precision")) do
        if p == (request.precision or _M.DEFAULTS.precision) then return true end
    end
    return nil, string_format("shape %s has no precision '%s'", shape, tostring(request.precision))
end

--- Whether the device reaches a table kept in blocks (by device address, with 64-bit integers).
_M.reaches_blocks = profile.reaches_blocks

--- The shapes that keep a table past one storage buffer in blocks.
function _M.block_shapes()
    local list = {}
    for _, shape in ipairs(_M.shapes()) do
        if _M.descriptor(shape).takes_table_in_blocks then list[#list + 1] = shape end
    end
    return list
end

--- Whether the direct method runs this table here: true, why; or nil, why.
function _M.fits(ctx, e, opts)
    -- The table in f32 (fp16: in halves; fp16-exact keeps both).
    local precision = opts and opts.precision or "fp32"
    local ok, why = device.table_fits(ctx, e, precision == "fp16" and 2 or 4)
    if ok then return true, "the direct method needs nothing beyond the contract" end
    local p = profile.profile(ctx)
    if precision == "fp32" and p and _M.reaches_blocks(p) and #_M.block_shapes() > 0 then
        return true, "only " .. concat(_M.block_shapes(), ", ") .. ", the table in blocks (" .. why .. ")"
    end
    return nil, why
end

--- An upper bound on the loop iterations one thread runs in one dispatch of
--- a direct kernel `d` (the d-loops of every candidate it scores, plus the rest).
local function loop_iterations(d, precision, n, dim, wg, tile)
    local chain = d.candidates_per_thread(n, wg, tile) * (dim + 1)
    if precision == "fp16-exact" then
        -- The filter pass plus, at worst, an exact rescoring of every candidate.
        chain = chain + ceil(n / wg) * (dim + 1)
    end
    return chain + 4 * ceil(dim / wg) + 2 * wg + 64
end

--- Shared memory of a direct kernel: the centroid, and a reduction slot per
--- thread (two for fp16-exact); a descriptor may say otherwise.
local function shared_bytes(d, p)
    if d.shared_bytes then return d.shared_bytes(p) end
    return p.dim * 4 + p.workgroup_size * (p.precision == "fp16-exact" and 16 or 8)
end

--- Threads per sequence: the caller's, or the device's default widened until
--- no thread's loops reach the device's loop cap (past it the device would
--- truncate the scan without a word); fails where no width is enough.
local function workgroup_for(ctx, d, e, opts)
    local info = need(profile.profile(ctx))
    local wg = opts.workgroup_size or device.default_workgroup(info)
    local limit = min(info.max_workgroup_invocations, info.max_workgroup_size)
    if wg > limit then
        fail(string_format("workgroup size %.0f: device '%s' runs at most %d threads a workgroup", wg, info.name, limit))
    end
    local cap = info.loop_cap
    if not cap then return wg end
    local function need_for(w) return loop_iterations(d, opts.precision, e.n, e.dim, w, opts.tile_size) end
    while not opts.workgroup_size and wg < limit and need_for(wg) > cap do wg = min(wg * 2, limit) end
    if need_for(wg) > cap then
        fail(string_format("device '%s' stops shader loops after %d iterations, and this job needs up to %d "
            .. "per thread (shape %s, %d items x %d dims, %d threads%s): use fewer items, a larger tile "
            .. "or another device", info.name, cap, need_for(wg), d.name, e.n, e.dim, wg,
            opts.tile_size and (", tile " .. opts.tile_size) or ""))
    end
    return wg
end

--- Misuse of job's options raises at the caller of job: an unknown shape,
--- precision or layout, or a tiled shape without its tile.
local function check_options(e, opts)
    if type(e) ~= "userdata" then
        error("direct.job: embeddings must be a table loaded with divgpu.load_embeddings", 3)
    end
    local d = _M.descriptor(opts.shape)
    if not d then
        error(string_format("direct.job: unknown shape '%s' (%s)", tostring(opts.shape), concat(_M.shapes(), ", ")), 3)
    end
    for _, axis in ipairs{ "precision", "layout" } do
        local known = false
        for _, v in ipairs(_M.axis_values(d.name, axis)) do known = known or v == opts[axis] end
        if not known then
            error(string_format("direct.job: unknown %s '%s' for shape %s (%s)", axis, tostring(opts[axis]), d.name,
                concat(_M.axis_values(d.name, axis), ", ")), 3)
        end
    end
    local tile = opts.tile_size
    if d.needs_tile and (type(tile) ~= "number" or tile < 1 or tile % 1 ~= 0) then
        error("direct.job: shape '" .. d.name .. "' needs a tile_size >= 1", 3)
    end
    return d
end

local Job = {}
Job.__index = Job

--- The table on the device in the job's layout and precision.
local function upload_table(self, ctx, e)
    local n, dim = e.n, e.dim
    local function arranged(array)
        if self.layout == "columns" then return need(array:transposed(n, dim)) end
        return array
    end
    -- E' holds exactly the half values (fp16): converting back is lossless.
    local list = { self.precision == "fp16" and { "table_buffer", arranged(need(e:to_fp16())), "embeddings fp16" }
                   or { "table_buffer", e, "embeddings", self.layout },
                   { "inv_norm_buffer", need(e:inv_norms()), "inv_norm" } }
    if self.precision == "fp16-exact" then
        list[3] = { "half_buffer", arranged(need(e:to_fp16())), "embeddings fp16 filter" }
    end
    need(device.upload_all(ctx, list, self))
end

local function make_job(ctx, e, d, opts)
    local info = ctx.info
    -- This shape binds the whole table as one buffer.
    need(device.table_fits(ctx, e, opts.precision == "fp16" and 2 or 4))
    if opts.precision ~= "fp32" and not info.storage_buffer_16bit then
        fail(string_format("device '%s' lacks 16-bit storage: precision %s is not available", info.name, opts.precision))
    end
    local wg = workgroup_for(ctx, d, e, opts)
    local shared = shared_bytes(d, { dim = e.dim, workgroup_size = wg, precision = opts.precision })
    local room = need(profile.profile(ctx)).max_shared_memory
    if shared > room then
        fail(string_format("dimension %d needs %d bytes of shared memory with %d threads; device '%s' has %d",
            e.dim, shared, wg, info.name, room))
    end
    local choice = {}
    for axis in pairs(_M.DEFAULTS) do
        if kernel.axis_values(d, axis) then choice[axis] = opts[axis] end
    end
    local self = setmetatable({ ctx = ctx, embeddings = e, n = e.n, dim = e.dim, workgroup_size = wg, shape = d.name,
                                precision = opts.precision, tile_size = opts.tile_size, layout = opts.layout,
                                method = "direct", shader_name = kernel.variant(d, choice) }, Job)
    upload_table(self, ctx, e)
    -- The variant's descriptor: the shape's bindings, plus fp16-exact's.
    local bindings = {}
    for _, name in ipairs(d.bindings) do bindings[#bindings + 1] = name end
    if opts.precision == "fp16-exact" then
        for _, name in ipairs(d.exact_bindings) do bindings[#bindings + 1] = name end
    end
    self.descriptor = setmetatable({ bindings = bindings }, { __index = d })
    local underflow
    underflow, self.underflow_note = device.underflow_defines(ctx, e, opts.exact_underflow)
    local defines = underflow
    if opts.defines then
        defines = {}
        for k, v in pairs(underflow or {}) do defines[k] = v end
        for k, v in pairs(opts.defines) do defines[k] = v end
    end
    local spirv = opts.spirv or need(device.shader(ctx, self.shader_name, defines))
    self.kernel = need(kernel.new(ctx, self.descriptor, { variant = self.shader_name, spirv = spirv, name = opts.name,
                                                         constants = { workgroup_size = wg, max_dim = e.dim } }))
    self.pipeline = self.kernel.pipeline
    return self
end

-- The shapes whose jobs are modules of their own (their descriptors are data).
local OWN_JOBS = { gemm = "divgpu.methods.direct_gemm" }

--- direct.job(ctx, embeddings, opts) -> job, or nil, err. opts:
---   shape        a direct shape (default: the reference, "baseline"); see shapes()
---   precision    "fp32" (default) | "fp16" | "fp16-exact". For "fp16", pass
---                the table E' = (f32)E16 (divgpu.load_fp16 or :fp16_rounded()).
---   tile_size    candidates per tile (shapes whose descriptor needs_tile)
---   layout       "rows" (default, as in embeddings.json) | "columns" (the
---                table transposed on the GPU: coalesced loads, same bits)
---   workgroup_size, spirv (a compiled variant, for experiments and tests), name
---   exact_underflow  false: no exact underflow path (tests; device.underflow_defines)
function _M.job(ctx, e, opts)
    opts = opts or {}
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.shape = o.shape or _M.default_shape()
    -- An axis the request leaves open takes the shape's default (its
    -- kernel's first value), else the method's.
    local shape_d = _M.descriptor(o.shape)
    for axis, default in pairs(_M.DEFAULTS) do
        o[axis] = o[axis] or (shape_d and kernel.axis_values(shape_d, axis) or { default })[1]
    end
    local d = check_options(e, o)
    -- A shape whose job is a module of its own (gemm: its batches differ).
    local own = OWN_JOBS[d.name]
    if own then
        local job, err = require(own).job(ctx, e, o)  -- not a tail call: misuse is raised at our caller
        return job, err
    end
    return catch(make_job, ctx, e, d, o)
end

--- Bytes each sequence of a batch needs in its largest buffer.
function Job:bytes_per_sequence(ring)
    local words = floor((self.n + 31) / 32)
    local most = max(self.dim * 8, words * 4, ring * 4)
    if self.precision == "fp16-exact" then most = max(most, self.n * 4) end
    return most
end

--- The largest batch whose per-batch buffers fit the device's buffer range,
--- capped at `cap` (default 4096 sequences).
function Job:max_batch(ring, cap)
    local range = self.ctx.info.max_storage_buffer_range
    return max(1, min(cap or 4096, floor(range / self:bytes_per_sequence(ring)), self.ctx.info.max_workgroup_count))
end

local Batch = batches.class()

local function make_batch(self, starts, ring, in_flight)
    local count, ctx = #starts, self.ctx
    local b = setmetatable({ job = self, count = count, ring = ring }, Batch)
    b.centroids = need(ctx:upload(need(self.embeddings:gather_f64(starts)), "centroids"))
    b.masks = need(ctx:upload(need(divgpu.jobs.initial_masks(starts, self.n)), "masks"))
    b.winners_buffer = need(ctx:buffer(count * ring * 4, "winners", "host"))
    local buffers = { embeddings = self.table_buffer, inv_norm = self.inv_norm_buffer, centroids = b.centroids,
                      masks = b.masks, winners = b.winners_buffer }
    for name, bytes in pairs(self.descriptor.extra_buffers or {}) do
        buffers[name] = need(ctx:buffer(count * bytes, name))
    end
    if self.precision == "fp16-exact" then
        buffers.embeddings16 = self.half_buffer
        buffers.filter_scores = need(ctx:buffer(count * self.n * 4, "filter scores"))
    end
    b.group = need(self.kernel:bind(buffers))
    need(b:add_recorders(in_flight))
    return b
end

--- job:batch(starts, ring, in_flight) -> batch of #starts sequences, step 0
--- done, with `in_flight` recorders (default 1) to cycle through (starts as
--- a u32 array or a plain list); or nil, err.
Job.batch = batches.maker(make_batch)

--- Records steps first .. first+count-1 on `rec`, each by the kernel's
--- dispatch plan (its descriptor's `record`); called by batch:record.
function Batch:record_steps(first, count, rec)
    local job = self.job
    local plan = { n = job.n, dim = job.dim, ring = self.ring, tile = job.tile_size, groups = self.count,
                   exact = job.precision == "fp16-exact" }
    for t = first, first + count - 1 do
        plan.step = t
        need(job.descriptor.record(job.kernel, rec, self.group, plan))
        -- Orders this step's updates (mask, centroid) before the next step's scan.
        need(rec:barrier())
    end
    return true
end

return _M
