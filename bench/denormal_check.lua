-- f32 denormals on a real device : the counterexample table of docs/contract.md#subnormals
-- section 2 through every method and shape, with the exact underflow path
-- (must equal the mirror, [0,2,1]) and without it (the twin: on a device that
-- flushes, [0,1,2]); then the shipped poems (which lack the certificate, so
-- their kernels carry the exact path) against the mirror. Prints one line per
-- check and "N failed" last.
--   luajit bench/denormal_check.lua [POEM_STARTS [POEM_LENGTH]]
--   (default 256 starts in full; the smoke test on lavapipe runs 4 x 20)
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"

local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
local info = ctx.info
print(string.format("device %s: denormals %s (preserve %s, flush %s); self-test saw them %s", info.name,
    info.denormals, tostring(info.denorm_preserve_f32), tostring(info.denorm_flush_f32), vk.denormals_seen(ctx)))

local path = os.tmpname()
local f = assert(io.open(path, "w"))
f:write("[[4.64458274e-39],[4.83849653e-05],[1.19138513e-05]]\n")
f:close()
local bad = assert(divgpu.load_embeddings(path))
os.remove(path)
local failed = 0
local function check(name, ok, detail)
    print(string.format("%-60s %s %s", name, ok and "ok" or "FAILED", detail or ""))
    if not ok then failed = failed + 1 end
end
local start0 = divgpu.array("u32", { 0 })
local function seq(r) return string.format("%d,%d,%d", r[1], r[2], r[3]) end
local shapes = { { method = "direct" }, { method = "gram" }, { method = "direct", layout = "columns" },
                 { method = "direct", shape = "tiled", tile_size = 2 },
                 { method = "direct", shape = "tile-dispatch", tile_size = 2 },
                 { method = "direct", precision = "fp16-exact" } }
for _, o in ipairs(shapes) do
    local name = (o.shape or "baseline") .. " " .. o.method .. " " .. (o.layout or "") .. " " .. (o.precision or "")
    local r, stats = assert(driver.run{ ctx = ctx, embeddings = bad, starts = start0, length = 3, method = o.method,
        shape = o.shape, tile_size = o.tile_size, layout = o.layout, precision = o.precision })
    check("counterexample, " .. name, seq(r) == "0,2,1", seq(r) .. " (" .. tostring(stats.underflow) .. ")")
    local twin = assert(driver.run{ ctx = ctx, embeddings = bad, starts = start0, length = 3, method = o.method,
        shape = o.shape, tile_size = o.tile_size, layout = o.layout, precision = o.precision, exact_underflow = false })
    print(string.format("%-60s %s", "  without the exact path (informational)", seq(twin)))
end

local e = assert(divgpu.load_embeddings("assets/embeddings/all-MiniLM-L6-v2/embeddings.json"))
local count = tonumber(arg[1]) or 256
local length = tonumber(arg[2]) or e.n
local starts = divgpu.array("u32", count)
for i = 1, count do starts[i] = i - 1 end
local cpu = divgpu.mirror(e, starts, length)
for _, method in ipairs{ "gram", "direct" } do
    local r, stats = assert(driver.run{ ctx = ctx, embeddings = e, starts = starts, length = length, method = method })
    local d = divgpu.first_difference(r, cpu, length)
    check(string.format("poems, %d starts x %d, %s (%.2f s GPU)", count, length, method, stats.gpu_seconds), not d,
        d and string.format("sequence %d step %d", d.row, d.step) or stats.underflow)
end
print(failed .. " failed")
