-- The API's one error rule (docs/api.md#errors), native module and Lua
-- modules alike: misuse raises one line at the caller's position, without a
-- traceback; an expected failure returns nil and one line; a call with
-- nothing to return returns true. The checks' twins feed them a message
-- that breaks the rule (a traceback, another position, two lines).
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"
local h = require "tests.helpers"

local THIS = "tests/errors_spec.lua"

--- Why `err` (raised from line `line` of this file) is not one line at
--- that position, or nil.
local function not_at_caller(err, line)
    err = tostring(err)
    if err:find("\n") then return "more than one line: " .. err end
    if err:find("stack traceback", 1, true) then return "a traceback: " .. err end
    local file, at = err:match("^([^:]+):(%d+): ")
    if not file or not file:find(THIS, 1, true) or tonumber(at) ~= line then
        return "not at " .. THIS .. ":" .. line .. ": " .. err
    end
end

--- Why (v, err) is not an expected failure's nil and one line, or nil.
local function not_a_failure(v, err)
    if v ~= nil then return "a value: " .. tostring(v) end
    if type(err) ~= "string" or err == "" then return "no message" end
    if err:find("\n") then return "more than one line: " .. err end
end

--- The line number of the line that calls this.
local function here() return debug.getinfo(2, "l").currentline end

