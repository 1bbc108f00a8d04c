-- The tensor filter's two products paths on one device (an H200 campaign
-- item): the plain shader and the cooperative-matrix kernel must compute the
-- same integers, so the same approximations rounded down (a_low) and the same
-- tile minima, bit for bit; then whole runs of both, their times, the
-- products' rate in useful int8 multiply-adds (6 slice products a pair), and
-- both outputs against each other.
--   luajit bench/tensor_paths.lua TABLE STARTS LENGTH      (TABLE: a file, or synth:N:D)
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"
local tensor = require "divgpu.methods.tensor"

local spec, range, length = arg[1], arg[2], tonumber(arg[3])
assert(spec and range and length, "usage: tensor_paths.lua TABLE A:B LENGTH")
local e
do
    local n, d = spec:match("^synth:(%d+):(%d+)$")
    e = assert(n and divgpu.synth{ n = tonumber(n), dim = tonumber(d), clusters = 16, seed = 1 } or divgpu.load_embeddings(spec))
end
local a, b = range:match("^(%d+):(%d+)$")
a, b = tonumber(a), tonumber(b)
local starts = divgpu.array("u32", b - a)
for i = 1, b - a do starts[i] = a + i - 1 end
local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
if not tensor.has_coopmat(ctx) then
    print(string.format('{"error": "device %s has no int8 16 x 16 x 32 cooperative matrices"}', ctx.info.name))
    os.exit(1)
end

-- One step's products on both paths, from the same centroids.
local plain, cm = assert(tensor.job(ctx, e)), assert(tensor.job(ctx, e, { coopmat = true }))
local ring = 8
local bp, bc = assert(plain:batch(starts, ring, 1)), assert(cm:batch(starts, ring, 1))
bp:record(1, 1)
bp:submit()
bp:wait()
bc:record(1, 1)
bc:submit()
bc:wait()
local lp, lc = assert(bp.buffers.a_low:read("f32")), assert(bc.buffers.a_low:read("f32"))
local differ = 0
for i = 1, #lp do if lp[i] ~= lc[i] then differ = differ + 1 end end
local wp, wc = bp:winners(), bc:winners()
local winners_differ = 0
for i = 1, #starts do if wp[(i - 1) * ring + 2] ~= wc[(i - 1) * ring + 2] then winners_differ = winners_differ + 1 end end
print(string.format('{"check": "step 1, plain against cooperative matrices", "a_low_values": %d, "a_low_differ": %d, '
    .. '"winners_differ": %d}', #lp, differ, winners_differ))

-- Whole runs.
local results = {}
for _, path in ipairs{ { "plain", plain }, { "coopmat", cm }, { "plain", plain }, { "coopmat", cm } } do
    local out, stats = assert(driver.run{ ctx = ctx, job = path[2], embeddings = e, starts = starts, length = length })
    local macs = 6 * (b - a) * (length - 1) * e.n * e.dim
    print(string.format('{"path": "%s", "gpu_seconds": %.4f, "wall_seconds": %.4f, "useful_int8_macs": %.4g, '
        .. '"mean_window": %.3f, "windows_of_one": %.4f}', path[1], stats.gpu_seconds, stats.wall_seconds, macs,
        stats.tensor.window_total / stats.tensor.steps, stats.tensor.window_ones / stats.tensor.steps))
    results[#results + 1] = out
end
local d = divgpu.first_difference(results[1], results[2], length)
print(string.format('{"outputs": "%s"}', d and ("differ at row " .. d.row .. " step " .. d.step) or "identical"))
