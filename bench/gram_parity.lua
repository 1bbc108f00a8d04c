-- Gram-method parity on whatever device the campaign runs on (no busted
-- there): gram vs the CPU mirror on the shipped poems and synthetic tables,
-- the fallback, chunk boundaries, the bound checked by the instrumented build
-- on the seed shape, and the twins that must fail. One line per check; exits
-- non-zero on any failure.
--   luajit bench/gram_parity.lua
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"

local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
print(string.format("device %s, driver %s %s, fma %s", ctx.info.name, ctx.info.driver, ctx.info.driver_info,
    vk.fma_mode(ctx)))
local failures = 0
local function check(name, ok, detail)
    print((ok and "PASS " or "FAIL ") .. name .. (detail and ("  (" .. detail .. ")") or ""))
    if not ok then failures = failures + 1 end
end
local function range(a, b)
    local t = {}
    for s = a, b - 1 do t[#t + 1] = s end
    return divgpu.array("u32", t)
end
local function gram(e, starts, L, o)
    o = o or {}
    o.ctx, o.embeddings, o.starts, o.length, o.method = ctx, e, starts, L, "gram"
    return assert(driver.run(o))
end
local function identical(e, starts, L, o)
    local out, stats = gram(e, starts, L, o)
    return divgpu.first_difference(out, divgpu.mirror(e, starts, L), L) == nil, stats
end
local function windows(stats)
    local g = stats.gram
    return string.format("mean window %.3f, %d fallbacks, largest %d", g.window_total / g.steps, g.fallbacks, g.window_max)
end

local poems = assert(divgpu.load_embeddings("assets/embeddings/all-MiniLM-L6-v2/embeddings.json"))
local ok, stats = identical(poems, range(0, poems.n), 100)
check("poems, every start, 100 steps", ok, windows(stats))
ok, stats = identical(poems, divgpu.array("u32", { 0, 7, poems.n - 1 }), poems.n)
check("poems, 3 starts in full", ok, windows(stats))
local ci = assert(divgpu.synth{ n = 1000, dim = 384, clusters = 16, seed = 7 })
ok, stats = identical(ci, range(0, 64), 1000)
check("ci table, 64 starts in full", ok, windows(stats))
ok, stats = identical(ci, range(0, 64), 300, { window_capacity = 1 })
check("ci table, capacity 1 (fallbacks)", ok and stats.gram.fallbacks > 0, windows(stats))
ok, stats = identical(ci, range(0, 16), 300, { ring = 8, g_block_rows = 97, layout = "columns" })
check("ci table, small chunks, 11 G blocks, columns layout", ok, windows(stats))
ok = identical(ci, range(0, 16), 300, { ring = 8, gram_defines = { DIVGPU_GRAM_PERTURB = 2 } })
check("twin: dropped G row at a dispatch boundary fails", not ok)

local seed = assert(divgpu.synth{ n = 8359, dim = 768, clusters = 16, seed = 1 })
ok, stats = identical(seed, range(0, 8), 8359)
check("seed table, 8 starts in full", ok, windows(stats))
local _, checked = gram(seed, range(0, 16), 200, { gram_defines = { DIVGPU_GRAM_CHECK = 1 } })
local r = checked.gram.max_ratio
check("seed table, bound holds (instrumented, 16 x 200)", r > 0 and r <= 1, string.format("max ratio %.4f", r))
_, checked = gram(seed, range(0, 16), 200, { gram_defines = { DIVGPU_GRAM_CHECK = 1, DIVGPU_BOUND_SCALE = "0.01lf" } })
r = checked.gram.max_ratio
check("twin: bound at 1% fails the instrumented check", r > 1, string.format("max ratio %.4f", r))
_, checked = gram(poems, range(0, 64), poems.n, { gram_defines = { DIVGPU_GRAM_CHECK = 1 } })
r = checked.gram.max_ratio
check("poems, bound holds (instrumented, 64 in full)", r > 0 and r <= 1, string.format("max ratio %.4f", r))

print(string.format("%d check(s) failed", failures))
os.exit(failures == 0 and 0 or 1)
