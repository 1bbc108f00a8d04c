-- The Gram method's kernels under several configurations, in one process and
-- one call: G's build (tiling) and the step kernel (threads, registers, the
-- shared page, and the floor variant), each a JSON line with its GPU time,
-- rates, placement, windows and the driver's register counts. Every exact
-- configuration's output is compared with the first one's, bit for bit (a
-- configuration that differs is reported as such, never timed as a result).
--   luajit bench/gram_tune.lua TABLE STARTS LENGTH CONFIG...
-- TABLE: an embeddings file, or synth:N:D (clustered, seed 1, made in memory).
-- STARTS: A:B. CONFIG: comma-separated key=value, e.g.
--   wg=256,reg=40        threads per sequence, registers a thread (approx values)
--   shared=0             the shared page's size at most (0: none)
--   floor                the floor variant (DIVGPU_GRAM_FLOOR: timing only)
--   build=16x16x8x8x8    G's build tiling wx x wy x tm x tn x slice
--   compiled             ... as compile-time constants (defines) instead of specialization constants
--   pad=4                G's build panels padded by 4 doubles a slice row (DIVGPU_BUILD_PAD)
--   group=16             G's build tiles in groups of 16 tile-rows (DIVGPU_BUILD_GROUP)
--   checkg               compare rows of G' with the host's reference first
--   repeat=3             runs of this configuration (the best is reported too)
local divgpu = require "divgpu"
local testing = require "divgpu.testing"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"
local gram = require "divgpu.methods.gram"

local function usage() error("usage: gram_tune.lua TABLE A:B LENGTH CONFIG...", 0) end
local spec, range, length_arg = arg[1], arg[2], arg[3]
if not (spec and range and length_arg) then usage() end

local function load_table(s)
    local n, d = s:match("^synth:(%d+):(%d+)$")
    if n then return assert(divgpu.synth{ n = tonumber(n), dim = tonumber(d), clusters = 16, seed = 1 }) end
    return assert(divgpu.load_embeddings(s))
end

local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
local t_load = divgpu.clock.now()
local e = load_table(spec)
local load_seconds = divgpu.clock.now() - t_load
local a, b = range:match("^(%d+):(%d+)$")
a, b = tonumber(a), tonumber(b)
local starts = divgpu.array("u32", b - a)
for i = 1, b - a do starts[i] = a + i - 1 end
local length = tonumber(length_arg)

local function parse(config)
    local c = { name = config }
    for item in config:gmatch("[^,]+") do
        local k, v = item:match("^([%w_]+)=(.+)$")
        if not k then c[item] = true else c[k] = v end
    end
    return c
end

local function statistics(pipeline)
    local parts = {}
    for _, s in ipairs(pipeline:statistics()) do parts[#parts + 1] = s.name .. "=" .. s.value end
    return table.concat(parts, "; ")
end

local function emit(fields)
    local keys, parts = {}, {}
    for k in pairs(fields) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
        local v = fields[k]
        parts[#parts + 1] = string.format("%q: %s", k, type(v) == "number" and string.format("%.6g", v)
            or type(v) == "boolean" and tostring(v) or string.format("%q", tostring(v)))
    end
    print("{" .. table.concat(parts, ", ") .. "}")
    io.stdout:flush()
end

--- Compares rows of the job's G' with the host reference, bit for bit.
local function check_g(job)
    local n = e.n
    for _, i in ipairs{ 0, 1, math.floor(n / 2), n - 1 } do
        local block = job.g_blocks[math.floor(i / job.block_rows) + 1]
        local got = block:read("f32", n, (i % job.block_rows) * n * 4)
        local want = testing.scaled_gram_rows(e, i, 1)
        for j = 1, n do
            if got[j] ~= want[j] then return string.format("row %d column %d: GPU %.9g, host %.9g", i, j - 1, got[j], want[j]) end
        end
    end
    return "identical"
end

local reference
for k = 4, #arg do
    local c = parse(arg[k])
    local opts = { ctx = ctx, embeddings = e, starts = starts, length = length, method = "gram",
                   workgroup_size = tonumber(c.wg), reg_slots = tonumber(c.reg), shared_slots = tonumber(c.shared),
                   gram_defines = c.floor and { DIVGPU_GRAM_FLOOR = 1 } or nil,
                   build_defines = { DIVGPU_BUILD_PAD = c.pad and tonumber(c.pad) or nil,
                                     DIVGPU_BUILD_GROUP = c.group and tonumber(c.group) or nil } }
    if next(opts.build_defines) == nil then opts.build_defines = nil end
    if c.build then
        local wx, wy, tm, tn, slice = c.build:match("^(%d+)x(%d+)x(%d+)x(%d+)x(%d+)$")
        opts.build_tiling = { wx = tonumber(wx), wy = tonumber(wy), tm = tonumber(tm), tn = tonumber(tn), slice = tonumber(slice),
                              compiled = c.compiled }
    end
    for r = 1, tonumber(c["repeat"] or 1) do
        local ok, err = pcall(function()
            local t0 = divgpu.clock.now()
            local job = assert(gram.job(ctx, e, { workgroup_size = opts.workgroup_size, reg_slots = opts.reg_slots,
                                           shared_slots = opts.shared_slots, build_tiling = opts.build_tiling,
                                           defines = opts.gram_defines, build_defines = opts.build_defines }))
            local job_seconds = divgpu.clock.now() - t0
            local g_check = c.checkg and check_g(job) or nil
            local out, stats = assert(driver.run{ ctx = ctx, job = job, embeddings = e, starts = starts, length = length })
            local parity = "floor (not exact)"
            if not c.floor then
                if not reference then
                    reference = out
                    parity = "reference"
                else
                    local d = divgpu.first_difference(out, reference, length)
                    parity = d and string.format("DIFFERS: row %d step %d", d.row, d.step) or "identical"
                end
            end
            local g = stats.gram
            local visits = (b - a) * (length - 1) * e.n  -- G' entries each step loads (masked ones too)
            emit{ config = c.name, run = r, n = e.n, dim = e.dim, sequences = b - a, length = length,
                  table_load_seconds = load_seconds, job_seconds = job_seconds,
                  build_gpu_seconds = job.build_gpu_seconds, build_tflops = job.build_flops / job.build_gpu_seconds / 1e12,
                  build_tiling = string.format("%dx%dx%dx%dx%d", job.build_tiling.wx, job.build_tiling.wy,
                      job.build_tiling.tm, job.build_tiling.tn, job.build_tiling.slice),
                  steps_gpu_seconds = stats.gpu_seconds, wall_seconds = stats.wall_seconds,
                  g_tb_per_s = visits * 4 / stats.gpu_seconds / 1e12, placement = job:placement_note(),
                  mean_window = g.window_total / g.steps, window_ones = g.window_ones / g.steps,
                  window_max = g.window_max, fallbacks = g.fallbacks, parity = parity, g_check = g_check,
                  step_statistics = statistics(job.kernel.pipeline),
                  build_statistics = statistics(job.builder.pipeline) }
        end)
        if not ok then emit{ config = c.name, run = r, error = tostring(err):match("^[^\n]*") } end
        collectgarbage()
    end
end