describe("the error rule", function()
    teardown(h.assert_no_validation_messages)

    it("native misuse raises one line at the caller's position", function()
        local line = here() + 1
        local ok, err = pcall(function() local a = divgpu.array("x", 1) return a end)
        assert.is_false(ok)
        assert.is_nil(not_at_caller(err, line))
        assert.matches("unknown dtype 'x'", err, 1, true)
        -- A method, and an argument mlua cannot convert: the same.
        local ctx = h.ctx()
        line = here() + 1
        ok, err = pcall(function() local b = ctx:buffer("many") return b end)
        assert.is_false(ok)
        assert.is_nil(not_at_caller(err, line))
        assert.matches("ctx:buffer: bad argument", err, 1, true)
        -- A method called on another type's object, shared or mutable.
        local a = divgpu.array("u32", { 1 })
        line = here() + 1
        ok, err = pcall(function() local b = ctx.buffer(a, 4) return b end)
        assert.is_false(ok)
        assert.is_nil(not_at_caller(err, line))
        assert.matches("ctx:buffer: called on something else than a LuaContext", err, 1, true)
        line = here() + 1
        ok, err = pcall(function() local s = a.set(ctx, 1, 2) return s end)
        assert.is_false(ok)
        assert.is_nil(not_at_caller(err, line))
        assert.matches("array:set: called on something else than a LuaHostArray", err, 1, true)
    end)

    it("native expected failures return nil and one line", function()
        assert.is_nil(not_a_failure(divgpu.load_embeddings("/nonexistent/embeddings.json")))
        assert.is_nil(not_a_failure(divgpu.open{ device = 99 }))
        assert.is_nil(not_a_failure(h.ctx():buffer(2 ^ 52, "too big")))
        assert.is_nil(not_a_failure(divgpu.files.read_cache("/nonexistent/cache.json")))
    end)

    it("a call with nothing to return returns true", function()
        local buf = h.ctx():buffer(16, "filled")
        assert.is_true(buf:fill(7))
        assert.is_true(divgpu.process.catch_signals(false))
    end)

    it("the Lua modules: misuse raises at the caller, a failure is nil and one line", function()
        local line = here() + 1
        local ok, err = pcall(function() local r = driver.run{ embeddings = h.shipped(), starts = { 0 }, length = 2 } return r end)
        assert.is_false(ok)
        assert.is_nil(not_at_caller(err, line))
        assert.matches("driver.run: ctx is required", err, 1, true)
        line = here() + 1
        ok, err = pcall(function() local j = vk.job(h.ctx(), h.shipped(), { shape = "round" }) return j end)
        assert.is_false(ok)
        assert.is_nil(not_at_caller(err, line))
        local batch = assert(vk.job(h.ctx(), h.shipped()):batch(h.range(0, 2), 4, 1))
        line = here() + 1
        ok, err = pcall(function() local r = batch:record(1, 5) return r end)
        assert.is_false(ok)
        assert.is_nil(not_at_caller(err, line))
        assert.matches("chunk of 5 steps exceeds the winners ring of 4", err, 1, true)
        assert.is_nil(not_a_failure(vk.open{ device = 99 }))
        -- A failure inside the driver (the job's kernel cannot run) comes back as nil, err.
        local result, why = driver.run{ ctx = h.ctx(), embeddings = divgpu.synth{ n = 4000, dim = 64, seed = 13 },
                                        starts = { 0 }, length = 3, method = "direct", workgroup_size = 1 }
        if vk.loop_cap(h.ctx()) then
            assert.is_nil(not_a_failure(result, why))
            assert.matches("stops shader loops after", why, 1, true)
        end
    end)

    it("a table past one storage buffer: refused at once by what binds it whole; the GEMM shape runs it in blocks", function()
        local device = require "divgpu.device"
        local ctx = h.ctx()
        local limit = math.min(ctx.info.max_storage_buffer_range, ctx.info.max_memory_allocation_size)
        local dim = 1024
        local n = math.floor(limit / (4 * dim))
        -- At the limit it fits (twin: one row more does not); halves fit twice the items.
        assert.is_true(device.table_fits(ctx, { n = n, dim = dim }, 4))
        local ok, why = device.table_fits(ctx, { n = n + 1, dim = dim }, 4)
        assert.is_nil(ok)
        assert.matches("does not fit one storage buffer of device", why, 1, true)
        assert.is_true(device.table_fits(ctx, { n = n + 1, dim = dim }, 2))
        -- A block size that is no count of candidates is misuse.
        local raised, err = pcall(driver.run, { ctx = ctx, embeddings = h.shipped_head(40), starts = { 0 }, length = 2,
                                                method = "direct", shape = "gemm", tuning = { gemm_table_block_items = 0 } })
        assert.is_false(raised)
        assert.matches("table_block_items must be a positive integer, not 0", tostring(err), 1, true)
        if limit < 2 ^ 28 then  -- lavapipe's 128 MiB: a table just past it, each method refusing it
            local big = divgpu.synth{ n = n + 1, dim = dim, clusters = 2, seed = 3 }
            for _, o in ipairs{ { method = "direct" }, { method = "direct", precision = "fp16-exact" }, { method = "gram" },
                                { method = "tensor" } } do
                local t0 = divgpu.clock.now()
                o.ctx, o.embeddings, o.starts, o.length = ctx, big, { 0 }, 2
                local result, err = driver.run(o)
                assert.is_nil(not_a_failure(result, err))
                assert.matches("does not fit one storage buffer", err, 1, true)
                assert(divgpu.clock.now() - t0 < 0.5, "refused after " .. (divgpu.clock.now() - t0) .. " s, not at once")
            end
            -- Auto leaves the shapes that bind it whole out, and the GEMM shape gives the mirror's bytes.
            local starts = divgpu.array("u32", { 0, n })
            local out, stats = driver.run{ ctx = ctx, embeddings = big, starts = starts, length = 3, method = "auto",
                                           shape = "auto" }
            assert(out, stats)
            assert.are.equal("gemm", stats.shape)
            assert.is_nil(divgpu.first_difference(out, divgpu.mirror(big, starts, 3), 3))
        end
    end)

    it("a method or shape that cannot compute the request is misuse, raised at the caller", function()
        local e = h.shipped_head(40)
        local line = here() + 1
        local ok, err = pcall(function() local r = driver.run{ ctx = h.ctx(), embeddings = e, starts = { 0 }, length = 3, method = "gram", precision = "fp16" } return r end)
        assert.is_false(ok)
        assert.is_nil(not_at_caller(err, line))
        assert.matches("driver.run: method gram: ", err, 1, true)
        line = here() + 1
        ok, err = pcall(function() local j = vk.job(h.ctx(), e, { shape = "gemm", workgroup_size = 32 }) return j end)
        assert.is_false(ok)
        assert.is_nil(not_at_caller(err, line))
        assert.matches("shape gemm takes no workgroup_size", err, 1, true)
        -- Twins: the same requests that can run do.
        assert(driver.run{ ctx = h.ctx(), embeddings = e, starts = { 0 }, length = 3, method = "gram" })
        assert(vk.job(h.ctx(), e, { shape = "gemm" }))
        -- A compiled shader with shape auto is the reference shape's, whatever the cost model would weigh.
        local spirv = assert(vk.shader(h.ctx(), "baseline"))
        local p = assert(require("divgpu.plan").make(h.ctx(), e, { method = "direct", shape = "auto", spirv = spirv, length = 3 }))
        assert.are.same({ "direct", "baseline" }, { p.method, p.shape })
        local out = assert(driver.run{ ctx = h.ctx(), embeddings = e, starts = { 0, 1 }, length = 3, method = "direct",
                                       shape = "auto", spirv = spirv })
        assert.is_nil(divgpu.first_difference(out, divgpu.mirror(e, divgpu.array("u32", { 0, 1 }), 3), 3))
    end)

    it("twins: the checks refuse a traceback, another position, two lines, a value", function()
        local line = 10
        assert.is_not_nil(not_at_caller(THIS .. ":10: x\nstack traceback:\n\t[C]: in ?", line))
        assert.is_not_nil(not_at_caller(THIS .. ":11: x", line))
        assert.is_not_nil(not_at_caller("lua/divgpu/driver.lua:10: x", line))
        assert.is_nil(not_at_caller(THIS .. ":10: x", line))
        assert.is_not_nil(not_a_failure(nil, "a\nb"))
        assert.is_not_nil(not_a_failure(true))
        assert.is_not_nil(not_a_failure(nil, nil))
    end)
end)
