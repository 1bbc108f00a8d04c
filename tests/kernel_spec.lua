-- A kernel's descriptor against its shader, at pipeline creation: the
-- bindings (their blocks' names in snake case, by binding number), the push
-- fields (by name, in offset order) and the specialization constants it
-- sets. The right descriptor is accepted; each twin, with two names swapped
-- or one missing, is refused with a message naming both sides.
local kernel = require "divgpu.kernel"
local h = require "tests.helpers"

local function copy(list)
    local out = {}
    for i, v in ipairs(list) do out[i] = v end
    return out
end

--- The descriptor `d` with `field` replaced by `list`.
local function with(d, field, list)
    return setmetatable({ [field] = list }, { __index = d })
end

local function swapped(list, i, j)
    local out = copy(list)
    out[i], out[j] = out[j], out[i]
    return out
end

local function refusal(d, opts)
    local ok, err = pcall(kernel.new, h.ctx(), d, opts)
    assert.is_false(ok, "the descriptor was accepted")
    return tostring(err):match("^[^\n]*")
end

describe("a kernel descriptor is checked against its SPIR-V when the pipeline is made", function()
    teardown(h.assert_no_validation_messages)
    local tiled = kernel.descriptor("tiled")
    local gram_build = kernel.descriptor("gram_build")
    local constants = { workgroup_size = 8, max_dim = 4 }

    it("the shipped descriptors are accepted", function()
        assert.truthy(assert(kernel.new(h.ctx(), tiled, { constants = constants })).pipeline)
        assert.truthy(assert(kernel.new(h.ctx(), gram_build, { constants = { wx = 8, wy = 8, tm = 2, tn = 2, slice = 8,
                                                                       acc_slots = 4, stage = 2 } })).pipeline)
    end)

    it("every descriptor fits its default shipped SPIR-V without a device", function()
        local divgpu = require "divgpu"
        local names = kernel.names()
        assert.truthy(#names >= 7, "only " .. #names .. " descriptors")
        for _, name in ipairs(names) do
            local d = kernel.descriptor(name)
            local ok, why = divgpu.shaders.get(d.shader):check(d)
            assert(ok, name .. ": " .. tostring(why))
        end
    end)

    -- tensor_coopmat (which lavapipe cannot run) is built where shaderc has
    -- GL_KHR_cooperative_matrix (make build SHADERC=source); Debian 12's
    -- shaderc does not have it, and the build says so (no silent skip).
    it("tensor_coopmat is shipped and fits its descriptor, or not_built names it with the missing extension", function()
        local divgpu = require "divgpu"
        local why = divgpu.shaders.not_built().tensor_coopmat
        local listed = false
        for _, name in ipairs(kernel.names()) do listed = listed or name == "tensor_coopmat" end
        if why then
            assert.matches("GL_KHR_cooperative_matrix", why, 1, true)
            assert.is_false(listed)
            assert.is_false((pcall(divgpu.shaders.get, "tensor_coopmat")))
            return
        end
        assert.is_true(listed)
        -- Built: its descriptor fits its SPIR-V, its export variant the export's bindings.
        local ok0, why0 = divgpu.shaders.get("tensor_coopmat"):check(kernel.descriptor("tensor_coopmat"))
        assert(ok0, "tensor_coopmat: " .. tostring(why0))
        -- tensor_coopmat's export variant (every pair's â stored) fits the export's bindings.
        local coopmat = kernel.descriptor("tensor_coopmat")
        local _, defines = divgpu.shaders.source("tensor_coopmat")
        local device = require "divgpu.device"
        local patches = {}
        for k, v in pairs(coopmat.export.defines) do patches[#patches + 1] = { k, v, assert(device.patch_for(k)) } end
        local source = device.patched_source("tensor_coopmat", patches)  -- bench/kernels/coopmat_export.lua
        local export = assert(divgpu.shaders.compile(source, { name = "tensor_coopmat", defines = defines }))
        assert(export:check(with(coopmat, "bindings", coopmat.export.bindings)))
        -- Twin: the default bindings do not fit the export variant, nor the export's the default.
        assert.is_false((export:check(coopmat)))
        assert.is_false((divgpu.shaders.get("tensor_coopmat"):check(with(coopmat, "bindings", coopmat.export.bindings))))
        -- Twin: tensor_coopmat's descriptor with a binding it no longer has is refused.
        local ok, why = divgpu.shaders.get("tensor_coopmat"):check(with(coopmat, "bindings",
            { "inv_norm", "table_slices", "centroid_slices", "masks", "state_f64", "partials", "partial_index" }))
        assert.is_false(ok)
        assert.matches("they differ at position 1", why, 1, true)
    end)

    it("twin: two push fields swapped are refused, naming both orders", function()
        local err = refusal(with(tiled, "push", swapped(tiled.push, 3, 4)), { constants = constants })
        assert.matches("kernel 'tiled': the shader's push constants are [num_items, dim, step, ring, tile_size] "
            .. "(20 bytes), the descriptor's [num_items, dim, ring, step, tile_size]", err, 1, true)
    end)

    it("twin: two bindings swapped are refused, naming the first difference", function()
        local err = refusal(with(tiled, "bindings", swapped(tiled.bindings, 3, 4)), { constants = constants })
        assert.matches("kernel 'tiled': the shader's bindings are [embeddings, inv_norm, centroids, masks, winners]",
            err, 1, true)
        assert.matches("they differ at position 3", err, 1, true)
    end)

    it("twin: a binding or a push field missing is refused", function()
        local bindings = copy(gram_build.bindings)
        bindings[#bindings] = nil
        assert.matches("the shader's bindings are", refusal(with(gram_build, "bindings", bindings)), 1, true)
        local push = copy(gram_build.push)
        table.remove(push, 1)
        assert.matches("the shader's push constants are", refusal(with(gram_build, "push", push)), 1, true)
    end)

    it("twin: a constant at another id than the shader's is refused", function()
        local err = refusal(with(tiled, "constants", { workgroup_size = 0, max_dim = 2 }), { constants = constants })
        assert.matches("the shader has no specialization constant 2 (the descriptor's 'max_dim')", err, 1, true)
        err = refusal(with(tiled, "constants", { workgroup_size = 1, max_dim = 0 }), { constants = constants })
        assert.matches("specialization constant 1 is the shader's MAX_DIM, the descriptor's 'workgroup_size'", err, 1, true)
    end)
end)
