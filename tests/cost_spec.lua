-- The cost model --method auto weighs (lua/divgpu/cost.lua) on simulated
-- devices and budgets, and the rates it is fed (lua/divgpu/rates.lua): measured
-- on lavapipe, cached, and a table where the cache cannot be written.
local cost = require "divgpu.cost"
local h = require "tests.helpers"

local H200 = { name = "a simulated H200", memory = 140e9, fits = { gram = true }, why_not = {},
               rates = { f32_chain = 32e12, f64_fma = 16.7e12, copy = 4.0e12, dispatch = 4e-6, source = "a test" } }
local LAVAPIPE = { name = "a simulated lavapipe", memory = 24e9, fits = { gram = true }, why_not = {},
                   rates = { f32_chain = 1e8, f64_fma = 1e9, copy = 1e10, dispatch = 2e-4, source = "a test" } }

-- The registry's methods weigh themselves (their estimate(job, device)).
local function choose(j, device) return cost.choose(j, device, require("divgpu.methods").modules()) end

local function job(n, dim, sequences, length) return { n = n, dim = dim, sequences = sequences, length = length } end

describe("cost: auto's choice by estimated seconds", function()
    it("2 sequences x 3 steps on a 20,000 x 4 table run direct, not a 1.5 GiB G", function()
        for _, device in ipairs{ H200, LAVAPIPE } do
            local c = choose(job(20000, 4, 2, 3), device)
            assert.are.equal("direct", c.method, c.why)
            assert(c.estimates.gram > c.estimates[c.shape], c.why)
        end
    end)

    it("the seed batch in full runs gram; its estimates are printed for every method", function()
        local c = choose(job(8359, 768, 3584, 8359), H200)
        assert.are.equal("gram", c.method, c.why)
        for _, k in ipairs{ "gram", "gemm", "baseline" } do assert.truthy(c.why:find(k .. " "), c.why) end
    end)

    it("past the memory G needs, direct, and it says why", function()
        local c = choose(job(262144, 768, 4096, 257), H200)
        assert.are.equal("direct", c.method)
        assert.are.equal("gemm", c.shape)
        assert.truthy(c.why:find("no gram: G %(262144 x 262144 f32%)"), c.why)
    end)

    it("where the tensor filter can run at a tensor-core rate, 262,144 items pick it; without that rate, gemm", function()
        local tc = { name = "a simulated H200 with tensor cores", memory = 140e9, fits = { gram = true, tensor = true }, why_not = {},
                     rates = { f32_chain = 32e12, f64_fma = 16.7e12, copy = 4.0e12, dispatch = 4e-6, int8_mac = 6.39e14 } }
        local c = choose(job(262144, 768, 4096, 257), tc)
        assert.are.equal("tensor", c.method, c.why)
        assert(c.estimates.tensor < c.estimates.gemm, c.why)
        -- A small job there stays direct: cutting the table's slices is paid too.
        local small = choose(job(20000, 4, 2, 3), tc)
        assert.are.equal("direct", small.method, small.why)
        assert(small.estimates.tensor > small.estimates[small.shape], small.why)
        tc.rates.int8_mac = nil
        assert.are.equal("direct", choose(job(262144, 768, 4096, 257), tc).method)
    end)

    it("one sequence on a device whose GEMM tile holds 128 runs baseline: the tile's empty rows are paid", function()
        local tiled = { name = "a simulated H200", memory = 140e9, fits = {}, why_not = {}, rates = H200.rates, gemm_rows = 128 }
        local c = choose(job(65536, 768, 1, 201), tiled)
        assert.are.equal("baseline", c.shape, c.why)
        assert.are.equal("gemm", choose(job(65536, 768, 4096, 201), tiled).shape)
    end)

    it("twin: with a tile of one row the GEMM shape would win the one sequence", function()
        local untiled = { name = "untiled", memory = 140e9, fits = {}, why_not = {}, rates = H200.rates, gemm_rows = 1 }
        assert.are.equal("gemm", choose(job(65536, 768, 1, 201), untiled).shape)
    end)

    it("a budget too small for G, or a device without gram, runs direct", function()
        local small = { name = "small", memory = 1e8, fits = { gram = true }, why_not = {}, rates = H200.rates }
        assert.are.equal("direct", choose(job(8359, 768, 3584, 8359), small).method)
        local nogram = { name = "no bda", memory = 140e9, fits = {}, why_not = { gram = "lacks bufferDeviceAddress" }, rates = H200.rates }
        local c = choose(job(8359, 768, 3584, 8359), nogram)
        assert.are.equal("direct", c.method)
        assert.truthy(c.why:find("lacks bufferDeviceAddress"), c.why)
    end)

    it("twin: with G's build made free the tiny job would pick gram, so the build's cost decides", function()
        local free = { name = "free build", memory = 140e9, fits = { gram = true }, why_not = {},
                       rates = { f32_chain = 32e12, f64_fma = 1e30, copy = 1e30, dispatch = 0, source = "a test" } }
        assert.are.equal("gram", choose(job(20000, 4, 2, 3), free).method)
    end)
end)

