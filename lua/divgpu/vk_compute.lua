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

local floor, min, max = math.floor, math.min, math.max
local error, type, pairs, next, setmetatable, string_format =
    error, type, pairs, next, setmetatable, string.format

local _M = {}

-- Self-test result per context ("hardware" or "emulated" fma), weakly keyed.
local fma_modes = setmetatable({}, { __mode = "k" })

--- How the contract's fma is computed on ctx's device; runs the arithmetic
--- self-test (SPEC section 2) the first time. Raises if the device fails it.
function _M.fma_mode(ctx)
    local mode = fma_modes[ctx]
    if not mode then
        mode = ctx:self_test()
        fma_modes[ctx] = mode
    end
    return mode
end

--- Opens a device (see divgpu.open) and runs the self-test. Raises on failure.
function _M.open(opts)
    local ctx = divgpu.open(opts or {})
    _M.fma_mode(ctx)
    return ctx
end

--- The shipped shader `name` built for ctx's device, with extra `defines`:
--- the embedded SPIR-V when nothing needs changing, else compiled now (with
--- DIVGPU_FMA_EMULATED on devices whose fma() is not fused).
function _M.shader(ctx, name, defines)
    local all = {}
    for k, v in pairs(defines or {}) do all[k] = v end
    if _M.fma_mode(ctx) == "emulated" then all.DIVGPU_FMA_EMULATED = 1 end
    if next(all) == nil then return divgpu.shader(name) end
    return divgpu.compile(divgpu.shader_source(name), { name = name, defines = all })
end

-- Threads per workgroup: a CPU device (lavapipe) gains nothing from wide
-- workgroups and pays per barrier; a GPU wants a few warps per sequence.
local function default_workgroup(info)
    local wanted = info.type == "cpu" and 64 or 256
    return min(wanted, info.max_workgroup_invocations, info.max_workgroup_size)
end

local Job = {}
Job.__index = Job

--- vk.job(ctx, embeddings, opts) -> job. opts: workgroup_size, spirv (a
--- compiled variant of the baseline shader, for experiments and tests).
function _M.job(ctx, embeddings, opts)
    opts = opts or {}
    if type(embeddings) ~= "userdata" then
        error("vk_compute.job: embeddings must be a table loaded with divgpu.load_embeddings", 2)
    end
    local info = ctx.info
    local wg = opts.workgroup_size or default_workgroup(info)
    local shared = embeddings.dim * 4 + wg * 8
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
    }, Job)
    self.table_buffer = ctx:upload(embeddings:values(), "embeddings")
    self.inv_norm_buffer = ctx:upload(embeddings:inv_norms(), "inv_norm")
    self.pipeline = ctx:pipeline{
        spirv = opts.spirv or _M.shader(ctx, "baseline"),
        name = opts.name or "baseline",
        specialization = { [0] = wg, [1] = embeddings.dim },
    }
    return self
end

--- The largest batch whose per-batch buffers fit the device's buffer range,
--- capped at `cap` (default 4096 sequences).
function Job:max_batch(ring, cap)
    local range = self.ctx.info.max_storage_buffer_range
    local words = floor((self.n + 31) / 32)
    local per_sequence = max(self.dim * 8, words * 4, ring * 4)
    return max(1, min(cap or 4096, floor(range / per_sequence), self.ctx.info.max_workgroup_count))
end

local Batch = {}
Batch.__index = Batch

--- job:batch(starts, ring) -> batch of #starts sequences, step 0 done.
function Job:batch(starts, ring)
    local count = #starts
    local ctx = self.ctx
    local b = setmetatable({ job = self, count = count, ring = ring }, Batch)
    b.centroids = ctx:upload(self.embeddings:gather_f64(starts), "centroids")
    b.masks = ctx:upload(divgpu.initial_masks(starts, self.n), "masks")
    b.winners_buffer = ctx:buffer(count * ring * 4, "winners", "host")
    b.group = ctx:bind(self.pipeline, { self.table_buffer, self.inv_norm_buffer, b.centroids, b.masks, b.winners_buffer })
    b.recorder = ctx:recorder()
    return b
end

--- Records steps first .. first+count-1 (one dispatch per step).
function Batch:record(first, count)
    if count > self.ring then
        error(string_format("chunk of %d steps exceeds the winners ring of %d", count, self.ring), 2)
    end
    local job, rec, group = self.job, self.recorder, self.group
    for t = first, first + count - 1 do
        rec:dispatch(group, { job.n, job.dim, t, self.ring }, self.count)
        -- Orders this step's updates (mask, centroid) before the next step's scan.
        rec:barrier()
    end
end

function Batch:submit()
    self.recorder:submit()
end

--- Waits; returns the GPU seconds of the submission (nil without timestamps).
function Batch:wait()
    return self.recorder:wait()
end

function Batch:winners()
    return self.winners_buffer:read("u32")
end

return _M
