-- The CPU method's native core (divgpu.cpu, src/cpu/) against the CPU mirror,
-- bit for bit, on real tables (synthetic ones of several sizes and D in
-- {3, 16, 384, 512}, duplicate rows, exact ties, near-ties, the subnormal
-- witness, the shipped poems, the .npy fixture), both of its plans; resumed
-- batches; and the twins that must fail (a bound of zero breaks parity, a
-- bound at 1% breaks the instrumented ratio).
local divgpu = require "divgpu"
local h = require "tests.helpers"

local function every(n, step, limit)
    local starts = {}
    for s = 0, n - 1, step do
        if limit and #starts >= limit then break end
        starts[#starts + 1] = s
    end
    return starts
end

local function assert_identical(e, starts, length, opts)
    local args = { embeddings = e, starts = starts, length = length, threads = 2 }
    for k, v in pairs(opts or {}) do args[k] = v end
    local got, info = assert(divgpu.cpu.run(args))
    local d = divgpu.first_difference(got, divgpu.mirror(e, starts, length), length)
    assert(d == nil, h.describe_difference(d))
    return info
end

local function synth(n, dim, clusters, seed, noise)
    return assert(divgpu.synth{ n = n, dim = dim, clusters = clusters, seed = seed, noise = noise })
end

local TABLES = {
    { "D = 3", function() return synth(200, 3, 8, 31) end, 200 },
    { "D = 16", function() return synth(500, 16, 8, 16) end, 500 },
    { "D = 384, N = 1000 (the ci shape)", function() return synth(1000, 384, 16, 7) end, 64 },
    { "D = 512", function() return synth(600, 512, 12, 5) end, 200 },
    { "near-ties (noise 1e-5)", h.near_ties, 300 },
    { "exact score ties (multiples of 1/8)", function() return h.ties_table(200, 5, 12345) end, 200 },
    { "D = 1", function() return synth(50, 1, 8, 51) end, 50 },
}

describe("divgpu.cpu vs the CPU mirror", function()
    for _, case in ipairs(TABLES) do
        local name, make, length = case[1], case[2], case[3]
        for _, plan in ipairs{ "gram", "direct" } do
            it(name .. ": plan " .. plan, function()
                local e = make()
                local info = assert_identical(e, every(e.n, 7, 64), length, { plan = plan })
                assert.equals(plan, info.plan)
            end)
        end
    end

    it("duplicate rows (each row three times) go to the smallest index", function()
        local base, rows = synth(40, 16, 4, 9), {}
        local values = base:values()
        for j = 0, 39 do
            local row = {}
            for d = 1, 16 do row[d] = ("%.9g"):format(values[j * 16 + d]) end
            for _ = 1, 3 do rows[#rows + 1] = row end
        end
        local e = h.load_rows(rows)
        assert_identical(e, every(120, 1), 120, { plan = "gram" })
    end)

    it("the subnormal witness keeps gradual underflow", function()
        local e = h.load_rows{ { "4.64458274e-39" }, { "4.83849653e-05" }, { "1.19138513e-05" } }
        local got = divgpu.cpu.run{ embeddings = e, starts = { 0 }, length = 3, plan = "gram" }
        assert.same({ 0, 2, 1 }, { got[1], got[2], got[3] })
        assert_identical(e, { 0, 1, 2 }, 3, { plan = "gram" })
    end)

    it("the shipped poems: every 32nd start in full, by auto's plan", function()
        local e = h.shipped()
        local info = assert_identical(e, every(e.n, 32), e.n)
        assert.equals("gram", info.plan)
        assert.is_true(info.singles > 0.9 * info.steps, "most steps need no chain")
    end)

    it("the .npy fixture", function()
        local e = assert(divgpu.load_embeddings("tests/data/npy/labelled.npy"))
        assert_identical(e, every(e.n, 1), e.n, { plan = "gram" })
    end)

    it("a batch resumed from a prefix gives the uninterrupted bytes, in chunks with progress", function()
        local e = synth(400, 48, 8, 4)
        local starts = every(400, 13)
        local whole = divgpu.cpu.run{ embeddings = e, starts = starts, length = 150 }
        local head = divgpu.cpu.run{ embeddings = e, starts = starts, length = 40 }
        local calls = {}
        local rest = divgpu.cpu.run{ embeddings = e, starts = starts, length = 150, prefix = head, from = 40, chunk = 8,
                                     on_progress = function(done, total) calls[#calls + 1] = done .. "/" .. total end }
        assert.is_nil(divgpu.first_difference(rest, whole, 150))
        assert.equals(math.ceil(#starts / 8), #calls)
        assert.equals(#starts .. "/" .. #starts, calls[#calls])
    end)
end)

describe("divgpu.cpu's twins", function()
    it("a bound of zero (trust the smallest approx) gives other sequences than the mirror", function()
        local e = h.ties_table(200, 5, 12345)
        local starts = every(200, 1)
        local twin = divgpu.cpu.run{ embeddings = e, starts = starts, length = 200, plan = "gram", bound_scale = 0 }
        assert(divgpu.first_difference(twin, divgpu.mirror(e, starts, 200), 200),
            "the perturbed filter gave the contract's output: the check is vacuous")
    end)

    it("the bound covers every candidate, and a bound at 1% does not (the instrumented ratio)", function()
        local e = synth(300, 384, 8, 2)
        local starts = every(300, 10)
        local _, info = divgpu.cpu.run{ embeddings = e, starts = starts, length = 300, plan = "gram", instrument = true }
        assert(info.worst_ratio > 0 and info.worst_ratio <= 1, "ratio " .. info.worst_ratio)
        local _, twin = divgpu.cpu.run{ embeddings = e, starts = starts, length = 300, plan = "gram", instrument = true,
                                        bound_scale = 0.01 }
        assert(twin.worst_ratio > 1, "a bound at 1% held everywhere: ratio " .. twin.worst_ratio)
    end)
end)

describe("divgpu.cpu's figures", function()
    it("estimates choose direct for a tiny job and gram for a long one", function()
        local s1, p1 = divgpu.cpu.estimate{ n = 4000, dim = 384, steps = 50 }
        local s2, p2 = divgpu.cpu.estimate{ n = 4000, dim = 384, steps = 512 * 199 }
        assert.equals("direct", p1)
        assert.equals("gram", p2)
        assert.is_true(s1 > 0 and s2 > s1)
    end)

    it("measure_rate gives three positive rates", function()
        local r = divgpu.cpu.measure_rate{ n = 256, dim = 64, threads = 2 }
        assert.is_true(r.build > 0 and r.step > 0 and r.direct > 0)
    end)

    it("misuse raises one line naming the option", function()
        local e = synth(10, 3, 2, 1)
        assert.has_error(function() divgpu.cpu.run{ embeddings = e, starts = { 0 }, length = 11 } end)
        assert.has_error(function() divgpu.cpu.run{ embeddings = e, starts = { 0 }, length = 3, plan = "fast" } end)
        assert.has_error(function() divgpu.cpu.run{ embeddings = e, starts = { 3 }, length = 5, prefix = { 4, 1 }, from = 2 } end)
    end)
end)

describe("the CPU method's rates (divgpu.methods.cpu)", function()
    it("measured once and cached; an older measurement's file (no `measurement`, or another) is measured again", function()
        local cpu = require "divgpu.methods.cpu"
        h.with_fresh_cache_home(function()
            local first = cpu.rates(cpu.host_context(2))
            local path = first.source:match("^a measurement, kept in (.+)$")
            assert(path, first.source)
            assert.truthy(cpu.rates(cpu.host_context(2)).source:find("the cache", 1, true))
            for _, extra in ipairs{ "", ', "measurement": 1', ', "measurement": 2' } do
                local f = assert(io.open(path, "w"))
                f:write('{"build": 7, "step": 7, "direct": 7' .. extra .. "}")
                f:close()
                local r = cpu.rates(cpu.host_context(2))
                if extra:find("2", 1, true) then
                    assert.are.equal(7, r.step)
                else
                    assert.truthy(r.source:find("a measurement", 1, true), extra .. ": " .. r.source)
                    assert(r.step ~= 7, extra)
                end
            end
        end)
    end)
end)
