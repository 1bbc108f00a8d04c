-- The tests' twins (tests/kernels/) and the bench's probes (bench/kernels/)
-- are named source patches, kept out of the shipped kernels: the
-- shipped sources carry no trace of them, and every value of every patch
-- still applies to its kernel (each hunk's text found exactly once) and
-- compiles, so a kernel's edit cannot silently leave a twin behind.
local divgpu = require "divgpu"
local device = require "divgpu.device"

-- define -> the shipped shader it patches and its values.
local PATCHES = {
    DIVGPU_PERTURB = { shader = "baseline", values = { 1, 2, 3 }, also = { "gemm", "gram", "tensor" } },
    DIVGPU_GRAM_PERTURB = { shader = "gram", values = { 1, 2, 3, 4 } },
    DIVGPU_GRAM_BUILD_PERTURB = { shader = "gram_build", values = { 1, 2 } },
    DIVGPU_GEMM_PERTURB = { shader = "gemm", values = { 1, 2, 3, 4 } },
    DIVGPU_TENSOR_PERTURB = { shader = "tensor", values = { 1, 2, 3 } },
    DIVGPU_GRAM_FLOOR = { shader = "gram", values = { 1 } },
    DIVGPU_GRAM_UNIFORM = { shader = "gram", values = { 1 } },
    DIVGPU_GRAM_WARP_UNIFORM = { shader = "gram", values = { 1 } },
    DIVGPU_COOPMAT_PERTURB = { shader = "tensor_coopmat", values = { 1 } },
    DIVGPU_COOPMAT_PRODUCTS_ONLY = { shader = "tensor_coopmat", values = { 1, 2, 3, 4 } },
    DIVGPU_COOPMAT_EXPORT = { shader = "tensor_coopmat", values = { 1 } },
    DIVGPU_GRAM_CHECK = { shader = "gram", values = { 1 } },
    DIVGPU_TENSOR_CHECK = { shader = "tensor", values = { 1 } },
    DIVGPU_BOUND_SCALE = { shader = "gram", values = { "1e-9", "0.01lf" }, also = { "tensor", "baseline-fp16-exact" } },
    DIVGPU_UNDERFLOW_TERM = { shader = "baseline-fp16-exact", values = { 0 }, also = { "tiled-fp16-exact" } },
}

local function built(name)
    for _, n in ipairs(divgpu.shaders.names()) do
        if n == name then return true end
    end
    return false
end

describe("twins and probes are named patches outside shaders/", function()
    it("no shipped source or include names a twin's or probe's define", function()
        local texts = {}
        for _, name in ipairs(divgpu.shaders.names()) do texts[#texts + 1] = (divgpu.shaders.source(name)) end
        for _, inc in ipairs{ "contract.glsl", "fma.glsl", "flush.glsl", "underflow.glsl", "scan_common.glsl",
                              "fp16_exact.glsl" } do
            texts[#texts + 1] = divgpu.shaders.include(inc)
        end
        for define in pairs(PATCHES) do
            for _, text in ipairs(texts) do
                -- (Comments may name the patch; no directive or expression uses it.)
                for _, use in ipairs{ "#%s*if[^\n]*" .. define, "#%s*define%s+" .. define, define .. "%s*[=!<>]" } do
                    assert.is_nil(text:find(use), define .. " is still used in a shipped source")
                end
            end
        end
    end)

    for define, p in pairs(PATCHES) do
        it(define .. ": every value applies to " .. p.shader .. " and compiles (where this build has the kernel)", function()
            local patch = assert(device.patch_for(define), "no patch file for " .. define)
            if not built(p.shader) then
                -- tensor_coopmat on a shaderc without GL_KHR_cooperative_matrix: no
                -- shipped source to patch here; the build says why (kernel_spec).
                assert.truthy(divgpu.shaders.not_built()[p.shader])
                for _, v in ipairs(p.values) do assert.truthy(patch[v]) end
                return
            end
            for _, shader in ipairs{ p.shader, unpack(p.also or {}) } do
                for _, v in ipairs(p.values) do
                    local source = device.patched_source(shader, { { define, v, patch } })
                    assert.are_not.equal(source, device.patched_source(shader, {}))
                    if built(shader) then
                        local _, defines = divgpu.shaders.source(shader)
                        assert(divgpu.shaders.compile(source, { name = shader .. " " .. define .. "=" .. v, defines = defines }))
                    else
                        -- tensor_coopmat on a shaderc without GL_KHR_cooperative_matrix: applied, not compiled.
                        assert.truthy(divgpu.shaders.not_built()[shader])
                    end
                end
            end
        end)
    end

    it("the instrumented builds take a shrunk bound beside them (the tests' pairs), and compile", function()
        for _, pair in ipairs{ { "gram", "DIVGPU_GRAM_CHECK" }, { "tensor", "DIVGPU_TENSOR_CHECK" } } do
            local source = device.patched_source(pair[1], { { "DIVGPU_BOUND_SCALE", "0.01lf", device.patch_for("DIVGPU_BOUND_SCALE") },
                                                             { pair[2], 1, device.patch_for(pair[2]) } })
            assert.truthy(source:find("double(0.01lf) * SLACK", 1, true))
            local _, defines = divgpu.shaders.source(pair[1])
            assert(divgpu.shaders.compile(source, { name = pair[1] .. " checked", defines = defines }))
        end
    end)

    it("twin: a hunk whose text has drifted is an error naming the patch", function()
        local drifted = { file = "tests/kernels/drifted.lua", [1] = { { find = "no such text", replace = "" } } }
        local ok, err = pcall(device.patched_source, "baseline", { { "DIVGPU_DRIFTED", 1, drifted } })
        assert.is_false(ok)
        assert.matches("DIVGPU_DRIFTED = 1 (tests/kernels/drifted.lua, hunk 1): its text is not found", err, 1, true)
        local ok2, err2 = pcall(device.patched_source, "baseline", { { "DIVGPU_PERTURB", 9, device.patch_for("DIVGPU_PERTURB") } })
        assert.is_false(ok2)
        assert.matches("has no such variant", err2, 1, true)
    end)
end)
