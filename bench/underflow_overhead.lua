-- What the exact underflow path costs: the shipped poems (no
-- subnormal certificate, so the path is on by default where denormals are
-- not guaranteed) with and without it, alternating pairs, order reversed
-- every other pair; outputs must be identical (no subnormal arises on them).
--   luajit bench/underflow_overhead.lua [PAIRS] [DIRECT_STARTS]
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"

local pairs_n = tonumber(arg[1]) or 12
local direct_starts = tonumber(arg[2]) or 512
local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
local e = assert(divgpu.load_embeddings("assets/embeddings/all-MiniLM-L6-v2/embeddings.json"))
local function starts(k)
    local s = divgpu.array("u32", k)
    for i = 1, k do s[i] = i - 1 end
    return s
end
for _, m in ipairs{ { method = "gram", starts = starts(e.n) }, { method = "direct", starts = starts(direct_starts) } } do
    local function once(exact)
        local r, stats = assert(driver.run{ ctx = ctx, embeddings = e, starts = m.starts, length = e.n, method = m.method,
                                     exact_underflow = exact })
        return r, stats.gpu_seconds
    end
    local ref = once(true)
    once(false)  -- warm-up of both variants
    local ratios, won = {}, 0
    for k = 1, pairs_n do
        local order = k % 2 == 1 and { true, false } or { false, true }
        local t = {}
        for _, exact in ipairs(order) do
            local r, s = once(exact)
            local d = divgpu.first_difference(r, ref, e.n)
            assert(not d, "outputs differ")
            t[exact] = s
        end
        ratios[k] = t[true] / t[false]
        if ratios[k] < 1 then won = won + 1 end
        print(string.format("%s pair %d: exact %.4f s, plain %.4f s, ratio %.4f", m.method, k, t[true], t[false], ratios[k]))
    end
    table.sort(ratios)
    local n = #ratios
    local median = n % 2 == 1 and ratios[(n + 1) / 2] or (ratios[n / 2] + ratios[n / 2 + 1]) / 2
    print(string.format("%s (%d sequences x %d steps): exact/plain GPU time median %.4f (%.4f..%.4f), exact faster in %d/%d",
        m.method, #m.starts, e.n, median, ratios[1], ratios[n], won, pairs_n))
end
