-- The native module's contracts that need no parity run: push-constant
-- validation, table loading errors, number parsing, the validation layer.
local divgpu = require "divgpu"
local h = require "tests.helpers"

local function tmpfile(content)
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(content)
    f:close()
    return path
end

local function load_error(content)
    local path = tmpfile(content)
    local ok, err = pcall(divgpu.load_embeddings, path)
    os.remove(path)
    assert.is_false(ok, "loading should have failed")
    -- mlua appends a Lua traceback after the message's one line.
    return tostring(err):match("^[^\n]*"), path
end

describe("push constants", function()
    teardown(h.assert_no_validation_messages)

    it("are read from the SPIR-V", function()
        assert.are.equal(16, divgpu.shader("baseline"):push_size())
    end)

    it("a wrong-size push is an error naming the shader and both sizes", function()
        local ctx = h.ctx()
        local e = divgpu.synth{ n = 40, dim = 8, seed = 3 }
        local job = require("divgpu.vk_compute").job(ctx, e)
        local batch = job:batch(divgpu.array("u32", { 0 }), 4)
        local rec = ctx:recorder()
        local ok, err = pcall(rec.dispatch, rec, batch.group, { 40, 8, 1 }, 1)
        assert.is_false(ok)
        err = tostring(err)
        assert.matches("shader 'baseline'", err, 1, true)
        assert.matches("16 bytes", err, 1, true)
        assert.matches("12 bytes", err, 1, true)
        -- The right size goes through.
        rec:dispatch(batch.group, { 40, 8, 1, 4 }, 1)
        rec:submit()
        rec:wait()
    end)
end)

describe("loading embeddings.json", function()
    it("accepts a bare array and an object, with the same bits", function()
        local a = tmpfile("[[1, 0.5], [0.25, -2]]")
        local b = tmpfile('{"model": "m", "ids": ["x", 7], "titles": ["a", "b"], "extra": {"k": [1]}, "embeddings": [[1, 0.5], [0.25, -2]]}')
        local ea, eb = divgpu.load_embeddings(a), divgpu.load_embeddings(b)
        assert.are.equal(2, ea.n)
        assert.are.equal(2, ea.dim)
        assert.is_true(ea:values():equals(eb:values()))
        assert.are.equal("m", eb.model)
        assert.are.equal("7", eb:id(1))
        assert.are.equal(64, #ea.sha256)
        assert.are_not.equal(ea.sha256, eb.sha256)
        os.remove(a)
        os.remove(b)
    end)

    it("parses to the nearest f64, then rounds to f32 (SPEC section 4)", function()
        -- Just above 1 + 2^-24: its nearest f64 is exactly 1 + 2^-24, a tie that
        -- rounds to even (1.0) in f32. A direct decimal -> f32 parse would give
        -- 1 + 2^-23, so this pins the two-step rounding of the contract.
        local path = tmpfile("[[1.00000005960464477539062500000001, 1], [0.1, 1]]")
        local v = divgpu.load_embeddings(path):values()
        os.remove(path)
        assert.are.equal(1.0, v[1])
        assert.are.equal(0.100000001490116119384765625, v[3])
    end)

    it("computes inv_norm in f64 with one rounding to f32", function()
        local path = tmpfile("[[3, 4], [1, 1]]")
        local inv = divgpu.load_embeddings(path):inv_norms()
        os.remove(path)
        assert.are.equal(0.20000000298023224, inv[1])     -- (f32)(1/5)
        assert.are.equal(0.70710676908493042, inv[2])     -- (f32)(1/sqrt(2))
    end)

    local bad = {
        { "ragged rows", "[[1, 2], [3]]", "row 1 has 1 values but row 0 has 2" },
        { "a non-number", '[[1, 2], [3, "x"]]', "row 1, column 1" },
        { "a value that overflows f32", "[[1, 2], [3, 1e39]]", "row 1, column 1: value 1e39 overflows f32" },
        { "a zero row", "[[1, 2], [0, 0], [1, 1]]", "row 1 is all zeros" },
        { "N < 2", "[[1, 2]]", "at least 2" },
        { "an empty file", "", "empty" },
        { "a truncated file", "[[1, 2], [3,", "truncated" },
        { "an object without embeddings", '{"model": "m"}', "no \"embeddings\"" },
        { "ids of the wrong length", '{"ids": ["a"], "embeddings": [[1], [2]]}', "\"ids\" has 1 entries" },
        { "values too large for the dot products", "[[1e30, 1], [1, 1]]", "could overflow f32" },
    }
    for _, c in ipairs(bad) do
        it("rejects " .. c[1] .. ", naming the file and the problem", function()
            local err, path = load_error(c[2])
            assert.matches(path, err, 1, true)
            assert.matches(c[3], err, 1, true)
        end)
    end

    it("rejects a missing file, naming it", function()
        local ok, err = pcall(divgpu.load_embeddings, "/nonexistent/embeddings.json")
        assert.is_false(ok)
        assert.matches("/nonexistent/embeddings.json", tostring(err), 1, true)
    end)
end)

describe("the job's arguments", function()
    local e = divgpu.synth{ n = 20, dim = 4, seed = 9 }
    it("rejects L > N and L = 0", function()
        assert.has_error(function() divgpu.mirror(e, divgpu.array("u32", { 0 }), 21) end)
        assert.has_error(function() divgpu.mirror(e, divgpu.array("u32", { 0 }), 0) end)
    end)
    it("rejects a start out of range", function()
        local ok, err = pcall(divgpu.mirror, e, divgpu.array("u32", { 3, 20 }), 5)
        assert.is_false(ok)
        assert.matches("start 20", tostring(err), 1, true)
    end)
end)

describe("the validation layer", function()
    it("is on in the suite and reports a deliberate misuse (non-vacuity)", function()
        assert.are.equal("1", os.getenv("DIVGPU_VALIDATION"), "make test sets DIVGPU_VALIDATION=1")
        -- int16 arithmetic needs the shaderInt16 feature, which divgpu never
        -- enables: the layer must say so. A separate context keeps the suite's
        -- own context free of messages.
        local ctx = divgpu.open{ device = os.getenv("DIVGPU_DEVICE"), validation = true, echo_validation = false }
        local spirv = divgpu.compile([[
            #version 450
            #extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
            layout(local_size_x = 1) in;
            layout(std430, binding = 0) buffer B { uint x[]; };
            void main() { int16_t a = int16_t(x[0]); x[0] = uint(a * a); }
        ]], { name = "needs-int16" })
        pcall(ctx.pipeline, ctx, { spirv = spirv })
        assert.is_true(#ctx:validation_messages() > 0)
    end)
end)