describe("cost: a CPU device (lavapipe) achieves its own fractions of its rates", function()
    local function on(device_type)
        local r = {}
        for k, v in pairs(LAVAPIPE.rates) do r[k] = v end
        r.device_type = device_type
        return r
    end
    local j = job(2103, 384, 64, 2103)

    it("the Gram step costs CPU_DEVICE's bytes a candidate-step there", function()
        local gpu = cost.gram_seconds(j, on(nil)) - cost.gram_build_seconds(j, on(nil))
        local cpu = cost.gram_seconds(j, on("cpu")) - cost.gram_build_seconds(j, on("cpu"))
        local steps = j.sequences * (j.length - 1) * j.n / LAVAPIPE.rates.copy
        local extra = steps * (cost.CPU_DEVICE.gram_bytes_per_candidate_step - cost.GRAM_BYTES_PER_CANDIDATE_STEP)
        assert.is_true(math.abs(cpu - gpu - extra) < 1e-9 * cpu, cpu .. " " .. gpu)
    end)

    it("G's build at CPU_DEVICE's fraction of the f64 rate there (G's write at the copy rate on both)", function()
        local write = j.n * j.n * 4 / LAVAPIPE.rates.copy
        local gpu = cost.gram_build_seconds(j, on(nil)) - write
        local cpu = cost.gram_build_seconds(j, on("cpu")) - write
        local ratio = cost.EFFICIENCY.gram_build / cost.CPU_DEVICE.efficiency.gram_build
        assert.is_true(math.abs(cpu / gpu - ratio) < 1e-9, cpu .. " " .. gpu)
    end)

    it("the direct shapes at CPU_DEVICE's efficiencies there", function()
        for _, shape in ipairs{ "gemm", "baseline" } do
            local gpu, cpu = cost.direct_seconds(j, on(nil), shape), cost.direct_seconds(j, on("cpu"), shape)
            local ratio = cost.EFFICIENCY[shape] / cost.CPU_DEVICE.efficiency[shape]
            local dispatches = (j.length - 1) * (shape == "gemm" and 2 or 1) * LAVAPIPE.rates.dispatch
            assert.is_true(math.abs((cpu - dispatches) / (gpu - dispatches) - ratio) < 1e-9, shape)
        end
    end)

    it("twin: a GPU's rates keep the GPU's figures", function()
        assert.are.equal(cost.gram_seconds(j, on("discrete")), cost.gram_seconds(j, on(nil)))
    end)
end)

describe("rates: measured once per device and driver, cached, or a table", function()
    local rates = require "divgpu.rates"
    local function fresh_context()
        -- A context of its own (divgpu.device_profile keeps each context's rates).
        return require("divgpu.vk_compute").open{ device = os.getenv("DIVGPU_DEVICE") }
    end

    it("measures on lavapipe and keeps the figures in the cache folder", function()
        h.with_fresh_cache_home(function(dir)
            local r = rates.of(fresh_context())
            for _, k in ipairs{ "f32_chain", "f64_fma", "copy", "dispatch" } do assert(r[k] > 0, k) end
            assert.truthy(r.source:find("a measurement, kept in " .. dir, 1, true), r.source)
            local again = rates.of(fresh_context())
            assert.truthy(again.source:find("the cache", 1, true), again.source)
            assert(math.abs(again.f32_chain / r.f32_chain - 1) < 1e-12, "the cache kept another rate")
        end)
    end)

    it("a cache folder that cannot be written gives the table, saying so", function()
        h.with_fresh_cache_home(function(dir)
            local blocker = dir .. "/a-file"
            local f = assert(io.open(blocker, "w"))
            f:close()
            -- A folder under a regular file cannot be made, even by root.
            h.with_cache_home(blocker, function()
                local r = rates.of(fresh_context())
                assert.truthy(r.source:find("the table of known devices", 1, true), r.source)
                assert.truthy(r.source:find("cannot be written", 1, true), r.source)
                assert.are.equal(rates.KNOWN.llvmpipe.f32_chain, r.f32_chain)
            end)
        end)
    end)

    -- The cache file of ctx's device under the cache home `dir`, its folder made.
    local function cache_file(dir, ctx)
        os.execute("mkdir -p '" .. dir .. "/divgpu/rates'")
        return string.format("%s/divgpu/rates/%s-%s.json", dir, ctx.info.device_uuid, tostring(ctx.info.driver_version))
    end

    it("twin: a cache entry that is not rates is measured again", function()
        h.with_fresh_cache_home(function(dir)
            local ctx = fresh_context()
            local f = assert(io.open(cache_file(dir, ctx), "w"))
            f:write('{"f32_chain": -1}')
            f:close()
            local r = rates.of(ctx)
            assert.truthy(r.source:find("a measurement", 1, true), r.source)
            assert(r.f32_chain > 0)
        end)
    end)

    it("twin: an older measurement's figures (no `measurement`, or another) are measured again; this one's are read", function()
        h.with_fresh_cache_home(function(dir)
            local ctx = fresh_context()
            local path = cache_file(dir, ctx)
            local figures = '"f32_chain": 7, "f64_fma": 7, "copy": 7, "dispatch": 7'
            for _, extra in ipairs{ "", ', "measurement": 1', ', "measurement": 2' } do
                local f = assert(io.open(path, "w"))
                f:write("{" .. figures .. extra .. "}")
                f:close()
                local r = rates.of(ctx)
                if extra:find("2", 1, true) then
                    assert.are.equal(7, r.f32_chain)
                    assert.truthy(r.source:find("the cache", 1, true), r.source)
                else
                    assert.truthy(r.source:find("a measurement", 1, true), extra .. ": " .. r.source)
                    assert(r.f32_chain ~= 7, extra)
                end
            end
        end)
    end)
end)
