-- The Gram method (docs/contract.md#gram) vs the CPU mirror, bit for bit; its bound
-- checked directly by the instrumented build; and the twins that must fail.
local divgpu = require "divgpu"
local testing = require "divgpu.testing"
local driver = require "divgpu.driver"
local gram = require "divgpu.methods.gram"
local h = require "tests.helpers"

--- Runs the gram method through the real driver; returns the sequences and stats.
local function run_gram(e, starts, length, opts)
    opts = opts or {}
    local args = { ctx = h.ctx(), embeddings = e, starts = starts, length = length, method = "gram", tuning = {} }
    -- The bench-only switches (where approx lives, G's blocks) go in the tuning table.
    local tuning = require("divgpu.methods").tuning_keys()
    for k, v in pairs(opts) do
        if tuning[k] then args.tuning[k] = v else args[k] = v end
    end
    return driver.run(args)
end

local assert_identical, assert_differs = h.mirror_checks(run_gram, "gram")
local function ties_table(n, dim) return h.ties_table(n, dim, 12345) end
local near_ties = h.near_ties




--- The instrumented build: max |exact - approx| / bound over every candidate-step.
local function max_ratio(e, starts, length, scale, opts)
    local defines = { DIVGPU_GRAM_CHECK = 1, DIVGPU_BOUND_SCALE = scale or "1.0lf" }
    local args = { gram_defines = defines }
    for k, v in pairs(opts or {}) do args[k] = v end
    local _, stats = run_gram(e, starts, length, args)
    return stats.gram.max_ratio
end


local TABLES = {
    { "near-ties (noise 1e-5: windows of dozens)", near_ties, 32, 300 },
    { "ci shape (N = 1000, not a multiple of the workgroup)", function() return divgpu.synth{ n = 1000, dim = 384, clusters = 16, seed = 7 } end, 64, 64 },
    { "N smaller than the workgroup", function() return divgpu.synth{ n = 37, dim = 24, clusters = 8, seed = 61 } end, 37, 37 },
    { "D = 1", function() return divgpu.synth{ n = 50, dim = 1, clusters = 8, seed = 51 } end, 50, 50 },
    { "odd D", function() return divgpu.synth{ n = 300, dim = 7, clusters = 8, seed = 307 } end, 64, 300 },
    { "exact score ties (multiples of 1/8)", function() return ties_table(200, 5) end, 64, 200 },
}

describe("gram method vs CPU mirror", function()
    teardown(h.assert_no_validation_messages)

    describe("on the shipped poems", function()
        local e = h.shipped()

        it("is identical for every sixteenth start and the last, in full (make run's job; each a permutation)", function()
            -- Every start in full took 4 of make test's minutes (2 of lavapipe,
            -- 2 of the CPU mirror on 2 cores), an eighth of them 80 s on a
            -- slower machine; a sixteenth, spread over the table, keeps every
            -- step of the full length and a batch of 133. `make run`
            -- computes the whole job.
            local list = {}
            for s = 0, e.n - 1, 16 do list[#list + 1] = s end
            if list[#list] ~= e.n - 1 then list[#list + 1] = e.n - 1 end
            local starts = divgpu.array("u32", list)
            local gpu, stats = run_gram(e, starts, e.n)
            local d = divgpu.first_difference(gpu, divgpu.mirror(e, starts, e.n), e.n)
            assert(d == nil, h.describe_difference(d))
            assert.is_true(stats.gram.window_ones > 0)
            for _, row in ipairs{ 0, math.floor(#list / 2), #list - 1 } do
                local seen = {}
                for i = 1, e.n do seen[gpu[row * e.n + i]] = true end
                for j = 0, e.n - 1 do assert(seen[j], "item " .. j .. " missing from sequence " .. row) end
            end
        end)

        it("the bound holds on every candidate-step (instrumented), and its 1% twin fails", function()
            local starts = divgpu.array("u32", { 0, 5, 500, e.n - 1 })
            local ratio = max_ratio(e, starts, 32)
            assert(ratio > 0 and ratio <= 1, "max |exact - approx| / bound = " .. ratio)
            local shrunk = max_ratio(e, starts, 32, "0.01lf")
            assert(shrunk > 1, "a bound shrunk to 1% was not caught: ratio " .. shrunk)
        end)
    end)

    describe("on synthetic tables", function()
        for _, c in ipairs(TABLES) do
            local name, make, sequences, length = c[1], c[2], c[3], c[4]
            it(name .. ": identical, and the bound holds", function()
                local e = make()
                local starts = h.range(0, sequences)
                assert_identical(e, starts, length)
                local ratio = max_ratio(e, h.range(0, math.min(sequences, 16)), math.min(length, 48))
                assert(ratio <= 1, "max |exact - approx| / bound = " .. ratio)
            end)
        end

        it("the columns layout is identical too", function()
            local e = divgpu.synth{ n = 300, dim = 7, clusters = 8, seed = 307 }
            assert_identical(e, h.range(0, 64), 300, { layout = "columns" })
        end)

        it("the ci shape's bound twin (scaled to 1%) fails the instrumented check", function()
            local e = divgpu.synth{ n = 1000, dim = 384, clusters = 16, seed = 7 }
            local ratio = max_ratio(e, h.range(0, 8), 32, "0.01lf")
            assert(ratio > 1, "a bound shrunk to 1% was not caught: ratio " .. ratio)
        end)

        it("windows that overflow a capacity of 8 fall back to a full scan: identical", function()
            local stats = assert_identical(near_ties(), h.range(0, 32), 300, { window_capacity = 8 })
            assert(stats.gram.fallbacks > 0, "no fallback ran")
            stats = assert_identical(divgpu.synth{ n = 1000, dim = 384, clusters = 16, seed = 7 }, h.range(0, 16), 200,
                { window_capacity = 1 })
            assert(stats.gram.fallbacks > 0, "no fallback ran on the ci table")
            -- The histogram counts every step once; at capacity 1 every window
            -- but those of one (bin 1) falls back.
            local hist, sum = stats.gram.window_histogram, 0
            for _, c in ipairs(hist) do sum = sum + c end
            assert.are.equal(stats.gram.steps, sum)
            assert.are.equal(stats.gram.window_ones, hist[1])
            assert.are.equal(stats.gram.fallbacks, sum - hist[1])
        end)

        it("twin: an overflowing window cut to its capacity is caught", function()
            assert_differs(near_ties(), h.range(0, 32), 300, { window_capacity = 8, gram_defines = { DIVGPU_GRAM_PERTURB = 3 } })
        end)

        it("chunk boundaries mid-run, two submissions in flight, G in many blocks: identical", function()
            local e = divgpu.synth{ n = 1000, dim = 384, clusters = 16, seed = 7 }
            local starts = divgpu.array("u32", { 999, 0, 500, 1, 2 })
            local stats = assert_identical(e, starts, 1000, { ring = 8, in_flight = 2, batch = 2, g_block_rows = 97 })
            assert(stats.chunks > 2 * 3 * 1, "expected many chunks, got " .. stats.chunks)
        end)

        it("twin: the G row pending across a dispatch boundary dropped is caught", function()
            local e = divgpu.synth{ n = 1000, dim = 384, clusters = 16, seed = 7 }
            assert_differs(e, h.range(0, 8), 100, { ring = 8, in_flight = 2, gram_defines = { DIVGPU_GRAM_PERTURB = 2 } })
        end)

        it("twin: trusting the approximation without exact rescoring is caught", function()
            assert_differs(near_ties(), h.range(0, 32), 300, { gram_defines = { DIVGPU_GRAM_PERTURB = 1 } })
        end)

        it("twin: ties broken towards the larger index in the rescoring are caught", function()
            local e = ties_table(200, 5)
            assert_differs(e, h.range(0, 64), 200, { gram_defines = { DIVGPU_PERTURB = 3 } })
        end)

        it("twin: an unfused chain in the rescoring is caught", function()
            assert_differs(near_ties(), h.range(0, 32), 300, { gram_defines = { DIVGPU_PERTURB = 1 } })
        end)

        it("twin: an unfused chain in the fallback scan is caught", function()
            assert_differs(near_ties(), h.range(0, 32), 300, { window_capacity = 1, gram_defines = { DIVGPU_PERTURB = 1 } })
        end)

        it("twin: a centroid rounded through half precision is caught", function()
            assert_differs(near_ties(), h.range(0, 32), 300, { gram_defines = { DIVGPU_PERTURB = 2 } })
        end)
    end)

    -- Where each sequence's approx lives (gram.comp): the default keeps every
    -- candidate of these tables in registers; small capacities force the
    -- shared page and global memory (N below and above each capacity).
    local PLACEMENTS = {
        { "registers only", {} },
        { "registers and the shared page", { reg_slots = 2 } },
        { "registers, shared and global memory", { reg_slots = 1, shared_slots = 40 } },
        { "registers and global memory", { reg_slots = 1, shared_slots = 0 } },
    }
    local PLACEMENT_TABLES = {
        { "near-ties", near_ties, 16, 300 },
        { "N = 301, not a multiple of the workgroup", function() return divgpu.synth{ n = 301, dim = 24, clusters = 8, seed = 9 } end, 12, 301 },
        { "N = 100, below the forced capacities", function() return divgpu.synth{ n = 100, dim = 16, clusters = 4, seed = 5 } end, 12, 100 },
        -- D = 1: approx equals every score here (max ratio 0), so only the ratio's bound is checked.
        { "D = 1", function() return divgpu.synth{ n = 50, dim = 1, clusters = 8, seed = 51 } end, 50, 50, exact = true },
        { "odd D", function() return divgpu.synth{ n = 300, dim = 7, clusters = 8, seed = 307 } end, 16, 300 },
        { "exact score ties", function() return ties_table(200, 5) end, 32, 200 },
    }
    for _, p in ipairs(PLACEMENTS) do
        local placement, popts = p[1], p[2]
        describe("state in " .. placement, function()
            local function with(extra)
                local o = {}
                for k, v in pairs(popts) do o[k] = v end
                for k, v in pairs(extra or {}) do o[k] = v end
                return o
            end

            it("prints where the state lives", function()
                local job = gram.job(h.ctx(), near_ties(), with{})
                local note = job:placement_note()
                assert.truthy(note:find("in registers"), note)
                if popts.reg_slots == 2 then assert.truthy(note:find("in shared memory") and not note:find("global"), note) end
                if popts.shared_slots == 40 then assert.truthy(note:find("40 in shared memory") and note:find("in global memory"), note) end
                if popts.shared_slots == 0 then assert.truthy(note:find("in global memory") and not note:find("shared"), note) end
            end)

            for _, c in ipairs(PLACEMENT_TABLES) do
                local name, make, sequences, length = c[1], c[2], c[3], c[4]
                it(name .. ": identical; the bound holds" .. (c.exact and "" or ", and its 1% twin fails"), function()
                    local e = make()
                    assert_identical(e, h.range(0, sequences), length, with{})
                    local probe = h.range(0, math.min(sequences, 8))
                    local ratio = max_ratio(e, probe, math.min(length, 40), nil, with{})
                    assert(ratio <= 1, "max |exact - approx| / bound = " .. ratio)
                    if c.exact then return end  -- approx equals every score: nothing for the twin to catch
                    assert(ratio > 0, "no error at all: the check would be vacuous on this table")
                    local shrunk = max_ratio(e, probe, math.min(length, 40), "0.01lf", with{})
                    assert(shrunk > 1, "a bound shrunk to 1% was not caught: ratio " .. shrunk)
                end)
            end

            it("the window fallback and chunk boundaries with two in flight: identical", function()
                local stats = assert_identical(near_ties(), h.range(0, 8), 300,
                    with{ window_capacity = 4, ring = 8, in_flight = 2, g_block_rows = 37 })
                assert(stats.gram.fallbacks > 0, "no fallback ran")
                assert(stats.chunks > 2, "expected many chunks, got " .. stats.chunks)
            end)

            it("twin: the row pending across a dispatch boundary dropped is caught", function()
                assert_differs(near_ties(), h.range(0, 8), 100, with{ ring = 8, in_flight = 2, gram_defines = { DIVGPU_GRAM_PERTURB = 2 } })
            end)

            it("twin: trusting the smallest approx without the window is caught", function()
                assert_differs(near_ties(), h.range(0, 8), 300, with{ gram_defines = { DIVGPU_GRAM_PERTURB = 4 } })
            end)
        end)
    end

    describe("the register page's size", function()
        -- On the H200 a page of 40 slots at 512 threads spilled and chose
        -- other items than the contract; 40 at 256 and 17 at 512 did not.
        -- The budget a GPU's profile gives (src/gpu/profile.rs: a family constant).
        local GPU = { file = 65536, per_thread_max = 255 }
        it("fits the thread's share of the register file", function()
            assert.are.equal(21, gram.reg_max(GPU, 512))
            assert.are.equal(40, gram.reg_max(GPU, 256))
            assert.are.equal(35, gram.reg_max(GPU, 384))
            assert.are.equal(8, gram.reg_max(nil, 512))
            for _, wg in ipairs{ 32, 64, 128, 256, 384, 512, 768, 1024 } do
                local slots = gram.reg_max(GPU, wg)
                assert(slots >= 1 and 3 * slots + 64 <= math.max(67, math.min(255, 65536 / wg)),
                    wg .. " threads: " .. slots .. " slots do not fit")
            end
        end)

        it("twin: a smaller register file in the profile gives a smaller page", function()
            assert.are.equal(40, gram.reg_max(GPU, 256))
            assert.are.equal(21, gram.reg_max({ file = 32768, per_thread_max = 255 }, 256))
        end)
    end)

    describe("G's build", function()
        --- Every row of the job's G' against the host's reference, bit for bit:
        --- nil, or the first difference.
        local function g_difference(job, e)
            local n = e.n
            local want = testing.scaled_gram_rows(e, 0, n)
            for i = 0, n - 1 do
                local block = job.g_blocks[math.floor(i / job.block_rows) + 1]
                local got = block:read("f32", n, (i % job.block_rows) * n * 4)
                for j = 1, n do
                    if got[j] ~= want[i * n + j] then
                        return string.format("G'[%d][%d]: GPU %.9g, host %.9g", i, j - 1, got[j], want[i * n + j])
                    end
                end
            end
        end

        it("equals the f64 reference bit for bit (N not a multiple of the tile, G in many blocks, three tilings, grouped)", function()
            local e = divgpu.synth{ n = 300, dim = 37, clusters = 8, seed = 11 }
            local job = gram.job(h.ctx(), e, { g_block_rows = 97 })
            assert(300 % job.build_tiling.tile ~= 0, "the tile divides N: the edge is not tested")
            local d = g_difference(job, e)
            assert(d == nil, d)
            job = gram.job(h.ctx(), e, { build_tiling = { wx = 4, wy = 8, tm = 4, tn = 8, slice = 4 } })
            assert.are.equal(32, job.build_tiling.tile)
            d = g_difference(job, e)
            assert(d == nil, d)
            -- Tiles in groups of 2 tile-rows (19 tile-rows: a last group of one where a submission holds an odd count).
            job = gram.job(h.ctx(), e, { build_defines = { DIVGPU_BUILD_GROUP = 2 } })
            assert.are.equal(16, job.build_tiling.tile)
            d = g_difference(job, e)
            assert(d == nil, d)
            -- The GPU's tiling, compiled (its microtile in named registers), in groups of 16: the shipped variant.
            job = gram.job(h.ctx(), e, { build_tiling = { wx = 16, wy = 16, tm = 8, tn = 8, slice = 8, compiled = true } })
            assert.are.equal(128, job.build_tiling.tile)
            d = g_difference(job, e)
            assert(d == nil, d)
        end)

        it("twin: the mirror's columns swapped in pairs differ from the reference (both tiling forms)", function()
            local e = divgpu.synth{ n = 300, dim = 37, clusters = 8, seed = 11 }
            for _, tiling in ipairs{ false, { wx = 16, wy = 16, tm = 8, tn = 8, slice = 8, compiled = true } } do
                local job = gram.job(h.ctx(), e, { build_tiling = tiling or nil, build_defines = { DIVGPU_GRAM_BUILD_PERTURB = 2 } })
                local d = g_difference(job, e)
                assert.is_not_nil(d, "the perturbed mirror gave the reference's G'")
                -- Only the mirror (the lower triangle) is wrong.
                local i, j = d:match("^G'%[(%d+)%]%[(%d+)%]")
                assert(tonumber(i) > tonumber(j), d)
            end
        end)

        it("twin: products rounded to f32 before the f64 sum differ from the reference", function()
            local e = divgpu.synth{ n = 300, dim = 37, clusters = 8, seed = 11 }
            local job = gram.job(h.ctx(), e, { build_defines = { DIVGPU_GRAM_BUILD_PERTURB = 1 } })
            assert.is_not_nil(g_difference(job, e), "the perturbed build gave the reference's G'")
        end)

        it("refuses a tiling that is not square or does not split its slices", function()
            local e = divgpu.synth{ n = 30, dim = 3, clusters = 2, seed = 1 }
            local ok, err = pcall(gram.job, h.ctx(), e, { build_tiling = { wx = 8, wy = 8, tm = 2, tn = 4, slice = 8 } })
            assert.is_false(ok)
            assert.truthy(tostring(err):find("tiles must be square"), tostring(err))
            ok, err = pcall(gram.job, h.ctx(), e, { build_tiling = { wx = 8, wy = 8, tm = 1, tn = 1, slice = 3 } })
            assert.is_false(ok)
            assert.truthy(tostring(err):find("does not split"), tostring(err))
        end)

        it("runs in submissions sized to the measured rate, each under a second", function()
            local job = gram.job(h.ctx(), h.shipped(), {})
            local list = job.build_submissions
            assert(#list >= 2, "expected several build submissions, got " .. #list)
            for i, t in ipairs(list) do assert(t < 1.0, "build submission " .. i .. " took " .. t .. " s") end
        end)
    end)

    describe("method choice", function()
        it("auto picks gram when G fits, and direct when memory is short, saying why", function()
            local e = divgpu.synth{ n = 300, dim = 7, clusters = 8, seed = 307 }
            local fits, why = gram.fits(h.ctx(), e, { sequences = 4 })
            assert.is_true(fits, why)
            fits, why = gram.fits(h.ctx(), e, { sequences = 4, memory_budget = 200000 })
            assert.is_nil(fits)
            assert.truthy(why:find("more than 90%% of the 0.2 MiB of device memory given as the budget"), why)
            local out, stats = driver.run{ ctx = h.ctx(), embeddings = e, starts = h.range(0, 4), length = 10,
                                           memory_budget = 200000 }
            assert.are.equal("direct", stats.method)
            -- Auto weighed the methods by cost, and says why gram was not among them.
            assert.truthy(stats.method_reason:find("^estimated direct baseline "), stats.method_reason)
            assert.truthy(stats.method_reason:find("; no gram: " .. why, 1, true), stats.method_reason)
            assert.is_nil(divgpu.first_difference(out, divgpu.mirror(e, h.range(0, 4), 10), 10))
        end)

        it("batches shrink to fit the memory left beside G: identical", function()
            local e = near_ties()
            local fixed, per_sequence = gram.memory_need(e.n, e.dim)
            local budget = (fixed + 8 * (per_sequence + 4 * 100)) / 0.9
            local stats = assert_identical(e, h.range(0, 32), 50, { memory_budget = budget })
            assert(stats.batch_size <= 8 and stats.batches >= 4, "batch of " .. stats.batch_size)
        end)

        it("a table that could overflow is refused by gram with its row, and auto runs direct", function()
            local dir = h.tmpdir()
            local path = dir .. "/huge.json"
            local f = assert(io.open(path, "w"))
            f:write("[[1, 0], [5e17, 5e17], [0, 1]]\n")  -- loads, but N |E_1|^2 > 2^120
            f:close()
            local e = divgpu.load_embeddings(path)
            os.execute("rm -rf " .. dir)
            local fits, why = gram.fits(h.ctx(), e, {})
            assert.is_nil(fits)
            assert.truthy(why:find("^row 1 has norm"), why)
            local job, err = gram.job(h.ctx(), e, {})
            assert.is_nil(job)
            assert.truthy(err:find("the Gram method cannot run here: row 1 has norm", 1, true), err)
            local _, stats = driver.run{ ctx = h.ctx(), embeddings = e, starts = { 0 }, length = 3 }
            assert.are.equal("direct", stats.method)
        end)
    end)
end)
