-- Cost per step of the Gram method against N (docs/contract.md#reference-tables, "scaling"):
-- clustered tables of N = 8,192 * 2^k up to MAX_N made in process (no JSON),
-- 4,096 sequences x 256 steps each, G's build timed apart. One JSON line per N.
--   luajit bench/gram_scaling.lua [MAX_N] [SEQUENCES] [STEPS] [MIN_N] [DIM]
--   (MIN_N 8,192 and DIM 768 by default; the smoke test runs 256 x 64 on lavapipe)
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"

local max_n = tonumber(arg[1]) or 131072
local sequences = tonumber(arg[2]) or 4096
local steps = tonumber(arg[3]) or 256
local dim = tonumber(arg[5]) or 768
local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
local n = tonumber(arg[4]) or 8192
while n <= max_n do
    local e = assert(divgpu.synth{ n = n, dim = dim, clusters = 16, seed = 1 })
    local starts = divgpu.array("u32", sequences)
    for i = 1, sequences do starts[i] = i - 1 end
    local _, stats = assert(driver.run{ ctx = ctx, embeddings = e, starts = starts, length = steps + 1, method = "gram" })
    local g = stats.gram
    print(string.format('{"n": %d, "dim": %d, "sequences": %d, "steps": %d, "build_seconds": %.4f, '
        .. '"gpu_seconds": %.4f, "wall_seconds": %.4f, "us_per_step": %.2f, "mean_window": %.4f, '
        .. '"window_ones": %.4f, "window_max": %d, "fallbacks": %d, "batches": %d}',
        n, dim, sequences, steps, stats.build_seconds, stats.gpu_seconds, stats.wall_seconds - stats.build_seconds,
        1e6 * stats.gpu_seconds / steps, g.window_total / g.steps, g.window_ones / g.steps, g.window_max,
        g.fallbacks, stats.batches))
    io.stdout:flush()
    e, starts = nil, nil
    collectgarbage()
    n = n * 2
end
