-- The shapes' invariant (docs/contract.md#shapes): every shape the registry
-- has and every number of submissions in flight gives output identical to
-- the reference shape's under the same precision, and `fp16-exact` is
-- identical to `fp32`. A new direct shape is tested here by being registered.
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local direct = require "divgpu.methods.direct"
local driver = require "divgpu.driver"
local h = require "tests.helpers"

-- The direct method's shapes, and those that take a tile (the registry's).
local SHAPES, TILED = direct.shapes(), {}
for _, shape in ipairs(SHAPES) do
    if direct.descriptor(shape).needs_tile then TILED[#TILED + 1] = shape end
end

--- The given precisions `shape` has (its kernel's precision axis).
local function precisions(shape, wanted)
    local has, list = {}, {}
    for _, p in ipairs(direct.axis_values(shape, "precision")) do has[p] = true end
    for _, p in ipairs(wanted) do if has[p] then list[#list + 1] = p end end
    return list
end

--- The run's sequences, or nil and the error.
local function try(e, starts, length, opts)
    opts.ctx, opts.embeddings, opts.starts, opts.length = h.ctx(), e, starts, length
    opts.method = opts.method or "direct"  -- the shapes are the direct method's
    return driver.run(opts)
end

local function run(e, starts, length, opts)
    return (assert(try(e, starts, length, opts)))
end

local function assert_same(a, b, length, what)
    local d = divgpu.first_difference(a, b, length)
    assert(d == nil, what .. ": " .. h.describe_difference(d))
end

describe("every shape, in-flight count and exact precision equals the reference fp32", function()
    teardown(h.assert_no_validation_messages)

    -- The ci table of docs/contract.md#reference-tables: N = 1000, D = 384, 64 sequences x 64 steps.
    local ci = divgpu.synth{ n = 1000, dim = 384, clusters = 16, seed = 6 }
    local ci_starts = h.range(0, 64)
    local reference = run(ci, ci_starts, 64, { shape = SHAPES[1], precision = "fp32", in_flight = 1 })

    it("the reference shape in fp32 is the CPU mirror", function()
        assert_same(reference, divgpu.mirror(ci, ci_starts, 64), 64, "reference vs mirror")
    end)

    -- The number in flight orders submissions, not arithmetic: both counts in
    -- every shape's fp32, the default (2) in its other precisions.
    for _, shape in ipairs(SHAPES) do
        for _, precision in ipairs(precisions(shape, { "fp32", "fp16-exact" })) do
            for _, k in ipairs(precision == "fp32" and { 1, 2 } or { 2 }) do
                it(string.format("ci shape: %s %s in-flight %d (tile 333)", shape, precision, k), function()
                    local out = run(ci, ci_starts, 64, { shape = shape, precision = precision, in_flight = k,
                                                         tile_size = 333 })
                    assert_same(out, reference, 64, shape)
                end)
            end
        end
    end

    -- The columns layout (coalesced loads) in every shape and exact precision.
    for _, shape in ipairs(SHAPES) do
        for _, precision in ipairs(precisions(shape, { "fp32", "fp16-exact" })) do
            it(string.format("ci shape: %s %s columns layout, in-flight 2 (tile 333)", shape, precision), function()
                local out = run(ci, ci_starts, 64, { shape = shape, precision = precision, in_flight = 2,
                                                     tile_size = 333, layout = "columns" })
                assert_same(out, reference, 64, shape .. " columns")
            end)
        end
    end

    -- Tile edge cases, on 16 sequences x 16 steps of the ci table: a tile that
    -- divides N, one that does not, 1, N + 1 and far beyond N.
    local few = h.range(0, 16)
    local short_reference = run(ci, few, 16, { shape = SHAPES[1], in_flight = 1 })
    -- In flight: both counts for the tile that divides N, the default (2) for the others.
    for _, tile in ipairs{ 250, 333, 1, 1001, 5000 } do
        for _, shape in ipairs(TILED) do
            for _, precision in ipairs(precisions(shape, { "fp32", "fp16-exact" })) do
                for _, k in ipairs(tile == 250 and { 1, 2 } or { 2 }) do
                    it(string.format("tile %d: %s %s in-flight %d", tile, shape, precision, k), function()
                        local opts = { shape = shape, precision = precision, in_flight = k, tile_size = tile }
                        if shape == "tiled" and tile == 1 and vk.loop_cap(h.ctx()) then
                            -- With tile 1 one thread scores every candidate: 1,000 x 385
                            -- loop iterations, past lavapipe's cap of 65,535, after which
                            -- it would silently cut the scan short. The job must refuse...
                            local out, err = try(ci, few, 16, opts)
                            assert.is_nil(out)
                            assert.matches("stops shader loops after", err, 1, true)
                            -- ...and tile 1 is checked on a table within the cap.
                            local small = divgpu.synth{ n = 120, dim = 40, clusters = 4, seed = 12 }
                            opts.tile_size = 1
                            assert_same(run(small, few, 16, opts), divgpu.mirror(small, few, 16), 16, "tile 1")
                        else
                            assert_same(run(ci, few, 16, opts), short_reference, 16, shape)
                        end
                    end)
                end
            end
        end
    end
end)

describe("fp16", function()
    teardown(h.assert_no_validation_messages)
    local ci = divgpu.synth{ n = 1000, dim = 384, clusters = 16, seed = 6 }
    local starts = h.range(0, 32)  -- (64 took 46 s of make test: every shape and layout runs)

    it("equals the CPU mirror run on the half-rounded table, in every shape", function()
        local rounded = ci:fp16_rounded()
        local expected = divgpu.mirror(rounded, starts, 64)
        for _, shape in ipairs(SHAPES) do
            for _, layout in ipairs(#precisions(shape, { "fp16" }) > 0 and direct.axis_values(shape, "layout") or {}) do
                local out = run(rounded, starts, 64, { shape = shape, precision = "fp16", tile_size = 300,
                                                       layout = layout })
                assert_same(out, expected, 64, shape .. " fp16 " .. layout)
            end
        end
    end)

    it("runs from embeddings_fp16.bin and refuses a stale or mis-sized one", function()
        local dir = h.tmpdir()
        local json = dir .. "/embeddings.json"
        local small = divgpu.synth{ n = 120, dim = 12, seed = 4 }
        small:write_json(json)
        local bin = divgpu.convert_fp16(json)
        assert.matches("embeddings_fp16.bin$", bin)
        local e16 = divgpu.load_fp16(json)
        assert.are.equal(divgpu.load_embeddings(json).sha256, e16.sha256)
        local s = h.range(0, 8)
        assert_same(run(e16, s, 30, { precision = "fp16" }), divgpu.mirror(small:fp16_rounded(), s, 30), 30, "from .bin")
        -- Stale: the JSON changed after the conversion.
        divgpu.synth{ n = 120, dim = 12, seed = 5 }:write_json(json)
        local ok, err = divgpu.load_fp16(json)
        assert.is_nil(ok)
        assert.matches("stale", err, 1, true)
        -- Mis-sized: a truncated .bin.
        divgpu.convert_fp16(json)
        local f = assert(io.open(bin, "r+b"))
        local bytes = f:read("*a")
        f:close()
        f = assert(io.open(bin, "wb"))
        f:write(bytes:sub(1, #bytes - 2))
        f:close()
        ok, err = divgpu.load_fp16(json)
        assert.is_nil(ok)
        assert.matches("mis-sized", err, 1, true)
        os.execute("rm -rf " .. dir)
    end)

    it("the converter writes the round-to-nearest-even half of every value and rejects 65520", function()
        local dir = h.tmpdir()
        local json = dir .. "/embeddings.json"
        local function write(text)
            local f = assert(io.open(json, "wb"))
            f:write(text)
            f:close()
        end
        -- Values and their halves (bits): 1 + 2^-11 is a tie -> even (1.0);
        -- 1 + 3*2^-11 is a tie -> even (up); 2^-24 is the smallest subnormal;
        -- 2^-25 is a tie -> even (0); 65519 rounds down to 65504.
        write("[[1.00048828125, 1.00146484375, 5.960464477539063e-08, 2.9802322387695312e-08],"
            .. " [65504, -65504, 65519, -0.333333333]]")
        local expected = { 0x3C00, 0x3C02, 0x0001, 0x0000, 0x7BFF, 0xFBFF, 0x7BFF, 0xB555 }
        local bin = divgpu.convert_fp16(json)
        local f = assert(io.open(bin, "rb"))
        local bytes = f:read("*a")
        f:close()
        assert.are.equal(#expected * 2, #bytes)
        for i, want in ipairs(expected) do
            local lo, hi = bytes:byte(2 * i - 1, 2 * i)
            assert.are.equal(want, lo + 256 * hi, "value " .. i)
        end
        write("[[1, 2], [65520, 1]]")
        local ok, err = divgpu.convert_fp16(json)
        assert.is_nil(ok)
        assert.matches("row 1, column 0", err, 1, true)
        os.execute("rm -rf " .. dir)
    end)

    it("loads half values and computes in f32: no Float16 arithmetic in the SPIR-V", function()
        -- The capabilities a module declares: OpCapability is opcode 17, 2 words.
        local function capabilities(spirv)
            local words = spirv:to_array()
            local caps, i = {}, 6
            while i <= #words do
                local count, op = math.floor(words[i] / 65536), words[i] % 65536
                if op == 17 then caps[words[i + 1]] = true end
                i = i + math.max(count, 1)
            end
            return caps
        end
        local FLOAT16, STORAGE_16BIT = 9, 4433
        local names = { divgpu.shaders.variant(SHAPES[1], { precision = "fp16", layout = "columns" }) }
        for _, shape in ipairs(SHAPES) do
            for _, p in ipairs(precisions(shape, { "fp16", "fp16-exact" })) do
                names[#names + 1] = divgpu.shaders.variant(shape, { precision = p })
            end
        end
        assert(#names >= 7, "the registry lists " .. #names .. " half-precision variants")
        for _, name in ipairs(names) do
            local caps = capabilities(divgpu.shaders.get(name))
            assert.is_nil(caps[FLOAT16], name .. " declares Float16 arithmetic")
            assert.is_true(caps[STORAGE_16BIT] == true, name .. " lacks StorageBuffer16BitAccess")
        end
        -- The inspection itself can fail: a shader with half arithmetic is seen.
        local half_math = divgpu.shaders.compile([[
            #version 450
            #extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
            layout(local_size_x = 1) in;
            layout(std430, binding = 0) buffer B { float x[]; };
            void main() { float16_t a = float16_t(x[0]); x[0] = float(a * a); }
        ]], { name = "half-math" })
        assert.is_true(capabilities(half_math)[FLOAT16] == true)
    end)
end)

describe("fp16-exact's bound", function()
    teardown(h.assert_no_validation_messages)
    it("twin: a bound made too small is caught by the comparison with fp32", function()
        local e = h.shipped_head(260)
        local starts = h.range(0, e.n)
        local shrunk = vk.shader(h.ctx(), "baseline-fp16-exact", { DIVGPU_BOUND_SCALE = "1e-9" })
        local out = run(e, starts, 40, { precision = "fp16-exact", spirv = shrunk })
        assert.is_not_nil(divgpu.first_difference(out, divgpu.mirror(e, starts, 40), 40))
    end)
end)

describe("the L2 probe", function()
    it("sweeps working-set sizes and reports a knee among them", function()
        local probe = require "divgpu.l2_probe"
        local knee, points = probe.measure(h.ctx(), { min_bytes = 65536, max_bytes = 262144, factor = 2,
                                                      target_bytes = 1048576, groups = 8 })
        assert.are.equal(3, #points)
        local found = false
        for i, p in ipairs(points) do
            assert.is_true(p.gbps > 0)
            if i > 1 then assert.is_true(p.bytes > points[i - 1].bytes) end
            if p.bytes == knee then found = true end
        end
        assert.is_true(found, "the knee is one of the measured sizes")
    end)
end)

describe("the device's loop cap", function()
    it("is measured, and a job too long for it is widened or refused, never truncated", function()
        local cap = vk.loop_cap(h.ctx())
        assert.is_true(cap == false or cap > 0)
        if cap then
            -- 4,000 items x 64 dims: 63 candidates per thread at 64 threads is
            -- 4,095 iterations; at 8 threads it would not fit, so it widens.
            local e = divgpu.synth{ n = 4000, dim = 64, seed = 13 }
            local job = vk.job(h.ctx(), e, { shape = "baseline" })
            assert.is_true(job.workgroup_size >= 64)
            local refused, err = vk.job(h.ctx(), e, { workgroup_size = 1 })
            assert.is_nil(refused)
            assert.matches("stops shader loops after " .. cap, err, 1, true)
        end
    end)
end)

describe("work in flight", function()
    teardown(h.assert_no_validation_messages)
    it("keeps what a submission uses alive until its fence signals, even when Lua drops it", function()
        local ctx = h.ctx()
        local e = divgpu.synth{ n = 400, dim = 64, seed = 8 }
        local job = vk.job(ctx, e)
        local batch = job:batch(h.range(0, 32), 64, 1)
        local rec = batch.recorder
        batch:record(1, 40)
        rec:submit()
        -- Drop every Lua reference to the buffers, bind group and job, collect.
        local winners_buffer = batch.winners_buffer
        batch, job = nil, nil
        collectgarbage("collect")
        collectgarbage("collect")
        assert.is_number(rec:wait())
        local out = winners_buffer:read("u32")
        local expected = divgpu.mirror(e, h.range(0, 32), 41)
        for s = 0, 31 do
            for t = 1, 40 do
                assert.are.equal(expected[s * 41 + t + 1], out[s * 64 + t + 1])
            end
        end
    end)

    it("the chunk sizes after the warm-up are sized to the target, not pinned at 1", function()
        local e = divgpu.synth{ n = 300, dim = 16, seed = 9 }
        local _, stats = driver.run{ ctx = h.ctx(), embeddings = e, starts = h.range(0, 8), length = 300,
                                     in_flight = 2, target_seconds = 0.05, method = "direct" }
        local sizes = stats.chunk_sizes
        assert.is_true(#sizes >= 3)
        local biggest = 0
        for i = 3, #sizes do biggest = math.max(biggest, sizes[i]) end
        assert.is_true(biggest > 1, "chunks stayed at 1 step: " .. table.concat(sizes, ","))
    end)
end)
