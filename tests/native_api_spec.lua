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
    local e, err = divgpu.load_embeddings(path)
    os.remove(path)
    assert.is_nil(e, "loading should have failed")
    -- An expected failure: one line, no traceback.
    assert.is_nil(err:find("\n"), err)
    return err, path
end

describe("push constants", function()
    teardown(h.assert_no_validation_messages)

    it("are read from the SPIR-V", function()
        assert.are.equal(16, divgpu.shaders.get("baseline"):push_size())
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

    it("columns() is values() by columns, element for element; twin: values() itself is not", function()
        local e = divgpu.synth{ n = 67, dim = 5, clusters = 3, seed = 2 }  -- neither side a multiple of the transpose's blocks
        local v, c = e:values(), e:columns()
        assert.are.equal(67 * 5, #c)
        for i = 0, 66 do
            for d = 0, 4 do assert.are.equal(v[i * 5 + d + 1], c[d * 67 + i + 1]) end
        end
        assert.is_true(c:equals(v:transposed(67, 5)))
        assert.is_false(c:equals(v))
    end)

    it("parses to the nearest f64, then rounds to f32 (docs/contract.md#fp32-chain)", function()
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
        local e, err = divgpu.load_embeddings("/nonexistent/embeddings.json")
        assert.is_nil(e)
        assert.matches("/nonexistent/embeddings.json", err, 1, true)
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
        local spirv = divgpu.shaders.compile([[
            #version 450
            #extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
            layout(local_size_x = 1) in;
            layout(std430, binding = 0) buffer B { uint x[]; };
            void main() { int16_t a = int16_t(x[0]); x[0] = uint(a * a); }
        ]], { name = "needs-int16" })
        pcall(ctx.pipeline, ctx, { spirv = spirv })
        assert.is_true(#ctx:validation_messages() > 0)
    end)

    -- x[0] = y[0] + 1 on binding 0 (written) and 1 (read): the hazard specs' kernel.
    local function copy_plus_one(ctx)
        return ctx:pipeline{ spirv = divgpu.shaders.compile([[
            #version 450
            layout(local_size_x = 1) in;
            layout(std430, binding = 0) buffer Out { uint x[]; };
            layout(std430, binding = 1) readonly buffer In { uint y[]; };
            void main() { x[0] = y[0] + 1u; }
        ]], { name = "copy-plus-one" }) }
    end

    it("checks synchronization: a missing barrier between dispatches is reported, its twin is not", function()
        local function hazard_messages(with_barrier)
            local ctx = divgpu.open{ device = os.getenv("DIVGPU_DEVICE"), validation = true, echo_validation = false }
            local pipeline = copy_plus_one(ctx)
            local a, b = ctx:buffer(16, "a"), ctx:buffer(16, "b")
            a:fill(0)
            b:fill(0)
            local rec = ctx:recorder()
            rec:dispatch(ctx:bind(pipeline, { a, b }), {}, 1)     -- writes a
            if with_barrier then rec:barrier() end
            rec:dispatch(ctx:bind(pipeline, { b, a }), {}, 1)     -- reads a
            rec:submit()
            rec:wait()
            return table.concat(ctx:validation_messages(), "\n")
        end
        assert.matches("SYNC-HAZARD-READ-AFTER-WRITE", hazard_messages(false), 1, true)
        assert.are.equal("", hazard_messages(true))
    end)

    it("checks submissions too: one chunk's writes reach the next without a barrier of the caller's", function()
        local ctx = divgpu.open{ device = os.getenv("DIVGPU_DEVICE"), validation = true, echo_validation = false }
        -- The layer's QueueSubmit check is on (set by the module unless the user set the variable).
        assert.matches("VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT", os.getenv("VK_LAYER_ENABLES"), 1, true)
        local pipeline = copy_plus_one(ctx)
        local a, b = ctx:buffer(16, "a"), ctx:buffer(16, "b")
        a:fill(0)
        b:fill(0)
        local first, second = ctx:recorder(), ctx:recorder()
        first:dispatch(ctx:bind(pipeline, { a, b }), {}, 1)     -- writes a, no barrier after
        first:submit()
        second:dispatch(ctx:bind(pipeline, { b, a }), {}, 1)    -- reads a in the next submission
        second:submit()
        first:wait()
        second:wait()
        assert.are.equal(2, b:read("u32", 1)[1])
        -- Before each recording began with a barrier, the layer reported a
        -- READ_AFTER_WRITE hazard in vkQueueSubmit here.
        assert.are.equal("", table.concat(ctx:validation_messages(), "\n"))
    end)
end)

-- Misuse of GPU objects is an error naming the object and the rule, never
-- undefined behaviour; each case has a twin that stays inside the rule and
-- must succeed, so the error comes from the rule and not from elsewhere.
describe("GPU object misuse", function()
    teardown(h.assert_no_validation_messages)

    local function first_line(err) return (tostring(err):match("^[^\n]*")) end
    local COUNT_SHADER = [[
        #version 450
        layout(local_size_x = 1) in;
        layout(std430, binding = 0) buffer B { uint x[]; };
        void main() { x[0] = x[0] + 1u; }
    ]]

    it("objects of two contexts cannot be mixed", function()
        local a = h.ctx()
        local b = divgpu.open{ device = os.getenv("DIVGPU_DEVICE") }
        assert.are_not.equal(a.id, b.id)
        local spirv = divgpu.shaders.compile(COUNT_SHADER, { name = "count" })
        local pa, pb = a:pipeline{ spirv = spirv }, b:pipeline{ spirv = spirv }
        local ba, bb = a:buffer(16, "of a"), b:buffer(16, "of b")
        ba:fill(0)
        bb:fill(0)
        -- A buffer of b bound to a's pipeline.
        local ok, err = pcall(a.bind, a, pa, { bb })
        assert.is_false(ok)
        err = first_line(err)
        assert.matches("buffer 'of b' bound to shader 'count' belongs to context #" .. b.id, err, 1, true)
        assert.matches("not to context #" .. a.id, err, 1, true)
        assert.matches("objects of two contexts cannot be mixed", err, 1, true)
        -- b's pipeline bound through a.
        ok, err = pcall(a.bind, a, pb, { bb })
        assert.is_false(ok)
        assert.matches("pipeline 'count' belongs to context #" .. b.id, first_line(err), 1, true)
        -- A referenced buffer of b.
        ok, err = pcall(a.bind, a, pa, { ba }, { bb })
        assert.is_false(ok)
        assert.matches("referenced buffer 'of b'", first_line(err), 1, true)
        -- b's bind group recorded on a's recorder.
        local gb = b:bind(pb, { bb })
        local rec = a:recorder()
        ok, err = pcall(rec.dispatch, rec, gb, {}, 1)
        assert.is_false(ok)
        assert.matches("bind group of shader 'count' belongs to context #" .. b.id, first_line(err), 1, true)
        -- Twins: each object with its own context works (and the failed
        -- dispatch left a's recorder usable).
        rec:dispatch(a:bind(pa, { ba }), {}, 1)
        rec:submit()
        rec:wait()
        local rb = b:recorder()
        rb:dispatch(gb, {}, 1)
        rb:submit()
        rb:wait()
        assert.are.equal(1, ba:read("u32", 1)[1])
        assert.are.equal(1, bb:read("u32", 1)[1])
    end)

    it("an offset near 2^64 is an error, not a wrapped copy", function()
        local ctx = h.ctx()
        local buf = ctx:buffer(64, "small")
        local four = divgpu.array("u32", { 1, 2, 3, 4 })
        local near = 2 ^ 64 - 4096           -- the largest double below 2^64 with room
        for _, case in ipairs{
            { "write", function() buf:write(four, near) end, "upload of 16 bytes at offset" },
            { "read", function() buf:read("u32", 4, near) end, "download of 16 bytes at offset" },
            { "read count", function() buf:read("f64", 2 ^ 62, 0) end, "too many bytes" },
            { "write past the end", function() buf:write(four, 52) end, "upload of 16 bytes at offset 52" },
        } do
            local ok, err = pcall(case[2])
            assert.is_false(ok, case[1])
            err = first_line(err)
            assert.matches(case[3], err, 1, true)
            assert.matches("buffer 'small'", err, 1, true)
        end
        -- Twin: the last 16 bytes, exactly, are fine.
        buf:write(four, 48)
        assert.is_true(buf:read("u32", 4, 48):equals(four))
    end)

    it("an array too big for memory is an error, not an abort", function()
        -- Out of memory is an expected failure: nil and the message.
        local none, err = divgpu.array("f64", 1e12)
        assert.is_nil(none)
        assert.matches("out of host memory: an array of 1000000000000 f64 values", err, 1, true)
        none, err = divgpu.array("u32", 1e300)
        assert.is_nil(none)
        assert.matches("out of host memory", err, 1, true)
        none, err = divgpu.jobs.initial_masks(divgpu.array("u32", { 0, 1 }), 2 ^ 52)
        assert.is_nil(none)
        assert.matches("out of host memory", err, 1, true)
        -- A length that is not whole is misuse: it raises.
        local ok
        ok, err = pcall(divgpu.array, "u32", 2.5)
        assert.is_false(ok)
        assert.matches("not a whole number", first_line(err), 1, true)
        -- Twin: a large array that fits is allocated, zeroed.
        local a = divgpu.array("f64", 1e6)
        assert.are.equal(1e6, #a)
        assert.are.equal(0, a[1e6])
    end)

    it("a buffer past the device's largest allocation is out of device memory", function()
        local ctx = h.ctx()
        local none, err = ctx:buffer(2 ^ 52, "huge")
        assert.is_nil(none)
        assert.matches("^out of device memory: buffer 'huge' of 4503599627370496 bytes exceeds the largest allocation", err)
        -- The context stays usable.
        local b = ctx:buffer(8, "fine")
        b:fill(7)
        assert.are.equal(7, b:read("u32")[2])
    end)

    it("the timeout is the context's, from open{timeout=} or DIVGPU_TIMEOUT_S", function()
        assert.are.equal(tonumber(os.getenv("DIVGPU_TIMEOUT_S")) or 600, h.ctx().timeout)
        local ok, err = pcall(divgpu.open, { device = os.getenv("DIVGPU_DEVICE"), timeout = -1 })
        assert.is_false(ok)
        assert.matches("open{timeout=}: the timeout must be a number of seconds > 0", first_line(err), 1, true)
        local ctx = divgpu.open{ device = os.getenv("DIVGPU_DEVICE"), timeout = 2.5 }
        assert.are.equal(2.5, ctx.timeout)
    end)
end)

describe("ctx:begin_upload_table", function()
    teardown(h.assert_no_validation_messages)

    it("uploads the table by rows and by columns straight from it; another layout is refused by name", function()
        local ctx = h.ctx()
        -- 300 x 19: columns in tasks of 8 leave a short last task.
        local e = assert(divgpu.synth{ n = 300, dim = 19, clusters = 4, seed = 3 })
        local rows, columns = e:values(), e:columns()
        for layout, want in pairs{ rows = rows, columns = columns } do
            local buf, upload = ctx:begin_upload_table(e, layout, "table " .. layout)
            upload:wait()
            assert.is_true(upload:done())
            local got = assert(buf:read("f32"))
            assert.are.equal(#want, #got)
            local differ = 0
            for i = 1, #want do if got[i] ~= want[i] then differ = differ + 1 end end
            assert.are.equal(0, differ, layout)
        end
        -- Twin: the columns are not the rows (the check above can see a wrong layout).
        local buf, upload = ctx:begin_upload_table(e, "columns")
        upload:wait()
        assert.are_not.equal(rows[2], assert(buf:read("f32"))[2])
        local ok, err = pcall(ctx.begin_upload_table, ctx, e, "diagonal")
        assert.is_false(ok)
        assert.truthy(tostring(err):find('layout must be "rows" or "columns", got "diagonal"', 1, true), tostring(err))
    end)
end)

describe("objects made on a thread of their own (ctx:begin_pipeline, ctx:begin_buffers)", function()
    teardown(h.assert_no_validation_messages)
    local kernel = require "divgpu.kernel"

    local function request(d)
        return { spirv = divgpu.shaders.get("baseline"), name = "baseline (pending)",
                 specialization = { [0] = 64, [1] = 8 },
                 interface = { bindings = d.bindings, push = d.push, constants = { workgroup_size = 0, max_dim = 1 } } }
    end

    it("a pending pipeline is ctx:pipeline's; a wrong interface raises at wait, its twin goes through", function()
        local ctx = h.ctx()
        local d = kernel.descriptor("baseline")
        local pending = ctx:begin_pipeline(request(d))
        local p, seconds = pending:wait()
        assert.is_true(pending:done())
        local direct = ctx:pipeline(request(d))
        assert.are.equal(direct.push_size, p.push_size)
        assert.are.same(direct.bindings, p.bindings)
        assert.is_true(seconds >= 0)
        assert.are.equal(p.name, (pending:wait()).name)  -- a second wait gives the same
        -- Twin: two push fields swapped are refused, at wait, as ctx:pipeline refuses them.
        local wrong = request(d)
        wrong.interface.push = { "num_items", "dim", "ring", "step" }
        local pending_wrong = ctx:begin_pipeline(wrong)
        local ok, err = pcall(pending_wrong.wait, pending_wrong)
        assert.is_false(ok)
        local _, direct_err = pcall(ctx.pipeline, ctx, wrong)
        assert.are.equal(tostring(direct_err):match("kernel .*"), tostring(err):match("kernel .*"))
    end)

    it("kernel.begin gives kernel.new's kernel, its pipeline made meanwhile", function()
        local ctx = h.ctx()
        local d = kernel.descriptor("baseline")
        local pending = assert(kernel.begin(ctx, d, { constants = { workgroup_size = 64, max_dim = 8 } }))
        local k = assert(pending:wait())
        assert.are.equal("baseline", k.variant)
        assert.are.equal(16, k.pipeline.push_size)
        assert.is_true(pending.seconds >= 0)
        local ok, err = pcall(kernel.begin, ctx, d, { constants = { nothing = 1 } })
        assert.is_false(ok)
        assert.matches("kernel 'baseline': no specialization constant 'nothing'", tostring(err), 1, true)
    end)

    it("pending buffers are allocated in order; one too large is out of device memory at wait", function()
        local ctx = h.ctx()
        local list = assert(ctx:begin_buffers{ { 64, "first" }, { 4096, "second" } }:wait())
        assert.are.equal(2, #list)
        assert.are.equal("first", list[1].name)
        assert.are.equal(4096, list[2].size)
        list[2]:fill(9)
        assert.are.equal(9, list[2]:read("u32")[1024])
        -- The first ones may be taken before the rest are made.
        local pending = ctx:begin_buffers{ { 16, "a" }, { 32, "b" }, { 48, "c" } }
        local first = pending:first(2)
        assert.are.equal(2, #first)
        assert.are.equal("b", first[2].name)
        assert.is_true(pending:ready() >= 2)
        assert.are.equal(3, #pending:first(3))
        assert.are.equal(48, pending:wait()[3].size)
        assert.are.equal(0, ctx:begin_pipeline(request(kernel.descriptor("baseline"))):ready())
        -- rec:update writes into such a buffer by the command stream; twin: the words around are untouched.
        local target = pending:wait()[3]
        target:fill(5)
        local rec = ctx:recorder()
        rec:update(target, divgpu.array("u32", { 11, 12 }), 8)
        rec:submit()
        rec:wait()
        local words = target:read("u32")
        assert.are.same({ 5, 5, 11, 12, 5 }, { words[1], words[2], words[3], words[4], words[5] })
        local refused = { pcall(rec.update, rec, target, divgpu.array("u32", { 1 }), 2) }
        assert.is_false(refused[1])
        assert.matches("multiples of 4", tostring(refused[2]), 1, true)
        refused = { pcall(rec.update, rec, target, divgpu.array("u32", 13), 0) }
        assert.is_false(refused[1])
        assert.matches("does not fit buffer 'c'", tostring(refused[2]), 1, true)
        local none, err = ctx:begin_buffers{ { 64, "fine" }, { 2 ^ 52, "huge" } }:wait()
        assert.is_nil(none)
        assert.matches("^out of device memory: buffer 'huge' of 4503599627370496 bytes exceeds the largest allocation", err)
        -- Asked for more than were made before the error: the error.
        none, err = ctx:begin_buffers{ { 64, "fine" }, { 2 ^ 52, "huge" } }:first(2)
        assert.is_nil(none)
        assert.matches("^out of device memory: buffer 'huge'", err)
        local ok, bad = pcall(ctx.begin_buffers, ctx, { { "many", "bad" } })
        assert.is_false(ok)
        assert.matches("begin_buffers(): entry 1 must start with a byte count", tostring(bad), 1, true)
    end)
end)

describe("store_winners", function()
    teardown(h.assert_no_validation_messages)

    -- A ring [2][4] holding step t of row r as 100 r + t (slot t % 4).
    local ring = divgpu.array("u32", { 4, 1, 2, 3, 104, 101, 102, 103 })
    local function stored(source)
        local out = divgpu.array("u32", 2 * 6)
        divgpu.jobs.store_winners(out, source, 0, 2, 4, 2, 3, 6)  -- steps 2, 3, 4
        return out:to_table()
    end

    it("reads the same words from the mapped buffer as from an array, only the chunk's steps", function()
        local buffer = h.ctx():buffer(8 * 4, "winners ring", "host")
        buffer:write(ring)
        local want = { 0, 0, 2, 3, 4, 0, 0, 0, 102, 103, 104, 0 }
        assert.are.same(want, stored(ring))
        assert.are.same(want, stored(buffer))
        -- Twin: another ring's words give other rows.
        buffer:write(divgpu.array("u32", { 9, 9, 9, 9, 9, 9, 9, 9 }))
        assert.are_not.same(want, stored(buffer))
    end)

    it("refuses sizes past the buffer or the result", function()
        local small = h.ctx():buffer(4 * 4, "short ring", "host")
        local ok, err = pcall(divgpu.jobs.store_winners, divgpu.array("u32", 12), small, 0, 2, 4, 2, 3, 6)
        assert.is_false(ok)
        assert.matches("sizes do not fit", tostring(err))
        ok, err = pcall(divgpu.jobs.store_winners, divgpu.array("u32", 11), ring, 0, 2, 4, 2, 3, 6)
        assert.is_false(ok)
        assert.matches("sizes do not fit", tostring(err))
    end)
end)
