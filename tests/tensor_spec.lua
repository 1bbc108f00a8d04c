-- The tensor filter (method tensor: shaders/tensor.comp, the proof
-- shaders/tensor.md), run through the driver as a user runs it, against the
-- CPU mirror, bit for bit; its bound checked directly by the
-- instrumented build; the twins that must fail.
local divgpu = require "divgpu"
local driver = require "divgpu.driver"
local tensor = require "divgpu.methods.tensor"
local h = require "tests.helpers"

local function run(e, starts, length, opts, run_opts)
    opts = opts or {}
    local args = { ctx = h.ctx(), embeddings = e, starts = starts, length = length, method = "tensor",
                   tensor_defines = opts.defines, window_capacity = opts.window_capacity }
    for k, v in pairs(run_opts or {}) do args[k] = v end
    return assert(driver.run(args))
end

local assert_identical, assert_differs = h.mirror_checks(run, "tensor")
local function ties_table(n, dim) return h.ties_table(n, dim, 777) end
local near_ties = h.near_ties



--- The instrumented build: max |exact - approx| / bound over every candidate-step.
local function max_ratio(e, starts, length, scale)
    local _, stats = run(e, starts, length, { defines = { DIVGPU_TENSOR_CHECK = 1, DIVGPU_BOUND_SCALE = scale or "1.0lf" } })
    return stats.tensor.max_ratio
end



local TABLES = {
    { "near-ties (windows of dozens)", near_ties, 16, 300 },
    { "N = 301, D = 37: not multiples of any tile", function() return assert(divgpu.synth{ n = 301, dim = 37, clusters = 8, seed = 9 }) end, 19, 301 },
    { "odd D", function() return assert(divgpu.synth{ n = 200, dim = 7, clusters = 8, seed = 307 }) end, 24, 200 },
    { "the first 120 shipped poems (not certified: the exact underflow path where denormals are not kept)",
      function() return h.shipped_head(120) end, 12, 120 },
}

describe("tensor filter vs CPU mirror", function()
    teardown(h.assert_no_validation_messages)

    for _, c in ipairs(TABLES) do
        local name, make, sequences, length = c[1], c[2], c[3], c[4]
        it(name .. ": identical; the bound holds, and its 1% twin fails", function()
            local e = make()
            assert_identical(e, h.range(0, sequences), length)
            local probe = h.range(0, math.min(sequences, 8))
            local ratio = max_ratio(e, probe, math.min(length, 40))
            assert(ratio > 0 and ratio <= 1, "max |exact - approx| / bound = " .. ratio)
            local shrunk = max_ratio(e, probe, math.min(length, 40), "0.01lf")
            assert(shrunk > 1, "a bound shrunk to 1% was not caught: ratio " .. shrunk)
        end)
    end

    it("D = 1 (a centroid of zero takes the exact scan) and exact score ties: identical", function()
        local stats = assert_identical(assert(divgpu.synth{ n = 50, dim = 1, clusters = 8, seed = 51 }), h.range(0, 50), 50)
        assert(stats.tensor.fallbacks > 0, "no step took the exact scan")
        assert_identical(ties_table(200, 5), h.range(0, 40), 200)
    end)

    it("windows over a capacity of 4 fall back to a full scan, two submissions in flight: identical", function()
        local stats = assert_identical(near_ties(), h.range(0, 8), 300, { window_capacity = 4 }, { ring = 8, in_flight = 2 })
        assert(stats.tensor.fallbacks > 0, "no fallback ran")
        assert(stats.chunks > 2, "expected many chunks, got " .. stats.chunks)
    end)

    it("windows spanning many tiles (tiles of 8 candidates) are collected from every reaching tile: identical", function()
        local stats = assert_identical(near_ties(), h.range(0, 16), 300, nil, { workgroup_size = 8 })
        assert(stats.tensor.window_total > 2 * stats.tensor.steps, "windows too small to span tiles")
    end)

    it("twin: the window collected from the least approximation's tile alone is caught", function()
        assert_differs(near_ties(), h.range(0, 16), 300, { defines = { DIVGPU_TENSOR_PERTURB = 3 } }, { workgroup_size = 8 })
    end)

    it("twin: trusting the approximation without exact rescoring is caught", function()
        assert_differs(near_ties(), h.range(0, 16), 300, { defines = { DIVGPU_TENSOR_PERTURB = 1 } })
    end)

    it("twin: p_2 q_1 dropped from the products (A_3) is caught", function()
        assert_differs(near_ties(), h.range(0, 16), 300, { defines = { DIVGPU_TENSOR_PERTURB = 2 } })
    end)

    it("twin: ties broken towards the larger index are caught", function()
        assert_differs(ties_table(200, 5), h.range(0, 40), 200, { defines = { DIVGPU_PERTURB = 3 } })
    end)

    it("twin: an unfused chain in the rescoring is caught", function()
        assert_differs(near_ties(), h.range(0, 16), 300, { defines = { DIVGPU_PERTURB = 1 } })
    end)
end)

