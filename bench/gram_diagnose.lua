-- Where gram leaves the contract on a large table (written after the H200's
-- 65,536 x 4,096 x 1,025 gram run gave 0 of 4,096 of PyTorch's sequences,
-- 2026-12-02, while the seed batch gave 3,584 of 3,584). One line a check,
-- each against the CPU mirror (or, for a whole batch, the direct method):
-- table sizes on both sides of the register and shared capacities, the
-- state's placements forced, the batch's size, the instrumented bound, and
-- rows of G' against the host's f64 reference; a twin that must differ.
--   luajit bench/gram_diagnose.lua [N ...]      (default 65536; SMALL=1: sizes for lavapipe)
io.stdout:setvbuf("line")
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"
local gram = require "divgpu.methods.gram"
local testing = require "divgpu.testing"

local small = os.getenv("SMALL") == "1"
local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
print(string.format("device %s, driver %s", ctx.info.name, ctx.info.driver_info))
local DIM = small and 64 or 768

local function range(a, b)
    local t = {}
    for s = a, b - 1 do t[#t + 1] = s end
    return divgpu.array("u32", t)
end

local tuning_keys = require("divgpu.methods").tuning_keys()  -- bench-only switches go in opts.tuning

local function run(e, starts, L, opts)
    local o = { ctx = ctx, embeddings = e, starts = starts, length = L }
    for k, v in pairs(opts) do
        if tuning_keys[k] then
            o.tuning = o.tuning or {}
            o.tuning[k] = v
        else
            o[k] = v
        end
    end
    local t0 = divgpu.clock.now()
    local out, stats = driver.run(o)
    collectgarbage()
    if not out then return nil, stats end
    return out, stats, divgpu.clock.now() - t0
end

-- Sequences of `a` equal to `b`'s, and the first differing (row, step).
local function agreement(a, b, count, L)
    local x, y = a:to_table(), b:to_table()
    local same, first = 0, nil
    for s = 0, count - 1 do
        local ok = true
        for t = 1, L do
            if x[s * L + t] ~= y[s * L + t] then
                ok = false
                first = first or string.format("row %d step %d", s, t - 1)
                break
            end
        end
        if ok then same = same + 1 end
    end
    return same, first
end

local function note(stats)
    local g = stats and stats.gram
    if not g then return "" end
    return string.format("mean window %.3f, %d fallbacks, max ratio %s", g.window_total / g.steps, g.fallbacks,
        g.max_ratio and string.format("%.4f", g.max_ratio) or "-")
end

local function check(name, e, starts, L, opts, reference)
    local out, stats, secs = run(e, starts, L, opts)
    if not out then
        print(string.format("ERROR %s: %s", name, tostring(stats)))
        return
    end
    local count = #starts:to_table()
    local same, first = agreement(out, reference, count, L)
    print(string.format("%s %s: %d of %d identical%s; %s; %.1f s", same == count and "SAME" or "DIFF", name, same, count,
        first and (", first at " .. first) or "", note(stats), secs))
end

local sizes = {}
for _, a in ipairs(arg) do sizes[#sizes + 1] = tonumber(a) end
if #sizes == 0 then sizes = small and { 700 } or { 65536 } end

for _, n in ipairs(sizes) do
    local e = assert(divgpu.synth{ n = n, dim = DIM, clusters = 16, seed = 1 })
    local job = gram.job(ctx, e, {})
    print(string.format("== N %d: %s; G in %d block(s) of %d rows", n, job:placement_note(), #job.g_blocks, job.block_rows))
    -- G' rows at block edges and the ends, against the host's f64 reference.
    for _, r in ipairs{ 0, 1, job.block_rows - 1, job.block_rows, math.floor(n / 2), n - 1 } do
        if r < n then
            local block = job.g_blocks[math.floor(r / job.block_rows) + 1]
            local got = block:read("f32", n, (r % job.block_rows) * n * 4)
            local want = testing.scaled_gram_rows(e, r, 1)
            local bad, where = 0, nil
            for j = 1, n do
                if got[j] ~= want[j] then
                    bad = bad + 1
                    where = where or string.format("G'[%d][%d]: GPU %.9g, host %.9g", r, j - 1, got[j], want[j])
                end
            end
            print(string.format("%s G' row %d: %d of %d entries differ%s", bad == 0 and "SAME" or "DIFF", r, bad, n,
                where and (" (first " .. where .. ")") or ""))
        end
    end
    job = nil
    collectgarbage()  -- G' is 16 GiB at 65,536: one at a time
    local S, L = small and 8 or 16, small and 40 or 129
    local starts = range(0, S)
    local mirror = divgpu.mirror(e, starts, L)
    check("direct (reference shape)", e, starts, L, { method = "direct" }, mirror)
    check("gram, default placement", e, starts, L, { method = "gram" }, mirror)
    check("gram, registers + global (shared_slots 0)", e, starts, L, { method = "gram", shared_slots = 0 }, mirror)
    check("gram, 1 register slot + global", e, starts, L, { method = "gram", reg_slots = 1, shared_slots = 0 }, mirror)
    check("gram, 256 threads", e, starts, L, { method = "gram", workgroup_size = 256 }, mirror)
    check("gram, instrumented bound", e, starts, math.min(L, 40), { method = "gram", gram_defines = { DIVGPU_GRAM_CHECK = 1 } },
        divgpu.mirror(e, starts, math.min(L, 40)))
    -- The twin: the winner pending across a dispatch boundary dropped must differ, or SAME proves nothing.
    local out = assert(run(e, starts, L, { method = "gram", ring = 8, gram_defines = { DIVGPU_GRAM_PERTURB = 2 } }))
    local same = agreement(out, mirror, S, L)
    print(string.format("%s twin: a dropped row at each dispatch boundary: %d of %d identical", same < S and "PASS" or "FAIL",
        same, S))
    -- The batch's size: many sequences in one batch, against the direct method.
    local big_s = small and 64 or 4096
    local many = range(0, big_s)
    local ref = assert(run(e, many, 33, { method = "direct", shape = "gemm" }))
    check(string.format("gram, %d sequences in one batch", big_s), e, many, 33, { method = "gram" }, ref)
    check(string.format("gram, %d sequences, batches of 256", big_s), e, many, 33, { method = "gram", batch = 256 }, ref)
end
