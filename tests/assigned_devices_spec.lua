-- --device's default from a job scheduler's variable (lua/divgpu/assigned_devices.lua),
-- on stand-in devices and environments; the CLI's end of it on lavapipe is
-- in tests/cli_test.sh. Each match has its twin: a UUID of no device, or of
-- another, must not pick the device.
local assigned = require "divgpu.assigned_devices"

local DEVICES = {
    { index = 0, device_uuid = "6d65736132322e332e36000000000000" },
    { index = 1, device_uuid = "8a5c1f2e000011112222333344445555" },
}

local function env(vars) return function(name) return vars[name] end end

local function refused(vars, pattern)
    local ok, err = pcall(assigned.device_option, env(vars), DEVICES)
    assert(not ok, "accepted " .. tostring(err))
    assert(tostring(err):find(pattern, 1, true), tostring(err))
end

describe("devices as a scheduler assigns them", function()
    it("no variable: no default", function()
        assert.is_nil(assigned.device_option(env{}, DEVICES))
    end)

    it("a CUDA UUID picks the device of that Vulkan deviceUUID, in the variable's order", function()
        local value, line = assigned.device_option(env{ CUDA_VISIBLE_DEVICES = "GPU-8a5c1f2e-0000-1111-2222-333344445555,"
            .. "gpu-6D657361-3232-2e33-2e36-000000000000" }, DEVICES)
        assert.are.equal("1,0", value)
        assert(line:find("CUDA_VISIBLE_DEVICES", 1, true) and line:find("matched by UUID", 1, true), line)
        -- A unique prefix, as CUDA accepts.
        assert.are.equal("1", (assigned.device_option(env{ CUDA_VISIBLE_DEVICES = "GPU-8a5c" }, DEVICES)))
        -- Twin: a UUID of no device is refused, naming the variable.
        refused({ CUDA_VISIBLE_DEVICES = "GPU-8a5c1f2f-0000-1111-2222-333344445555" },
            "CUDA_VISIBLE_DEVICES names GPU-8a5c1f2f-0000-1111-2222-333344445555, which matches no Vulkan device")
    end)

    it("CUDA_VISIBLE_DEVICES first, then SLURM_STEP_GPUS, then GPU_DEVICE_ORDINAL", function()
        local vars = { SLURM_STEP_GPUS = "GPU-6d657361", GPU_DEVICE_ORDINAL = "GPU-8a5c" }
        assert.are.equal("0", (assigned.device_option(env(vars), DEVICES)))
        vars.CUDA_VISIBLE_DEVICES = "GPU-8a5c"
        assert.are.equal("1", (assigned.device_option(env(vars), DEVICES)))
        vars.CUDA_VISIBLE_DEVICES, vars.SLURM_STEP_GPUS = nil, nil
        assert.are.equal("1", (assigned.device_option(env(vars), DEVICES)))
    end)

    it("an index list is taken as Vulkan indices, and the line says it cannot be matched", function()
        local value, line = assigned.device_option(env{ SLURM_STEP_GPUS = "1, 0" }, DEVICES)
        assert.are.equal("1,0", value)
        assert(line:find("cannot be matched to CUDA's order", 1, true), line)
    end)

    it("refused: an empty assignment, a MIG or unknown entry, an ambiguous prefix", function()
        refused({ CUDA_VISIBLE_DEVICES = "" }, "CUDA_VISIBLE_DEVICES is set but names no GPU")
        refused({ CUDA_VISIBLE_DEVICES = "MIG-1234" }, "'MIG-1234' is neither a GPU UUID")
        refused({ GPU_DEVICE_ORDINAL = "GPU-" }, "GPU_DEVICE_ORDINAL=GPU-: 'GPU-' is neither")
        local twins = { { index = 0, device_uuid = "aa00" }, { index = 1, device_uuid = "aa11" } }
        local ok, err = pcall(assigned.device_option, env{ CUDA_VISIBLE_DEVICES = "GPU-aa" }, twins)
        assert(not ok and tostring(err):find("more than one", 1, true), tostring(err))
    end)
end)