describe("tensor filter on tensor cores", function()
    it("a device without int8 cooperative matrices refuses the coopmat path in one line (lavapipe has none)", function()
        assert.is_false(tensor.has_coopmat(h.ctx()))
        local ok, err = pcall(tensor.job, h.ctx(), assert(divgpu.synth{ n = 40, dim = 8, clusters = 4, seed = 2 }), { coopmat = true })
        assert.is_false(ok)
        assert.truthy(tostring(err):find("has no int8 16 x 16 x 32 cooperative matrices"), tostring(err))
    end)

    it("auto does not weigh the filter on a device without them, and says why", function()
        local e = assert(divgpu.synth{ n = 40, dim = 8, clusters = 4, seed = 2 })
        local ok, why = tensor.may_fit(h.ctx(), e)
        assert.is_nil(ok)
        assert.truthy(why:find("has no int8 16 x 16 x 32 cooperative matrices", 1, true), why)
    end)

    -- A device with the matrices but a build without their kernel (Debian 12's
    -- shaderc): auto must not weigh the coopmat path, nor a job default to it
    -- (on an H200 such a build died in device.shader). lavapipe has no
    -- matrices, so the device's answer is replaced for the first check; the
    -- twin, lavapipe's own answer, gets the device's reason.
    it("a device with the matrices and a build without tensor_coopmat: the build's reason, or none where it is built", function()
        local has = tensor.has_coopmat
        tensor.has_coopmat = function() return true end
        local ok, why = pcall(tensor.coopmat_unavailable, h.ctx())
        tensor.has_coopmat = has
        assert(ok, why)
        if divgpu.shaders.not_built().tensor_coopmat then
            assert.truthy(why and why:find("this build has no tensor_coopmat kernel", 1, true), tostring(why))
        else
            assert.is_nil(why)
        end
        local twin = tensor.coopmat_unavailable(h.ctx())
        assert.truthy(twin and twin:find("has no int8 16 x 16 x 32 cooperative matrices", 1, true), tostring(twin))
    end)

    it("by default a job takes tensor cores only where the device has them, and says which", function()
        local e = assert(divgpu.synth{ n = 40, dim = 8, clusters = 4, seed = 2 })
        local job = assert(tensor.job(h.ctx(), e))
        assert.is_nil(job.coopmat)
        assert.truthy(job.products_note:find("plain shader code (device ", 1, true),
            job.products_note)
        local asked = assert(tensor.job(h.ctx(), e, { coopmat = false }))
        assert.truthy(asked.products_note:find("plain shader code", 1, true), asked.products_note)
    end)

    it("the shipped tensor_coopmat SPIR-V is COOPMAT_TILING's (the shader's defaults and the Lua tiling agree)", function()
        -- A build whose shaderc lacks cooperative matrices (Debian 12's) leaves the
        -- kernel out and says why (kernel_spec checks the same); nothing to compare then.
        local missing = divgpu.shaders.not_built().tensor_coopmat
        if missing then
            assert.truthy(missing:find("GL_KHR_cooperative_matrix", 1, true), missing)
            return
        end
        local t, src = tensor.COOPMAT_TILING, divgpu.shaders.source("tensor_coopmat")
        local function words(defines)
            return divgpu.shaders.compile(src, { name = "tensor_coopmat", defines = defines }):to_array()
        end
        local function same(a, b)
            if #a ~= #b then return false end
            for i = 1, #a do if a[i] ~= b[i] then return false end end
            return true
        end
        local shipped = divgpu.shaders.get("tensor_coopmat"):to_array()
        assert.is_true(same(shipped, words{ CM_WR = t.wr, CM_WC = t.wc, CM_FR = t.fr, CM_FC = t.fc, CM_KSTEPS = t.k,
                                            CM_STAGES = t.stages }))
        -- Twin: another tiling compiles to other words.
        assert.is_false(same(shipped, words{ CM_WR = 2, CM_WC = 2, CM_FR = 2, CM_FC = 2, CM_KSTEPS = 1, CM_STAGES = 2 }))
    end)

    it("FUSED_SUMS_MAX_DIM is the largest D whose 128 A_2 + A_3 cannot wrap int32 (tensor.md section 2)", function()
        local per_dim = 128 * 127 * 127 + 2 * 127 * 64  -- |q_1| <= 127, |q_2| <= 64
        assert.is_true(tensor.FUSED_SUMS_MAX_DIM * per_dim < 2 ^ 31)
        -- Twin: one dimension more could wrap.
        assert.is_false((tensor.FUSED_SUMS_MAX_DIM + 1) * per_dim < 2 ^ 31)
    end)

    it("coopmat_shared_bytes gives what the H200's driver reported for four tilings (2026-12-04)", function()
        -- Pipeline statistics' "Shared Memory Size" in bench/results/2026-12-04_h200_ff5b76d/tensor_paths.jsonl.
        assert.are.equal(45056, tensor.coopmat_shared_bytes({ wr = 4, wc = 2, fr = 2, fc = 4, k = 2, stages = 1 }, 2))
        assert.are.equal(26112, tensor.coopmat_shared_bytes({ wr = 2, wc = 2, fr = 2, fc = 2, k = 1, stages = 2 }, 2))
        assert.are.equal(30720 + 2560, tensor.coopmat_shared_bytes({ wr = 4, wc = 2, fr = 2, fc = 2, k = 2, stages = 1 }, 2))
        -- One stage of one step, 16 subgroups on 128 x 128: the combine's scratch (32 KB) is larger than the stage (24 KB).
        assert.are.equal(32768 + 4096, tensor.coopmat_shared_bytes({ wr = 4, wc = 4, fr = 2, fc = 2, k = 1, stages = 1 }, 2))
        -- Two stages of one step on 128 x 128 no longer fit the H200's 48 KB.
        assert.is_true(tensor.coopmat_shared_bytes({ wr = 4, wc = 2, fr = 2, fc = 4, k = 1, stages = 2 }, 2) > 49152)
    end)

    it("a products variant on the plain path is refused in one line", function()
        local e = assert(divgpu.synth{ n = 40, dim = 8, clusters = 4, seed = 2 })
        local batch = assert(assert(tensor.job(h.ctx(), e)):batch(h.range(0, 2), 4, 1))
        local ok, err = batch:record_products(assert(h.ctx():recorder()), {})
        assert.is_nil(ok)
        assert.truthy(tostring(err):find("a products variant needs the tensor-core path", 1, true), tostring(err))
    end)
end)
