-- Subnormals (docs/contract.md#subnormals): a device that does not preserve f32
-- denormals still gives the contract's bytes. A table with the certificate of
-- src/contract/subnormal.rs runs the plain kernels (nothing can be
-- subnormal); any other runs them with DIVGPU_EXACT_UNDERFLOW, which redoes
-- operations near 2^-126 exactly (shaders/include/underflow.glsl). lavapipe
-- does not promise preservation (shaderDenormPreserveFloat32 = false); a
-- context opened with denormals = "flush" makes its shaders flush
-- (shaders/include/flush.glsl: lavapipe has no DenormFlushToZero mode),
-- imitating the H200.
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"
local h = require "tests.helpers"

-- The table measured on the H200: [0,1,2] there, [0,2,1] in the mirror.
local COUNTEREXAMPLE = { { "4.64458274e-39" }, { "4.83849653e-05" }, { "1.19138513e-05" } }

local function run(ctx, e, starts, length, opts)
    opts = opts or {}
    return driver.run{ ctx = ctx, embeddings = e, starts = starts, length = length, method = opts.method or "direct",
                       precision = opts.precision, spirv = opts.spirv, exact_underflow = opts.exact_underflow,
                       shape = opts.shape, tile_size = opts.tile_size, layout = opts.layout }
end

local function sequence(result, length)
    local s = {}
    for i = 1, length do s[i] = result[i] end
    return table.concat(s, ",")
end

local flush_ctx
local function flushing()
    if not flush_ctx then flush_ctx = vk.open{ device = os.getenv("DIVGPU_DEVICE"), denormals = "flush" } end
    return flush_ctx
end

describe("subnormals", function()
    local bad = h.load_rows(COUNTEREXAMPLE)
    local start0 = h.range(0, 1)

    it("the certificate names the first value at fault, and passes a table without tiny values", function()
        local ok, why = bad:subnormal_certificate()
        assert.is_nil(ok)
        assert.truthy(why:find("^row 0, column 0: value 4%.64458"), why)
        -- MiniLM's dimension 127 holds values near 1e-33 in every row.
        ok, why = h.shipped():subnormal_certificate()
        assert.is_nil(ok)
        assert.truthy(why:find("^row 0, column 127:"), why)
        assert.is_true((divgpu.synth{ n = 300, dim = 64, clusters = 8, seed = 3, noise = 1e-5 }:subnormal_certificate()))
    end)

    it("the mirror orders the counterexample [0,2,1]", function()
        assert.are.equal("0,2,1", sequence(divgpu.mirror(bad, start0, 3), 3))
    end)

    it("the counterexample is identical to the mirror on lavapipe, every shape and method", function()
        assert.is_true(h.ctx().info.denormals_need_certificate)
        for _, o in ipairs{ { method = "direct" }, { method = "gram" }, { method = "direct", layout = "columns" },
                            { method = "direct", shape = "tiled", tile_size = 2 },
                            { method = "direct", shape = "tile-dispatch", tile_size = 2 },
                            { method = "direct", precision = "fp16-exact" },
                            { method = "direct", shape = "gemm" }, { method = "tensor" } } do
            assert.are.equal("0,2,1", sequence(run(h.ctx(), bad, start0, 3, o), 3))
        end
    end)

    describe("on a context forced to flush f32 denormals (the H200's behaviour)", function()
        it("the self-test detects the flushing", function()
            local ctx = flushing()
            assert.truthy(ctx.info.denormals:find("^flushed"), ctx.info.denormals)
            assert.are.equal("flushed", vk.denormals_seen(ctx))
            assert.are.equal("kept", vk.denormals_seen(h.ctx()))
        end)

        it("the counterexample gives the contract's bytes with every shape and method", function()
            for _, o in ipairs{ { method = "direct" }, { method = "gram" }, { method = "direct", layout = "columns" },
                                { method = "direct", shape = "tiled", tile_size = 2 },
                                { method = "direct", shape = "tile-dispatch", tile_size = 2 },
                                { method = "direct", precision = "fp16-exact" },
                            { method = "direct", shape = "gemm" }, { method = "tensor" } } do
                assert.are.equal("0,2,1", sequence(run(flushing(), bad, start0, 3, o), 3))
            end
        end)

        it("twin: without the exact underflow path the flushed run gives the H200's [0,1,2]", function()
            for _, o in ipairs{ { method = "direct" }, { method = "gram" }, { method = "direct", shape = "gemm" },
                                { method = "tensor" } } do
                o.exact_underflow = false
                local gpu = run(flushing(), bad, start0, 3, o)
                assert.are.equal("0,1,2", sequence(gpu, 3), o.method .. (o.shape and " " .. o.shape or ""))
            end
        end)

        -- G's entries may flush on such a device: gram's bound carries G_ETA = 2^-126 for them; the
        -- tensor filter's slices and bound are f64 (shaders/tensor.md section 1).
        for _, m in ipairs{ { "gram", "gram_defines", "DIVGPU_GRAM_CHECK" }, { "tensor", "tensor_defines", "DIVGPU_TENSOR_CHECK" } } do
            local method, option, check = m[1], m[2], m[3]
            it(method .. "'s bound holds there on an uncertified table (instrumented), and its 1% twin fails", function()
                local e = h.shipped_head(120)
                local function max_ratio(scale)
                    local args = { ctx = flushing(), embeddings = e, starts = h.range(0, 4), length = 40, method = method,
                                   [option] = { [check] = 1, DIVGPU_BOUND_SCALE = scale } }
                    local _, stats = assert(driver.run(args))
                    return stats[method].max_ratio
                end
                local ratio = max_ratio("1.0lf")
                assert(ratio > 0 and ratio <= 1, "max |exact - approx| / bound = " .. ratio)
                local twin = max_ratio("0.01lf")
                assert(twin > 1, "a bound shrunk to 1% was not caught: ratio " .. twin)
            end)
        end

        it("tables with and without the certificate give the contract's bytes (every method, the GEMM shape)", function()
            local tables = { divgpu.synth{ n = 300, dim = 64, clusters = 8, seed = 3, noise = 1e-5 }, h.shipped_head(120) }
            assert.is_true((tables[1]:subnormal_certificate()))
            assert.is_nil((tables[2]:subnormal_certificate()))  -- MiniLM's near-zero dimensions 127 and 223
            for _, e in ipairs(tables) do
                local starts = h.range(0, 6)
                local cpu = divgpu.mirror(e, starts, 60)
                for _, o in ipairs{ { method = "direct" }, { method = "gram" }, { method = "direct", shape = "gemm" },
                                    { method = "tensor" } } do
                    local gpu = run(flushing(), e, starts, 60, o)
                    local d = divgpu.first_difference(gpu, cpu, 60)
                    assert(not d, o.method .. (o.shape and " " .. o.shape or "") .. ": " .. h.describe_difference(d))
                end
            end
        end)
    end)

    describe("fp16-exact's bound with gradual underflow", function()
        -- lavapipe keeps denormals in hardware (its self-test saw them kept):
        -- with the exact underflow path off, the filter's subnormal values
        -- come from the hardware's gradual underflow, which the bound must cover.
        it("keeps the contract's winner on the counterexample", function()
            assert.are.equal("kept", vk.denormals_seen(h.ctx()))
            local gpu = run(h.ctx(), bad, start0, 3, { precision = "fp16-exact", exact_underflow = false })
            assert.are.equal("0,2,1", sequence(gpu, 3))
        end)

        it("twin: the bound without its underflow term drops it", function()
            local spirv = vk.shader(h.ctx(), "baseline", { DIVGPU_FP16_EXACT = 1, DIVGPU_UNDERFLOW_TERM = 0 })
            local gpu = run(h.ctx(), bad, start0, 3, { precision = "fp16-exact", spirv = spirv })
            assert.are_not.equal("0,2,1", sequence(gpu, 3))
        end)
    end)

    it("the validation layer reported nothing", function()
        if flush_ctx then
            local messages = flush_ctx:validation_messages()
            assert(#messages == 0, table.concat(messages, "\n"))
        end
        h.assert_no_validation_messages()
    end)
end)
