-- The SPIR-V `make test` runs on lavapipe is, byte for byte, a module the
-- native module ships: what varies by device or table (fma
-- emulation, exact underflow, flush imitation) is a specialization constant
-- (shaders/include/fma.glsl, underflow.glsl, flush.glsl), never a run-time
-- compile. Every method runs here through the real driver; every pipeline a
-- kernel is made from (kernel.trace) must be a shipped module's words.
local divgpu = require "divgpu"
local driver = require "divgpu.driver"
local kernel = require "divgpu.kernel"
local device = require "divgpu.device"
local h = require "tests.helpers"

local concat = table.concat

--- The module's words as one string (to_array gives an indexable array).
local function key_of(spirv)
    local a, words = spirv:to_array(), {}
    for i = 1, #a do words[i] = a[i] end
    return concat(words, ",")
end

local shipped_set
local function shipped_name(spirv)
    if not shipped_set then
        shipped_set = {}
        for _, name in ipairs(divgpu.shaders.names()) do
            shipped_set[key_of(divgpu.shaders.get(name))] = name
        end
    end
    return shipped_set[key_of(spirv)]
end

--- Runs `opts` through the driver and returns every module a kernel was made from.
local function traced(e, opts)
    local seen = {}
    kernel.trace = function(spirv, name) seen[#seen + 1] = { spirv = spirv, name = name } end
    local args = { ctx = h.ctx(), embeddings = e, starts = h.range(0, 4), length = 12 }
    for k, v in pairs(opts) do args[k] = v end
    local ok, out, err = pcall(driver.run, args)
    kernel.trace = nil
    assert(ok, out)
    assert(out, err)
    return seen
end

describe("make test runs the shipped SPIR-V", function()
    teardown(h.assert_no_validation_messages)
    local runs = {
        { method = "direct", shape = "baseline" }, { method = "direct", shape = "baseline", precision = "fp16" },
        { method = "direct", shape = "baseline", precision = "fp16-exact" },
        { method = "direct", shape = "baseline", layout = "columns" },
        { method = "direct", shape = "tiled" }, { method = "direct", shape = "tile-dispatch" },
        { method = "direct", shape = "gemm" }, { method = "direct", shape = "gemm", layout = "columns" },
        -- The table in blocks reached by device address (a table past one buffer; here forced).
        { method = "direct", shape = "gemm", tuning = { gemm_table_block_items = 300 } },
        { method = "gram" }, { method = "tensor" },
    }
    local exact_seen = false

    for _, opts in ipairs(runs) do
        local label = {}
        for k, v in pairs(opts) do
            if type(v) == "table" then
                for k2, v2 in pairs(v) do label[#label + 1] = k2 .. "=" .. v2 end
            else
                label[#label + 1] = k .. "=" .. v
            end
        end
        table.sort(label)
        it("every pipeline of " .. concat(label, " ") .. " (the shipped poems: exact underflow on) is a shipped module", function()
            local seen = traced(h.shipped(), opts)
            assert.truthy(#seen > 0, "no kernel was made")
            for _, s in ipairs(seen) do
                local name = shipped_name(s.spirv)
                assert(name, s.name .. ": its SPIR-V is no shipped module's (compiled at run time?)")
                assert.are.equal(name, device.embedded_name(s.spirv) or name)
                local spec = device.specialization_of(s.spirv)
                if spec and spec[device.SWITCHES.DIVGPU_EXACT_UNDERFLOW] == 1 then exact_seen = true end
            end
        end)
    end

    it("the switches were set by specialization: exact underflow on for the poems, fma emulation as the self-test found", function()
        assert.is_true(exact_seen)
        local spec = device.specialization(h.ctx())
        assert.are.equal(device.fma_mode(h.ctx()) == "emulated" and 1 or 0, spec[device.SWITCHES.DIVGPU_FMA_EMULATED])
    end)

    it("twin: a test's twin (a named patch) and an experiment's define are compiled, and are no shipped module", function()
        local twin = assert(device.shader(h.ctx(), "baseline", { DIVGPU_PERTURB = 1 }))
        assert.is_nil(shipped_name(twin))
        assert.is_nil(device.embedded_name(twin))
        local experiment = assert(device.shader(h.ctx(), "baseline", { DIVGPU_SOMETHING_ELSE = 1 }))
        assert.is_nil(device.embedded_name(experiment))
        -- The switches alone keep the embedded module.
        local plain = assert(device.shader(h.ctx(), "baseline", { DIVGPU_EXACT_UNDERFLOW = 1, DIVGPU_FMA_EMULATED = 1 }))
        assert.are.equal("baseline", device.embedded_name(plain))
        assert.are.equal("baseline", shipped_name(plain))
    end)
end)
