-- FP16 vs FP32 (docs/contract.md#fp16-storage): runs the same starts under both contracts and
-- reports the share of identical sequences and where the first divergence
-- happens.   luajit bench/fp16_divergence.lua EMBEDDINGS.json SEQUENCES STEPS [layout]
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"

local path, count, steps, layout = arg[1], tonumber(arg[2]), tonumber(arg[3]), arg[4] or "rows"
local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
local e = assert(divgpu.load_embeddings(path))
count = math.min(count, e.n)
local length = math.min(steps + 1, e.n)
local starts = divgpu.array("u32", count)
for i = 1, count do starts[i] = i - 1 end
local t0 = divgpu.clock.now()
local a = assert(driver.run{ ctx = ctx, embeddings = e, starts = starts, length = length, layout = layout })
local b = assert(driver.run{ ctx = ctx, embeddings = e:fp16_rounded(), starts = starts, length = length,
                      precision = "fp16", layout = layout })
local firsts, same = {}, 0
for s = 0, count - 1 do
    local first
    for t = 1, length - 1 do
        if a[s * length + t + 1] ~= b[s * length + t + 1] then first = t break end
    end
    if first then firsts[#firsts + 1] = first else same = same + 1 end
end
table.sort(firsts)
local function q(p) return #firsts > 0 and firsts[math.max(1, math.ceil(p * #firsts))] or "-" end
print(string.format("%s on %s: %d sequences x %d steps (%.1f s): %d identical (%.1f%%); first divergence step: "
    .. "min %s, p10 %s, p25 %s, median %s, p75 %s, p90 %s, max %s",
    path, ctx.info.name, count, length - 1, divgpu.clock.now() - t0, same, 100 * same / count,
    q(0), q(0.1), q(0.25), q(0.5), q(0.75), q(0.9), q(1)))
