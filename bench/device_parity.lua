-- Parity on whatever device the campaign runs on (no busted there): every
-- shape x in-flight x exact precision vs the CPU mirror, fp16 vs the mirror
-- on the half-rounded table, and the twins that must fail. Prints one line
-- per check and exits non-zero on any failure.
--   luajit bench/device_parity.lua [shipped embeddings.json]
-- SMALL=1: the quick mode (tests/peers_bench_smoke.sh on lavapipe, the
-- campaigns' SMALL=1 dry runs): a synthetic stand-in for the poems
-- (160 x 64) and the ci table at 120 x 64, 16 starts x 32 steps, tiles
-- inside and past its end; every check and twin the same, in seconds.
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"

local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
print(string.format("device %s, driver %s %s, fma %s", ctx.info.name, ctx.info.driver, ctx.info.driver_info,
    vk.fma_mode(ctx)))
local failures = 0
local function check(name, ok)
    print((ok and "PASS " or "FAIL ") .. name)
    if not ok then failures = failures + 1 end
end
local function range(a, b)
    local t = {}
    for s = a, b - 1 do t[#t + 1] = s end
    return divgpu.array("u32", t)
end
local function run(e, starts, L, o)
    o.ctx, o.embeddings, o.starts, o.length = ctx, e, starts, L
    o.method = o.method or "direct"
    return (assert(driver.run(o)))
end

local small = os.getenv("SMALL") == "1"
local poems = assert(small and divgpu.synth{ n = 160, dim = 64, clusters = 8, seed = 5 }
    or divgpu.load_embeddings(arg[1] or "assets/embeddings/all-MiniLM-L6-v2/embeddings.json"))
local POEMS = small and "stand-in for the poems" or "poems"
local all = range(0, poems.n)
local ref100 = divgpu.mirror(poems, all, 100)
check(POEMS .. ": baseline fp32, every sequence, 100 steps",
    divgpu.first_difference(run(poems, all, 100, {}), ref100, 100) == nil)
local few = {}
for _, s in ipairs{ 0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377 } do
    if s < poems.n - 2 then few[#few + 1] = s end
end
few[#few + 1], few[#few + 2] = poems.n - 2, poems.n - 1
local count = #few
few = divgpu.array("u32", few)
check(string.format("%s: baseline fp32, %d sequences in full", POEMS, count),
    divgpu.first_difference(run(poems, few, poems.n, {}), divgpu.mirror(poems, few, poems.n), poems.n) == nil)
-- The twins run on near-ties: on the 2,103 poems neither an unfused chain
-- nor a half-rounded centroid changed a winner (H200: every start x 100
-- steps, and 16 full orderings), so a twin there would prove nothing.
local near = assert(divgpu.synth{ n = 300, dim = 64, clusters = 8, seed = 3, noise = 1e-5 })
local near_starts = range(0, 32)
local near_ref = divgpu.mirror(near, near_starts, 300)
check("near-ties: baseline fp32 identical",
    divgpu.first_difference(run(near, near_starts, 300, {}), near_ref, 300) == nil)
for perturb, what in ipairs{ "an unfused chain", "a centroid rounded through half precision" } do
    check("twin: " .. what .. " is caught on near-ties", divgpu.first_difference(
        run(near, near_starts, 300, { spirv = assert(vk.shader(ctx, "baseline", { DIVGPU_PERTURB = perturb })) }),
        near_ref, 300) ~= nil)
end
-- Exact ties everywhere (D = 1): the tie rule's twin.
local flat = assert(divgpu.synth{ n = 50, dim = 1, clusters = 8, seed = 51 })
local flat_starts = range(0, 50)
check("twin: ties broken towards the larger index are caught (D = 1)", divgpu.first_difference(
    run(flat, flat_starts, 50, { spirv = assert(vk.shader(ctx, "baseline", { DIVGPU_PERTURB = 3 })) }),
    divgpu.mirror(flat, flat_starts, 50), 50) ~= nil)
check("twin: fp16-exact with a shrunk bound is caught (" .. POEMS .. ")", divgpu.first_difference(
    run(poems, all, 100, { precision = "fp16-exact",
                           spirv = assert(vk.shader(ctx, "baseline-fp16-exact", { DIVGPU_BOUND_SCALE = "1e-9" })) }),
    ref100, 100) ~= nil)

local ci = assert(divgpu.synth{ n = small and 120 or 1000, dim = small and 64 or 384, clusters = 16, seed = 6 })
local s64, CI_L = range(0, small and 16 or 64), small and 32 or 64
local ref = divgpu.mirror(ci, s64, CI_L)
local TILES = small and { 30, 41, 1, 121, 600 } or { 250, 333, 1, 1001, 5000 }
for _, shape in ipairs{ "baseline", "tiled", "tile-dispatch" } do
    for _, precision in ipairs{ "fp32", "fp16-exact" } do
        for _, k in ipairs{ 1, 2 } do
            for _, tile in ipairs(shape == "baseline" and { 0 } or TILES) do
                local out = run(ci, s64, CI_L, { shape = shape, precision = precision, in_flight = k,
                                               tile_size = tile > 0 and tile or nil })
                check(string.format("ci: %s %s k%d tile %d", shape, precision, k, tile),
                    divgpu.first_difference(out, ref, CI_L) == nil)
            end
        end
    end
end
for _, shape in ipairs{ "baseline", "tiled", "tile-dispatch" } do
    for _, precision in ipairs{ "fp32", "fp16-exact" } do
        local out = run(ci, s64, CI_L, { shape = shape, precision = precision, in_flight = 2, tile_size = TILES[2],
                                       layout = "columns" })
        check(string.format("ci: %s %s columns", shape, precision), divgpu.first_difference(out, ref, CI_L) == nil)
    end
end
local rounded = ci:fp16_rounded()
local ref16 = divgpu.mirror(rounded, s64, CI_L)
for _, shape in ipairs{ "baseline", "tiled", "tile-dispatch" } do
    check("ci: fp16 " .. shape .. " vs mirror on the half-rounded table", divgpu.first_difference(
        run(rounded, s64, CI_L, { shape = shape, precision = "fp16", tile_size = small and 40 or 300 }), ref16, CI_L) == nil)
end
print(string.format("%d failed", failures))
os.exit(failures == 0 and 0 or 1)
