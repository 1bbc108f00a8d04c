-- vk_compute: the GPU side of one job, on top of the native module.
--
--   local vk = require "divgpu.vk_compute"
--   local ctx = vk.open{ device = 0 }          -- runs the arithmetic self-test once
--   local job = vk.job(ctx, embeddings)        -- uploads the table, builds the pipeline
--   local batch = job:batch(starts, ring)      -- per-batch buffers: centroids, masks, winners
--   batch:record(first_step, count); batch:submit(); local gpu_s = batch:wait()
--   local ring = batch:winners()               -- u32 array [#starts][ring]
--
-- Misuse (wrong argument types, impossible sizes) raises error(msg, 2).

local divgpu = require "divgpu"
local kernel = require "divgpu.kernel"

local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local error, type, pairs, ipairs, next, tostring, setmetatable, string_format =
    error, type, pairs, ipairs, next, tostring, setmetatable, string.format

local _M = {}

-- Self-test results per context ({fma = "hardware" | "emulated", denormals =
-- "kept" | "flushed"}), weakly keyed.
local self_tests = setmetatable({}, { __mode = "k" })

local function self_test(ctx)
    local t = self_tests[ctx]
    if not t then
        local fma, denormals = ctx:self_test()
        t = { fma = fma, denormals = denormals }
        self_tests[ctx] = t
    end
    return t
end

--- How the contract's fma is computed on ctx's device; runs the arithmetic
--- self-test (SPEC section 2) the first time. Raises if the device fails it.
function _M.fma_mode(ctx)
    return self_test(ctx).fma
end

--- "kept" or "flushed": what the self-test's subnormal cases saw.
function _M.denormals_seen(ctx)
    return self_test(ctx).denormals
end

--- The defines a job on table `e` needs for f32 denormals (SPEC section 2):
--- none where the device preserves them (DenormPreserve is requested) or the
--- table has the subnormal certificate (src/contract/subnormal.rs: no f32
--- value of the chain can be subnormal); else DIVGPU_EXACT_UNDERFLOW, which
--- redoes every operation near the underflow range exactly in code
--- (shaders/include/underflow.glsl), so the contract's bytes come out on
--- every device. `exact_underflow = false` turns that off (tests: the twin).
--- Returns defines (or nil) and a line saying which and why.
function _M.underflow_defines(ctx, e, exact_underflow)
    local info = ctx.info
    if not info.denormals_need_certificate then
        return nil, "f32 denormals: preserved by the device (DenormPreserve)"
    end
    local ok, why = e:subnormal_certificate()
    if ok then
        return nil, string_format("f32 denormals: %s on this device, and the table's certificate shows none can occur",
            info.denormals)
    end
    if exact_underflow == false then
        return nil, "f32 denormals: exact underflow turned off (the output may differ from the contract)"
    end
    return { DIVGPU_EXACT_UNDERFLOW = 1 }, string_format("f32 denormals: %s on this device and the table could "
        .. "produce one (%s): operations near 2^-126 are redone exactly in the shaders", info.denormals, why)
end


-- Loop-iteration cap per context (false: none found), weakly keyed.
local loop_caps = setmetatable({}, { __mode = "k" })
local PROBE_ITERATIONS = 1048576

--- The number of iterations after which ctx's device silently stops a shader
--- loop (lavapipe: 65,535), or nil when a loop of 2^20 runs in full.
function _M.loop_cap(ctx)
    local cap = loop_caps[ctx]
    if cap == nil then
        local pipeline = ctx:pipeline{ spirv = divgpu.shader("loop_probe"), name = "loop_probe" }
        local out = ctx:buffer(4, "loop probe", "host")
        local rec = ctx:recorder()
        rec:dispatch(ctx:bind(pipeline, { out }), { PROBE_ITERATIONS }, 1)
        rec:submit()
        rec:wait()
        local ran = out:read("u32")[1]
        cap = ran < PROBE_ITERATIONS and ran or false
        loop_caps[ctx] = cap
    end
    return cap or nil
end

-- Coroutines in which a wait for the GPU may yield instead of blocking (the
-- driver makes several devices' jobs at once), weakly keyed.
local yielding = setmetatable({}, { __mode = "k" })

--- Lets waits in coroutine `co` (vk.await) yield while the GPU works.
function _M.yield_in(co)
    yielding[co] = true
end

--- rec:wait() -> GPU seconds; inside a coroutine given to yield_in, yields
--- until the submission is done, so that whoever resumes it can feed other
--- devices meanwhile (past ctx's timeout the wait reports it, as rec:wait does).
function _M.await(ctx, rec)
    local co = coroutine.running()
    if co and yielding[co] then
        local now = require("divgpu.driver").now
        local t0 = now()
        while not rec:done() do
            if now() - t0 > ctx.timeout then return rec:wait(now() - t0) end
            coroutine.yield()
        end
    end
    return rec:wait()
end

--- Opens a device (see divgpu.open) and runs the self-tests. Raises on failure.
function _M.open(opts)
    local ctx = divgpu.open(opts or {})
    _M.fma_mode(ctx)
    _M.loop_cap(ctx)
    return ctx
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

--- The shipped shader `name` built for ctx's device, with extra `defines`:
--- the embedded SPIR-V when nothing needs changing, else compiled now (with
--- DIVGPU_FMA_EMULATED on devices whose fma() is not fused).
function _M.shader(ctx, name, defines)
    local extra = {}
    for k, v in pairs(defines or {}) do extra[k] = v end
    if _M.fma_mode(ctx) == "emulated" then extra.DIVGPU_FMA_EMULATED = 1 end
    -- denormals = "flush" where the device has no flush mode: in code (flush.glsl).
    if ctx.info.denormals == "flushed (emulated in the shaders)" then extra.DIVGPU_FLUSH_DENORMALS = 1 end
    if next(extra) == nil then return divgpu.shader(name) end
    local source, all = divgpu.shader_source(name)
    for k, v in pairs(extra) do all[k] = v end
    return divgpu.compile(source, { name = name, defines = all })
end

-- Threads per workgroup: a CPU device (lavapipe) gains nothing from wide
-- workgroups and pays per barrier; a GPU wants a few warps per sequence
-- (gram measured 256 best on the H200, against 128 and 512).
function _M.default_workgroup(info)
    local wanted = info.type == "cpu" and 64 or 256
    return min(wanted, info.max_workgroup_invocations, info.max_workgroup_size)
end

local Job = {}
Job.__index = Job

-- The direct method's kernels, one descriptor each (lua/divgpu/kernels/).
_M.SHAPES = { baseline = "divgpu.kernels.baseline", tiled = "divgpu.kernels.tiled",
              ["tile-dispatch"] = "divgpu.kernels.tile_dispatch" }
_M.PRECISIONS = { fp32 = "", fp16 = "-fp16", ["fp16-exact"] = "-fp16-exact" }
_M.LAYOUTS = { rows = "", columns = "-columns" }

--- vk.job(ctx, embeddings, opts) -> job. opts:
---   shape        "baseline" (default) | "tiled" | "tile-dispatch"
---   precision    "fp32" (default) | "fp16" | "fp16-exact". For "fp16", pass
---                the table E' = (f32)E16 (divgpu.load_fp16 or :fp16_rounded()).
---   tile_size    candidates per tile (tiled shapes; required there)
---   layout       "rows" (default, as in embeddings.json) | "columns" (the
---                table transposed on the GPU: coalesced loads, same bits)
---   workgroup_size, spirv (a compiled variant, for experiments and tests)
---   exact_underflow  false: no exact underflow path (tests; see underflow_defines)
function _M.job(ctx, embeddings, opts)
    opts = opts or {}
    if type(embeddings) ~= "userdata" then
        error("vk_compute.job: embeddings must be a table loaded with divgpu.load_embeddings", 2)
    end
    local shape, precision = opts.shape or "baseline", opts.precision or "fp32"
    if not _M.SHAPES[shape] then error("vk_compute.job: unknown shape '" .. tostring(shape) .. "'", 2) end
    local descriptor = require(_M.SHAPES[shape])
    local suffix = _M.PRECISIONS[precision]
    if not suffix then error("vk_compute.job: unknown precision '" .. tostring(precision) .. "'", 2) end
    local layout = opts.layout or "rows"
    local layout_suffix = _M.LAYOUTS[layout]
    if not layout_suffix then error("vk_compute.job: unknown layout '" .. tostring(layout) .. "'", 2) end
    local tile_size = opts.tile_size
    if descriptor.needs_tile and (type(tile_size) ~= "number" or tile_size < 1 or tile_size % 1 ~= 0) then
        error("vk_compute.job: shape '" .. shape .. "' needs a tile_size >= 1", 2)
    end
    local info = ctx.info
    if precision ~= "fp32" and not info.storage_buffer_16bit then
        error(string_format("device '%s' lacks 16-bit storage: precision %s is not available", info.name, precision), 2)
    end
    local wg = opts.workgroup_size or _M.default_workgroup(info)
    local cap = _M.loop_cap(ctx)
    if cap then
        -- Widen the workgroup until no thread's loops reach the device's cap;
        -- past that the device would truncate the scan without a word.
        local limit = min(info.max_workgroup_invocations, info.max_workgroup_size)
        while not opts.workgroup_size and wg < limit
              and loop_iterations(descriptor, precision, embeddings.n, embeddings.dim, wg, tile_size) > cap do
            wg = min(wg * 2, limit)
        end
        local need = loop_iterations(descriptor, precision, embeddings.n, embeddings.dim, wg, tile_size)
        if need > cap then
            error(string_format("device '%s' stops shader loops after %d iterations, and this job needs up to %d "
                .. "per thread (shape %s, %d items x %d dims, %d threads%s): use fewer items, a larger tile "
                .. "or another device", info.name, cap, need, shape, embeddings.n, embeddings.dim, wg,
                tile_size and (", tile " .. tile_size) or ""), 2)
        end
    end
    local shared = embeddings.dim * 4 + wg * (precision == "fp16-exact" and 16 or 8)
    if shared > info.max_shared_memory then
        error(string_format("dimension %d needs %d bytes of shared memory with %d threads; device '%s' has %d",
            embeddings.dim, shared, wg, info.name, info.max_shared_memory), 2)
    end
    local self = setmetatable({
        ctx = ctx,
        embeddings = embeddings,
        n = embeddings.n,
        dim = embeddings.dim,
        workgroup_size = wg,
        shape = shape,
        precision = precision,
        tile_size = tile_size,
        layout = layout,
        shader_name = shape .. suffix .. layout_suffix,
    }, Job)
    local n, dim = embeddings.n, embeddings.dim
    local function arranged(array)
        if layout == "columns" then return array:transposed(n, dim) end
        return array
    end
    if precision == "fp16" then
        -- E' holds exactly the half values: converting back is lossless.
        self.table_buffer = ctx:upload(arranged(embeddings:to_fp16()), "embeddings fp16")
    else
        self.table_buffer = ctx:upload(arranged(embeddings:values()), "embeddings")
    end
    if precision == "fp16-exact" then
        self.half_buffer = ctx:upload(arranged(embeddings:to_fp16()), "embeddings fp16 filter")
    end
    self.inv_norm_buffer = ctx:upload(embeddings:inv_norms(), "inv_norm")
    -- The variant's descriptor: the shape's bindings, plus fp16-exact's.
    local bindings = {}
    for _, name in ipairs(descriptor.bindings) do bindings[#bindings + 1] = name end
    if precision == "fp16-exact" then
        for _, name in ipairs(descriptor.exact_bindings) do bindings[#bindings + 1] = name end
    end
    self.descriptor = setmetatable({ bindings = bindings }, { __index = descriptor })
    local underflow
    underflow, self.underflow_note = _M.underflow_defines(ctx, embeddings, opts.exact_underflow)
    self.kernel = kernel.new(ctx, self.descriptor, {
        variant = self.shader_name, spirv = opts.spirv or _M.shader(ctx, self.shader_name, underflow), name = opts.name,
        constants = { workgroup_size = wg, max_dim = embeddings.dim },
    })
    self.pipeline = self.kernel.pipeline
    return self
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

-- What every method's batch shares (gram's batch inherits it): its
-- recorders, submission, waiting and the winners ring.
local Batch = {}
Batch.__index = Batch
_M.Batch = Batch

--- Gives the batch `in_flight` recorders (default 1) to cycle through.
function Batch:add_recorders(in_flight)
    self.recorders = {}
    for i = 1, in_flight or 1 do self.recorders[i] = self.job.ctx:recorder() end
    self.recorder = self.recorders[1]
end

--- Raises (at the caller's caller) if a chunk of `count` steps cannot fit the ring.
function Batch:check_chunk(count)
    if count > self.ring then
        error(string_format("chunk of %d steps exceeds the winners ring of %d", count, self.ring), 3)
    end
end

--- job:batch(starts, ring, in_flight) -> batch of #starts sequences, step 0
--- done, with `in_flight` recorders (default 1) to cycle through.
function Job:batch(starts, ring, in_flight)
    local count = #starts
    local ctx = self.ctx
    local b = setmetatable({ job = self, count = count, ring = ring }, Batch)
    b.centroids = ctx:upload(self.embeddings:gather_f64(starts), "centroids")
    b.masks = ctx:upload(divgpu.initial_masks(starts, self.n), "masks")
    b.winners_buffer = ctx:buffer(count * ring * 4, "winners", "host")
    local buffers = { embeddings = self.table_buffer, inv_norm = self.inv_norm_buffer, centroids = b.centroids,
                      masks = b.masks, winners = b.winners_buffer }
    if self.descriptor.carry_bytes then
        buffers.carries = ctx:buffer(count * self.descriptor.carry_bytes, "carried best")
    end
    if self.precision == "fp16-exact" then
        buffers.embeddings16 = self.half_buffer
        buffers.filter_scores = ctx:buffer(count * self.n * 4, "filter scores")
    end
    b.group = self.kernel:bind(buffers)
    b:add_recorders(in_flight)
    return b
end

--- Records steps first .. first+count-1 on `rec` (default: the first recorder),
--- each by the kernel's dispatch plan (its descriptor's `record`).
function Batch:record(first, count, rec)
    self:check_chunk(count)
    rec = rec or self.recorder
    local job = self.job
    local plan = { n = job.n, dim = job.dim, ring = self.ring, tile = job.tile_size, groups = self.count,
                   exact = job.precision == "fp16-exact" }
    for t = first, first + count - 1 do
        plan.step = t
        job.descriptor.record(job.kernel, rec, self.group, plan)
        -- Orders this step's updates (mask, centroid) before the next step's scan.
        rec:barrier()
    end
end

function Batch:submit(rec)
    (rec or self.recorder):submit()
end

--- Waits; returns the GPU seconds of the submission (nil without timestamps).
function Batch:wait(rec)
    return (rec or self.recorder):wait()
end

function Batch:winners()
    return self.winners_buffer:read("u32")
end

return _M
