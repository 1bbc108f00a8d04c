-- The device profile (src/gpu/profile.rs, lua/divgpu/device_profile.lua):
-- each field against a reading of its own (the Vulkan limits of ctx.info,
-- the loop probe dispatched here, the self-test run again) and, on
-- lavapipe, against what is known of it; the twins: a wrong profile is
-- caught by the check and changes a consumer's decision.
local h = require "tests.helpers"
local divgpu = require "divgpu"
local device_profile = require "divgpu.device_profile"
local gram = require "divgpu.methods.gram"

--- The loop probe, dispatched here (as device.lua did before the profile):
--- the iterations a loop of 2^20 really ran, or false when all did.
local function measured_loop_cap(ctx)
    local pipeline = assert(ctx:pipeline{ spirv = divgpu.shaders.get("loop_probe"), name = "loop_probe" })
    local out = assert(ctx:buffer(4, "loop probe", "host"))
    local rec = assert(ctx:recorder())
    assert(rec:dispatch(assert(ctx:bind(pipeline, { out })), { 1048576 }, 1))
    assert(rec:submit())
    assert(rec:wait())
    local ran = assert(out:read("u32"))[1]
    return ran < 1048576 and ran or false
end

--- The fields where profile `p` disagrees with the independent readings
--- What the tensor filter's products need, read from the Vulkan limits here:
--- int8 16 x 16 x 32 subgroup matrices into int32, 8-bit storage, int8, subgroups of 32.
local function int8_matrices(info)
    if not (info.int8 and info.storage_buffer_8bit and info.subgroup_size == 32) then return false end
    for _, c in ipairs(info.cooperative_matrix or {}) do
        if c.m == 16 and c.n == 16 and c.k == 32 and c.a == "i8" and c.b == "i8" and c.c == "i32"
           and c.result == "i32" and c.scope == "subgroup" then
            return true
        end
    end
    return false
end

--- (`info`: the Vulkan limits; `seen`: { fma, denormals, loop_cap } measured here).
local function disagreements(p, info, seen)
    local wrong = {}
    for _, k in ipairs{ "name", "type", "subgroup_size", "max_shared_memory", "max_workgroup_invocations",
                        "max_workgroup_size", "max_workgroup_count", "max_storage_buffer_range",
                        "max_memory_allocation_size", "float64", "int64", "int8", "buffer_device_address",
                        "denormals", "denormals_mode" } do
        if p[k] ~= info[k] then wrong[#wrong + 1] = k end
    end
    if p.storage_range ~= math.min(info.max_storage_buffer_range, info.max_memory_allocation_size) then
        wrong[#wrong + 1] = "storage_range"
    end
    if p.cooperative_matrix ~= (#info.cooperative_matrix > 0) then wrong[#wrong + 1] = "cooperative_matrix" end
    if p.int8_matrices ~= int8_matrices(info) then wrong[#wrong + 1] = "int8_matrices" end
    if p.fma ~= seen.fma then wrong[#wrong + 1] = "fma" end
    if p.denormals_seen ~= seen.denormals then wrong[#wrong + 1] = "denormals_seen" end
    if p.loop_cap ~= seen.loop_cap then wrong[#wrong + 1] = "loop_cap" end
    if (p.registers ~= nil) ~= (info.type ~= "cpu") then wrong[#wrong + 1] = "registers" end
    return wrong
end

local function copy(t)
    local c = {}
    for k, v in pairs(t) do c[k] = v end
    return c
end

describe("the device profile", function()
    local ctx, p, seen
    setup(function()
        ctx = h.ctx()
        p = assert(device_profile.profile(ctx))
        local fma, denormals = assert(ctx:self_test())
        seen = { fma = fma, denormals = denormals, loop_cap = measured_loop_cap(ctx) }
    end)

    it("agrees with the Vulkan limits, the self-test and the loop probe read on their own", function()
        assert.are.same({}, disagreements(p, ctx.info, seen))
    end)

    it("is what is known of lavapipe there: subgroup 8, 32 KiB shared, fma not fused, loops stopped at 65,535",
        function()
            if not ctx.info.name:find("llvmpipe", 1, true) then return pending("not lavapipe") end
            assert.are.equal(8, p.subgroup_size)
            assert.are.equal(32768, p.max_shared_memory)
            assert.are.equal("emulated", p.fma)
            assert.are.equal(65535, p.loop_cap)
            assert.are.equal(65535, seen.loop_cap)
            assert.is_nil(p.registers)  -- a CPU device: no register file to plan by
        end)

    it("is one table per context, its rates and L2 attached once", function()
        assert.are.equal(p, device_profile.profile(ctx))
        local r = device_profile.rates(ctx)
        assert.are.equal(r, p.rates)
        assert.are.equal(r, device_profile.rates(ctx))
        assert(r.f32_chain > 0 and r.source, "rates without figures")
        local bytes, source = device_profile.l2(ctx)
        assert.are.same({ bytes = bytes, source = source }, p.l2)
        if ctx.info.name:find("llvmpipe", 1, true) then assert.are.equal(1048576, bytes) end
        assert.are.equal(4096, (device_profile.l2(ctx, { l2_bytes = 4096 })))
        assert.are.equal(bytes, p.l2.bytes)  -- the user's figure is not kept as the device's
    end)

    it("the device module reads it: fma mode, denormals, loop cap, the fma switch", function()
        local device = require "divgpu.device"
        assert.are.equal(p.fma, device.fma_mode(ctx))
        assert.are.equal(p.denormals_seen, device.denormals_seen(ctx))
        assert.are.equal(p.loop_cap, device.loop_cap(ctx))
        assert.are.equal(p.fma == "emulated" and 1 or 0, device.specialization(ctx)[device.SWITCHES.DIVGPU_FMA_EMULATED])
    end)

    it("twin: a profile with a wrong subgroup size or loop cap is caught", function()
        local wrong = copy(p)
        wrong.subgroup_size = p.subgroup_size * 4
        assert.are.same({ "subgroup_size" }, disagreements(wrong, ctx.info, seen))
        wrong = copy(p)
        wrong.loop_cap = false
        assert.are.same({ "loop_cap" }, disagreements(wrong, ctx.info, seen))
        wrong = copy(p)
        wrong.int8_matrices = not p.int8_matrices
        assert.are.same({ "int8_matrices" }, disagreements(wrong, ctx.info, seen))
    end)

    it("twin: a device with the int8 16 x 16 x 32 shape but subgroups of 8 has no int8 matrices (the rule read here)",
        function()
            local info = copy(ctx.info)
            info.int8, info.storage_buffer_8bit, info.subgroup_size = true, true, 32
            info.cooperative_matrix = { { m = 16, n = 16, k = 32, a = "i8", b = "i8", c = "i32", result = "i32",
                                          scope = "subgroup" } }
            assert.is_true(int8_matrices(info))
            info.subgroup_size = 8
            assert.is_false(int8_matrices(info))
        end)

    it("twin: a wrong subgroup size changes a consumer's decision (gram's workgroup check)", function()
        local wg = 3 * p.subgroup_size  -- whole subgroups of the device's size
        assert(pcall(gram.check_workgroup, p, wg, "gram"))
        local wrong = copy(p)
        wrong.subgroup_size = 2 * p.subgroup_size
        local ok, err = pcall(gram.check_workgroup, wrong, wg, "gram")
        assert.is_false(ok)
        assert.matches("multiple of", tostring(err), 1, true)
    end)

    it("misuse: a profile needs a context", function()
        assert.has_error(function() device_profile.profile({}) end)
    end)
end)
