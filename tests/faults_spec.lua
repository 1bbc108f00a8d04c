-- Faults of a broken device, injected through the fault-injection build of
-- the module (build/fault/divgpu.so: `cargo build --features
-- fault-injection`; `make test` builds it and runs this spec with it:
-- luajit tests/run_busted.lua --run=faults). Each fault gives its own
-- one-line error; after a device loss or a timeout the context is dead
-- (every later call says so, and what the GPU may still use is leaked, not
-- freed); the process then opens a new context and runs a job correctly.
-- Each injected fault has a twin: the same step without the fault succeeds.
local divgpu = require "divgpu"
local testing = require "divgpu.testing"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"
local h = require "tests.helpers"

local DEVICE = os.getenv("DIVGPU_DEVICE")

local function first_line(err) return (tostring(err):match("^[^\n]*")) end

--- A small direct job on ctx, checked against the CPU mirror; its
--- failure, if any, is returned as nil, err.
local function small_job(ctx)
    local e = divgpu.synth{ n = 70, dim = 5, seed = 11 }
    local starts = divgpu.array("u32", { 0, 3, 69 })
    local gpu, err = driver.run{ ctx = ctx, embeddings = e, starts = starts, length = 20, method = "direct" }
    if not gpu then return nil, err end
    local cpu = divgpu.mirror(e, starts, 20)
    assert.is_nil(divgpu.first_difference(gpu, cpu, 20))
    return true
end

--- A batch of a small job on a new context, one chunk recorded.
local function recorded_batch()
    local ctx = assert(vk.open{ device = DEVICE })
    local e = divgpu.synth{ n = 64, dim = 4, seed = 5 }
    local batch = assert(assert(vk.job(ctx, e)):batch(divgpu.array("u32", { 0, 1 }), 8))
    assert(batch:record(1, 4))
    return ctx, batch
end

--- Asserts that ctx refuses work after `what` (its message says which),
--- as an expected failure: nil and one line.
local function assert_dead(ctx, what)
    for _, call in ipairs{
        function() return ctx:recorder() end,
        function() return ctx:buffer(16, "after") end,
        function() return ctx:upload(divgpu.array("u32", { 1 })) end,
    } do
        local ok, err = call()
        assert.is_nil(ok)
        assert.are.equal("this context is dead after an earlier " .. what .. "; open a new context to continue", err)
    end
end

describe("injected faults", function()
    after_each(function() if testing.inject_fault then testing.inject_fault("none") end end)

    it("are compiled into the module under test", function()
        assert.is_function(testing.inject_fault,
            "this spec needs the fault-injection build: luajit tests/run_busted.lua --run=faults")
        local ok, err = pcall(testing.inject_fault, "meteor")  -- misuse: it raises
        assert.is_false(ok)
        assert.matches("unknown fault 'meteor'", first_line(err), 1, true)
    end)

    it("device lost while waiting: its message, a dead context, then a new context works", function()
        -- Twin: the same chunk without the fault.
        local _, fine = recorded_batch()
        assert(fine:submit())
        assert(fine:wait())
        local ctx, batch = recorded_batch()
        assert(batch:submit())
        testing.inject_fault("device-lost")
        local ok, err = batch:wait()
        assert.is_nil(ok)
        assert.are.equal("GPU device lost in vkWaitForFences (driver reset or crash): this context is dead and "
            .. "its results are unusable; open a new context to continue", err)
        assert_dead(ctx, "GPU device loss")
        -- The recorder is clearly dead too, and collecting it frees nothing.
        ok, err = batch:wait()
        assert.is_nil(ok)
        assert.matches("dead after an earlier GPU device loss", err, 1, true)
        batch, ctx = nil, nil
        collectgarbage()
        collectgarbage()
        assert(small_job(assert(vk.open{ device = DEVICE })))
    end)

    it("device lost at submit: the recorder is dead, not half-submitted", function()
        local ctx, batch = recorded_batch()
        testing.inject_fault("device-lost-at-submit")
        local ok, err = batch:submit()
        assert.is_nil(ok)
        assert.matches("^GPU device lost in vkQueueSubmit", err)
        ok, err = batch:record(5, 1)
        assert.is_nil(ok)
        assert.matches("dead after an earlier GPU device loss", err, 1, true)
        assert_dead(ctx, "GPU device loss")
        assert(small_job(assert(vk.open{ device = DEVICE })))
    end)

    it("a timeout: its message, a dead context, then a new context works", function()
        local ctx, batch = recorded_batch()
        assert(batch:submit())
        testing.inject_fault("timeout")
        local ok, err = batch:wait()
        assert.is_nil(ok)
        assert.are.equal(string.format("GPU timeout: a submission did not finish within %g s (the limit is the "
            .. "context's timeout, DIVGPU_TIMEOUT_S or divgpu.open{timeout=}); this context is dead, open a new one "
            .. "to continue", ctx.timeout), err)
        assert_dead(ctx, "GPU timeout")
        assert(small_job(assert(vk.open{ device = DEVICE })))
    end)

    it("out of device memory: its message, and the same context carries on", function()
        local ctx = assert(vk.open{ device = DEVICE })
        testing.inject_fault("out-of-memory")
        local ok, err = ctx:buffer(1024, "scratch")
        assert.is_nil(ok)
        assert.are.equal("out of device memory: allocating buffer 'scratch' of 1024 bytes", err)
        -- In the middle of a job (the batch's first upload): the job fails, the context lives.
        testing.inject_fault("out-of-memory")
        ok, err = small_job(ctx)
        assert.is_nil(ok)
        assert.matches("^out of device memory: allocating buffer", err)
        assert(small_job(ctx))
        assert(small_job(assert(vk.open{ device = DEVICE })))
    end)

end)

-- Not injected: a real fence wait that runs out of time.
describe("a real timeout", function()
    --- ctx, and the wait's result: true and the seconds, or false and the error.
    local function long_submission(timeout, spent)
        local ctx = assert(divgpu.open{ device = DEVICE, timeout = timeout })
        local rec = h.spin_recorder(ctx, 20)
        assert(rec:submit())
        local seconds, err = rec:wait(spent)
        return ctx, seconds ~= nil, seconds or err
    end
    it("a submission longer than the context's timeout is a timeout error, and the process carries on", function()
        -- Twin: the same submission within a generous limit finishes.
        local _, ok = long_submission(600)
        assert.is_true(ok)
        local ctx, ok2, err = long_submission(0.001)
        assert.is_false(ok2)
        assert.matches("^GPU timeout: a submission did not finish within 0.001 s", err)
        assert_dead(ctx, "GPU timeout")
        assert(small_job(assert(vk.open{ device = DEVICE })))
    end)

    it("rec:wait(spent) waits only for what is left of the timeout (the driver's polling of several devices)", function()
        -- 600 s of limit, 599.999 of them spent polling: the wait has 1 ms left.
        local ctx, ok, err = long_submission(600, 599.999)
        assert.is_false(ok)
        assert.matches("^GPU timeout: a submission did not finish within 600 s", err)
        assert_dead(ctx, "GPU timeout")
        -- Twin: with only 1 s spent the same submission finishes.
        local _, ok2 = long_submission(600, 1)
        assert.is_true(ok2)
    end)
end)
