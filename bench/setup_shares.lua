-- Where a run's wall time goes, on one context and on two (the measurement
-- behind concurrent set-up on several devices): for each method, the parts of the run summary's `wall time:`
-- line (making the jobs: tables uploaded, G built; making batches; waiting
-- for the GPUs; recording and reading back), plus what comes before the
-- driver (opening each device: self-tests, loop probe) and one table upload
-- per context on its own.
--
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/?.so;;' luajit bench/setup_shares.lua [N DIM STARTS LENGTH]
--
-- Two contexts are opened on DIVGPU_DEVICE (default 0): on lavapipe both
-- share the machine's CPU cores, so only what waits (not what computes) can
-- overlap there.
local divgpu = require "divgpu"
local device = require "divgpu.device"
local driver = require "divgpu.driver"

local n, dim, starts_count, length = tonumber(arg[1] or 4000), tonumber(arg[2] or 64), tonumber(arg[3] or 32),
    tonumber(arg[4] or 40)
local now = divgpu.clock.now
local which = os.getenv("DIVGPU_DEVICE") or "0"

local opened, open_seconds = {}, {}
for i = 1, 2 do
    local t = now()
    opened[i] = assert(device.open{ device = which })
    open_seconds[i] = now() - t
end
print(string.format("device.open: %.3f s, %.3f s (one after the other, as the CLI does)", open_seconds[1],
    open_seconds[2]))

local e = divgpu.synth{ n = n, dim = dim, clusters = 16, seed = 3 }
local values = assert(e:values())
local t = now()
for i = 1, 2 do assert(opened[i]:upload(values, "table")) end
print(string.format("table upload (%d x %d f32, %.1f MiB): %.3f s for both contexts, one after the other", n, dim,
    n * dim * 4 / 2 ^ 20, now() - t))

local starts = {}
for i = 1, starts_count do starts[i] = i - 1 end
print(string.format("%d sequences x %d steps, %d items, dim %d", starts_count, length, n, dim))
print("method  contexts  wall      jobs (build)       batches  waiting   recording")
for _, method in ipairs{ "direct", "gram", "tensor" } do
    for _, count in ipairs{ 1, 2 } do
        local contexts = { opened[1], count == 2 and opened[2] or nil }
        local _, s = assert(driver.run{ contexts = contexts, embeddings = e, starts = starts, length = length,
                                        method = method })
        local rest = s.wall_seconds - s.jobs_seconds - s.batch_setup_seconds - s.wait_seconds
        local function share(x) return string.format("%6.3f %3.0f%%", x, 100 * x / s.wall_seconds) end
        print(string.format("%-7s %-9d %6.3f  %s (%s)  %s  %s  %s", method, count, s.wall_seconds,
            share(s.jobs_seconds), s.build_seconds and string.format("%5.3f", s.build_seconds) or "  -  ",
            share(s.batch_setup_seconds), share(s.wait_seconds), share(rest)))
    end
end
