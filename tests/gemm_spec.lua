-- The direct method as an exact GEMM (shape gemm: shaders/gemm.comp,
-- lua/divgpu/methods/direct_gemm.lua), run through the driver as a user
-- runs it, against the CPU mirror, bit for bit, and the twins that must fail.
local divgpu = require "divgpu"
local driver = require "divgpu.driver"
local direct = require "divgpu.methods.direct"
local h = require "tests.helpers"

local function run(e, starts, length, opts, run_opts)
    opts = opts or {}
    local args = { ctx = h.ctx(), embeddings = e, starts = starts, length = length, method = "direct", shape = "gemm",
                   layout = opts.layout, direct_defines = opts.defines, tuning = { gemm_tiling = opts.tiling } }
    -- The bench-only switches (the tiling, the table's blocks) go in the tuning table.
    for k, v in pairs(run_opts or {}) do
        if k == "gemm_table_block_items" then args.tuning[k] = v else args[k] = v end
    end
    local out, stats = assert(driver.run(args))
    return out, stats
end

local assert_identical, assert_differs = h.mirror_checks(run)
local function ties_table(n, dim) return h.ties_table(n, dim, 4242) end
local near_ties = h.near_ties





describe("gemm (the direct method as an exact GEMM) vs CPU mirror", function()
    teardown(h.assert_no_validation_messages)

    it("the first 120 shipped poems, 24 starts in full, both layouts", function()
        local e = h.shipped_head(120)
        assert_identical(e, h.range(0, 24), 120, { layout = "columns" })
        assert_identical(e, h.range(96, 120), 120, { layout = "rows" })
    end)

    it("N, D and the sequences not multiples of any tile (301 x 37, 19 sequences)", function()
        local e = assert(divgpu.synth{ n = 301, dim = 37, clusters = 8, seed = 9 })
        assert_identical(e, h.range(0, 19), 301)
    end)

    it("D = 1, odd D, a tiling of other sizes", function()
        assert_identical(assert(divgpu.synth{ n = 50, dim = 1, clusters = 8, seed = 51 }), h.range(0, 50), 50)
        assert_identical(assert(divgpu.synth{ n = 200, dim = 7, clusters = 8, seed = 307 }), h.range(0, 33), 200,
            { tiling = { wx = 4, wy = 8, rows = 4, columns = 1, slice = 4 } })
    end)

    it("the shipped GPU tiling (128 x 128 pairs a tile, vectors of four) on both layouts, and its stages", function()
        local gpu = require("divgpu.methods.direct_gemm").TILINGS.gpu
        -- Three candidate tiles (the last short), two sequence tiles (the last short), D past a whole slice.
        local e = assert(divgpu.synth{ n = 301, dim = 37, clusters = 8, seed = 9 })
        for _, layout in ipairs{ "columns", "rows" } do
            assert_identical(e, h.range(0, 150), 10, { tiling = gpu, layout = layout })
        end
        -- Twin: the two stages never swap, so each slice after the first is computed from the first's.
        assert_differs(e, h.range(0, 150), 10, { tiling = gpu, defines = { DIVGPU_GEMM_PERTURB = 3 } })
    end)

    it("more workgroups than a dispatch dimension allows (lavapipe: 65,535), folded into two rows", function()
        -- 65,550 tiles of 4 candidates; the last item, the only negative one, is each start's first pick.
        local tiling = { wx = 4, wy = 8, rows = 4, columns = 1, slice = 4 }
        local n = 65550 * tiling.wx * tiling.columns
        assert(h.ctx().info.max_workgroup_count < 65550, "the device's workgroup count needs no fold")
        local rows = {}
        for j = 1, n - 1 do rows[j] = { 1 } end
        rows[n] = { -1 }
        local e = h.load_rows(rows)
        assert_identical(e, h.range(0, 3), 4, { tiling = tiling })
        -- Twin: the fold's second row never runs, so the last tiles are never scored.
        assert_differs(e, h.range(0, 3), 4, { tiling = tiling, defines = { DIVGPU_GEMM_PERTURB = 4 } })
    end)

    it("exact score ties go to the smallest index", function()
        assert_identical(ties_table(200, 5), h.range(0, 40), 200)
    end)

    it("near-ties, and chunks with two submissions in flight", function()
        local stats = assert_identical(near_ties(), h.range(0, 32), 300, nil, { ring = 8, in_flight = 2 })
        assert(stats.chunks > 2, "expected many chunks, got " .. stats.chunks)
    end)

    it("the table in blocks by device address (a table past one buffer), both layouts, blocks not of whole tiles", function()
        local e = assert(divgpu.synth{ n = 1000, dim = 37, clusters = 5, seed = 9 })
        local starts = divgpu.array("u32", { 0, 5, 999, 17, 400, 301, 700 })
        for _, layout in ipairs{ "columns", "rows" } do
            for _, block in ipairs{ 300, 16, 1000 } do
                assert_identical(e, starts, 60, { layout = layout }, { gemm_table_block_items = block })
            end
            -- Twin: the last (short) block read at the one before it.
            assert_differs(e, starts, 60, { layout = layout, defines = { DIVGPU_GEMM_PERTURB = 2 } },
                { gemm_table_block_items = 300 })
        end
    end)

    it("twin: an unfused chain is caught", function()
        assert_differs(near_ties(), h.range(0, 32), 300, { defines = { DIVGPU_PERTURB = 1 } })
    end)

    it("twin: a centroid rounded through half precision is caught", function()
        assert_differs(near_ties(), h.range(0, 32), 300, { defines = { DIVGPU_PERTURB = 2 } })
    end)

    it("twin: ties broken towards the larger index are caught", function()
        assert_differs(ties_table(200, 5), h.range(0, 40), 200, { defines = { DIVGPU_PERTURB = 3 } })
    end)

    it("twin: a tile of candidates forgotten in the append is caught", function()
        assert_differs(assert(divgpu.synth{ n = 301, dim = 37, clusters = 8, seed = 9 }), h.range(0, 19), 301,
            { defines = { DIVGPU_GEMM_PERTURB = 1 } })
    end)

    it("refuses a tiling the shader cannot take", function()
        local line = debug.getinfo(1, "l").currentline + 1
        local ok, err = pcall(function() local j = direct.job(h.ctx(), near_ties(), { shape = "gemm", tiling = { wx = 8, wy = 8, rows = 3, columns = 2, slice = 8 } }) return j end)
        assert.is_false(ok)
        assert.truthy(tostring(err):find("must be 1, 2, 4 or 8"), tostring(err))
        assert.truthy(tostring(err):find("gemm_spec.lua:" .. line, 1, true), "raised elsewhere than at the call: " .. tostring(err))
    end)
end)
