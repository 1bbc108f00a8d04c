-- The GEMM shape's tilings on one device (an H200 campaign item): each
-- tiling's whole run of a short job, in rounds that alternate the tilings,
-- its GPU time and rate in chain fmas, and its output against the shipped
-- tiling's (every tiling computes the contract's chain, so the same bytes),
-- with a twin that must differ.
--   luajit bench/gemm_tune.lua N D SEQUENCES LENGTH [ROUNDS]
-- One JSON line a run, then a line a tiling: its median and its ratio to the
-- shipped tiling's median.
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"
local direct = require "divgpu.methods.direct"
local gemm = require "divgpu.methods.direct_gemm"

local n, dim, sequences, length = tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
assert(n and dim and sequences and length, "usage: gemm_tune.lua N D SEQUENCES LENGTH [ROUNDS]")
local rounds = tonumber(arg[5] or "3")

local shipped = gemm.TILINGS.gpu
local VARIANTS = {
    { name = "shipped 16x16 threads, 8x8 pairs, slice 8", tiling = shipped },
    { name = "slice 16", tiling = { wx = 16, wy = 16, rows = 8, columns = 8, slice = 16 } },
    { name = "slice 4", tiling = { wx = 16, wy = 16, rows = 8, columns = 8, slice = 4 } },
    { name = "16x8 threads (64 sequences x 128 candidates)", tiling = { wx = 16, wy = 8, rows = 8, columns = 8, slice = 8 } },
    { name = "8x16 threads (128 sequences x 64 candidates)", tiling = { wx = 8, wy = 16, rows = 8, columns = 8, slice = 8 } },
    { name = "4x8 pairs (64 x 128)", tiling = { wx = 16, wy = 16, rows = 4, columns = 8, slice = 8 } },
    { name = "8x4 pairs (128 x 64)", tiling = { wx = 16, wy = 16, rows = 8, columns = 4, slice = 8 } },
    { name = "shipped, by columns", tiling = shipped, layout = "columns" },
}

local e = assert(divgpu.synth{ n = n, dim = dim, clusters = 16, seed = 1 })
local starts = divgpu.array("u32", sequences)
for i = 1, sequences do starts[i] = i - 1 end
local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
local fmas = sequences * (length - 1) * n * dim

-- A tiling the device cannot take (shared memory, threads) is left out, saying why.
local jobs, kept = {}, {}
for _, v in ipairs(VARIANTS) do
    local job, err = direct.job(ctx, e, { shape = "gemm", tiling = v.tiling, layout = v.layout or "rows" })
    if job then
        jobs[#jobs + 1], kept[#kept + 1] = job, v
    else
        print(string.format('{"tiling": "%s", "left_out": "%s"}', v.name, tostring(err):gsub('"', "'")))
    end
end
VARIANTS = kept
local times, outputs = {}, {}
for round = 1, rounds do
    for i, v in ipairs(VARIANTS) do
        local out, stats = assert(driver.run{ ctx = ctx, job = jobs[i], embeddings = e, starts = starts, length = length })
        times[i] = times[i] or {}
        times[i][#times[i] + 1] = stats.gpu_seconds
        outputs[i] = outputs[i] or out
        print(string.format('{"round": %d, "tiling": "%s", "gpu_seconds": %.4f, "tflops": %.2f}', round, v.name,
            stats.gpu_seconds, 2 * fmas / stats.gpu_seconds / 1e12))
        io.stdout:flush()
    end
end
-- The twin: the comparison below must see a wrong kernel (its two stages of slices never swap).
do
    local twin = assert(direct.job(ctx, e, { shape = "gemm", layout = "rows", defines = { DIVGPU_GEMM_PERTURB = 3 } }))
    local out = assert(driver.run{ ctx = ctx, job = twin, embeddings = e, starts = starts, length = length })
    local d = divgpu.first_difference(outputs[1], out, length)
    print(string.format('{"twin": "the stages never swap (must differ)", "output": "%s"}',
        d and ("differs at row " .. d.row .. " step " .. d.step) or "IDENTICAL: the comparison sees nothing"))
end

local function median(t)
    local s = {}
    for k, x in ipairs(t) do s[k] = x end
    table.sort(s)
    return s[math.floor((#s + 1) / 2)]
end
local base = median(times[1])
for i, v in ipairs(VARIANTS) do
    local d = divgpu.first_difference(outputs[1], outputs[i], length)
    print(string.format('{"tiling": "%s", "median_gpu_seconds": %.4f, "against_shipped": %.4f, "tflops": %.2f, '
        .. '"output": "%s"}', v.name, median(times[i]), median(times[i]) / base, 2 * fmas / median(times[i]) / 1e12,
        d and ("differs at row " .. d.row .. " step " .. d.step) or "identical to the shipped tiling's"))
end
