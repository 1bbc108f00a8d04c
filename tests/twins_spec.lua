-- Every shape and layout of the direct method against the CPU mirror, run the
-- way a long job runs: the winners ring (9 steps) wrapping many times and in
-- the middle of a chunk, two submissions in flight, chunks of a few steps
-- (the driver caps a chunk at ring / in_flight = 4 steps: after the two
-- 1-step probes every chunk is 4 steps, and the one from step 7 crosses the
-- ring's end).
-- Each parity check has a twin: the same run with one operation of the
-- contract perturbed (shaders/include/contract.glsl, DIVGPU_PERTURB), on a
-- table where that perturbation is known to change a winner, must fail it.
local divgpu = require "divgpu"
local direct = require "divgpu.methods.direct"
local driver = require "divgpu.driver"
local h = require "tests.helpers"

local RING, IN_FLIGHT = 9, 2

-- Every shape of the registry in each of its layouts (columns is the
-- direct method's default in the CLI).
local CONFIGS = {}
for _, shape in ipairs(direct.shapes()) do
    for _, layout in ipairs(direct.axis_values(shape, "layout")) do
        CONFIGS[#CONFIGS + 1] = { shape = shape, layout = layout }
    end
end

-- Checks that the run had the conditions this file is about: every chunk
-- within ring / in_flight, many chunks, and one that crosses the ring's end.
local function assert_conditions(stats, length)
    local first, crossed = 1, false
    for _, n in ipairs(stats.chunk_sizes) do
        assert(n <= math.floor(RING / IN_FLIGHT), "a chunk of " .. n .. " steps")
        if first % RING + n > RING then crossed = true end
        first = first + n
    end
    assert.are.equal(length, first)
    assert(#stats.chunk_sizes >= (length - 1) / math.floor(RING / IN_FLIGHT), "only " .. #stats.chunk_sizes .. " chunks")
    assert(crossed, "no chunk crossed the end of the ring: " .. table.concat(stats.chunk_sizes, ","))
end

--- Runs config c on the GPU through the real driver; perturb = DIVGPU_PERTURB or nil.
local function run(c, precision, e, starts, length, tile, perturb)
    local out, stats = driver.run{ ctx = h.ctx(), embeddings = e, starts = starts, length = length,
        method = "direct", shape = c.shape, layout = c.layout, precision = precision, tile_size = tile,
        ring = RING, in_flight = IN_FLIGHT, direct_defines = perturb and { DIVGPU_PERTURB = perturb } or nil }
    assert_conditions(stats, length)
    return out
end

--- The shape's precisions of the fp32 contract (fp16 has its own: shapes_spec.lua).
local function fp32_contract(shape)
    local list = {}
    for _, p in ipairs(direct.axis_values(shape, "precision")) do
        if p ~= "fp16" then list[#list + 1] = p end
    end
    return list
end

local function label(c, precision)
    return string.format("%s %s %s", c.shape, c.layout, precision)
end

describe("every shape and layout vs the CPU mirror, ring wrapping, two in flight", function()
    teardown(h.assert_no_validation_messages)

    describe("on near-ties (clustered, noise 1e-5), tiles of 77 (not dividing N = 300)", function()
        local e = divgpu.synth{ n = 300, dim = 64, clusters = 8, seed = 3, noise = 1e-5 }
        local starts, length = h.range(0, 32), 300
        local expected = divgpu.mirror(e, starts, length)
        for _, c in ipairs(CONFIGS) do
            for _, precision in ipairs(fp32_contract(c.shape)) do
                it(label(c, precision) .. ": identical", function()
                    local d = divgpu.first_difference(run(c, precision, e, starts, length, 77), expected, length)
                    assert(d == nil, h.describe_difference(d))
                end)
                it(label(c, precision) .. ": twin: an unfused multiply-add in the chain is caught", function()
                    local out = run(c, precision, e, starts, length, 77, 1)
                    assert(divgpu.first_difference(out, expected, length),
                           "the perturbed variant gave the contract's output: the check is vacuous")
                end)
            end
        end
    end)

    describe("on exact ties (D = 1), tiles of 7 (ties across tiles)", function()
        local e = divgpu.synth{ n = 50, dim = 1, clusters = 8, seed = 51 }
        local starts, length = h.range(0, 50), 50
        local expected = divgpu.mirror(e, starts, length)
        for _, c in ipairs(CONFIGS) do
            it(label(c, "fp32") .. ": identical, and its twin (ties to the larger index) caught", function()
                local d = divgpu.first_difference(run(c, "fp32", e, starts, length, 7), expected, length)
                assert(d == nil, h.describe_difference(d))
                local out = run(c, "fp32", e, starts, length, 7, 3)
                assert(divgpu.first_difference(out, expected, length),
                       "the perturbed variant gave the contract's output: the check is vacuous")
            end)
        end
    end)
end)
