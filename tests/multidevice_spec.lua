-- Several devices in one process (driver.run{ contexts = ... }): here two
-- contexts opened on the one lavapipe device, each with its own queue,
-- submissions and job. The batches are dealt to whichever is free and come
-- back in the order of the starts, so the output is the bytes of one device's
-- run. The twin gives the second context a perturbed kernel: the same check
-- must then fail, which also shows that its batches land in the output.
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local device = require "divgpu.device"
local driver = require "divgpu.driver"
local h = require "tests.helpers"

local second
local function second_ctx()
    if not second then second = vk.open{ device = os.getenv("DIVGPU_DEVICE") } end
    return second
end

--- Both contexts had batches (else the "two-device" run ran on one).
local function assert_both_worked(stats, total)
    assert.are.equal(2, #stats.devices)
    local sum = 0
    for d, share in ipairs(stats.devices) do
        assert(share.sequences > 0 and share.chunks > 0, "device " .. d .. " ran no batch")
        sum = sum + share.sequences
    end
    assert.are.equal(total, sum)
end

describe("two contexts in one process", function()
    teardown(function()
        h.assert_no_validation_messages()
        if second then
            local messages = second:validation_messages()
            assert(#messages == 0, #messages .. " validation message(s):\n" .. table.concat(messages, "\n"))
        end
    end)

    local e = divgpu.synth{ n = 160, dim = 24, clusters = 6, seed = 8, noise = 1e-5 }
    local starts, length = h.range(0, 30), 160
    local expected = divgpu.mirror(e, starts, length)

    for _, method in ipairs{ "direct", "gram" } do
        it(method .. ": byte-identical to one context and to the mirror, both contexts used", function()
            local one = driver.run{ ctx = h.ctx(), embeddings = e, starts = starts, length = length,
                                    method = method, batch = 4 }
            local two, stats = driver.run{ contexts = { h.ctx(), second_ctx() }, embeddings = e, starts = starts,
                                           length = length, method = method, batch = 4 }
            assert_both_worked(stats, #starts)
            assert.are.equal(8, stats.batches)
            local d = divgpu.first_difference(two, one, length)
            assert(d == nil, h.describe_difference(d))
            d = divgpu.first_difference(two, expected, length)
            assert(d == nil, h.describe_difference(d))
        end)
    end

    it("twin: a perturbed kernel on the second context is caught", function()
        local good = vk.job(h.ctx(), e, { precision = "fp32" })
        local wrong = vk.job(second_ctx(), e, { precision = "fp32",
            spirv = vk.shader(second_ctx(), "baseline", { DIVGPU_PERTURB = 1 }) })
        local out, stats = driver.run{ jobs = { good, wrong }, embeddings = e, starts = starts, length = length,
                                       batch = 4 }
        assert_both_worked(stats, #starts)
        assert(divgpu.first_difference(out, expected, length),
               "the perturbed second context gave the contract's output: the check is vacuous")
        -- The same jobs the other way round: the first context's rows now differ.
        local out2 = driver.run{ jobs = { wrong, good }, embeddings = e, starts = starts, length = length, batch = 4 }
        assert(divgpu.first_difference(out2, expected, length), "the perturbed first context was not caught")
    end)

    it("streams batches in the order of the starts, each exactly once", function()
        local seen, rows = {}, divgpu.array("u32", #starts * length)
        local _, stats = driver.run{ contexts = { h.ctx(), second_ctx() }, embeddings = e, starts = starts,
            length = length, method = "gram", batch = 3,
            on_batch = function(first, count, sequences)
                seen[#seen + 1] = first
                for i = 1, count * length do rows[first * length + i] = sequences[i] end
            end }
        assert_both_worked(stats, #starts)
        assert.are.same({ 0, 3, 6, 9, 12, 15, 18, 21, 24, 27 }, seen)
        local d = divgpu.first_difference(rows, expected, length)
        assert(d == nil, h.describe_difference(d))
    end)

    it("a stop keeps a prefix of whole batches, every one of them exact", function()
        local chunks, delivered = 0, {}
        local _, stats = driver.run{ contexts = { h.ctx(), second_ctx() }, embeddings = e, starts = starts,
            length = length, method = "direct", batch = 3, target_seconds = 0.001,
            on_chunk = function() chunks = chunks + 1 end,
            stop = function() return chunks >= 40 and "halt" or nil end,
            on_batch = function(first, count, sequences)
                delivered[#delivered + 1] = first
                local want = divgpu.array("u32", count)
                for i = 1, count do want[i] = starts[first + i] end
                local d = divgpu.first_difference(sequences, divgpu.mirror(e, want, length), length)
                assert(d == nil, h.describe_difference(d))
            end }
        assert.are.equal("halt", stats.stopped)
        assert(stats.sequences < #starts, "the stop came after the last batch: nothing was tested")
        for i, first in ipairs(delivered) do assert.are.equal((i - 1) * 3, first) end
        assert.are.equal(#delivered * 3, stats.sequences)
    end)

    it("default batches: at least one per device, equal in size", function()
        local _, stats = driver.run{ contexts = { h.ctx(), second_ctx() }, embeddings = e, starts = h.range(0, 5),
                                     length = 6, method = "direct" }
        assert.are.equal(2, stats.batches)
        assert.are.equal(3, stats.batch_size)
        assert_both_worked(stats, 5)
    end)

    it("more contexts than sequences: only as many lanes as sequences, the rows exact", function()
        local two = h.range(3, 5)
        local out, stats = driver.run{ contexts = { h.ctx(), second_ctx(), h.ctx() }, embeddings = e, starts = two,
                                       length = 7, method = "direct" }
        assert.are.equal(2, #stats.devices)
        local d = divgpu.first_difference(out, divgpu.mirror(e, two, 7), 7)
        assert(d == nil, h.describe_difference(d))
    end)

    it("a stop after the last batch stops nothing; progress counts every finished sequence", function()
        local last
        local out, stats = driver.run{ contexts = { h.ctx(), second_ctx() }, embeddings = e, starts = h.range(0, 8),
            length = 5, method = "gram", batch = 4,
            on_progress = function(p) last = p end,
            stop = function() return last and last.sequences == 8 and "late" or nil end }
        assert.is_nil(stats.stopped)
        assert.is_not_nil(out)
        assert.are.equal(8, last.sequences)
        -- Twin: a stop before the end does stop the run.
        local _, stopped = driver.run{ contexts = { h.ctx(), second_ctx() }, embeddings = e, starts = h.range(0, 8),
            length = 5, method = "gram", batch = 4, stop = function() return "early" end }
        assert.are.equal("early", stopped.stopped)
    end)

    it("after a stop, the devices' shares add up to the sequences delivered", function()
        local chunks = 0
        local _, stats = driver.run{ contexts = { h.ctx(), second_ctx() }, embeddings = e, starts = starts,
            length = length, method = "gram", batch = 3, target_seconds = 0.001,
            on_chunk = function() chunks = chunks + 1 end,
            stop = function() return chunks >= 30 and "halt" or nil end, on_batch = function() end }
        assert.are.equal("halt", stats.stopped)
        local sum = 0
        for _, share in ipairs(stats.devices) do sum = sum + share.sequences end
        assert.are.equal(stats.sequences, sum)
        assert.are.equal(stats.sequences * (length - 1), stats.gram.steps)
    end)

    it("device.await yields while the GPU works, in a coroutine given to yield_in only", function()
        local ctx = h.ctx()
        local function yields_while_waiting(register)
            local rec = h.spin_recorder(ctx, 10)
            local co = coroutine.create(function() rec:submit() return device.await(ctx, rec) end)
            if register then device.yield_in(co) end
            local yields = -1
            repeat
                assert(coroutine.resume(co))
                yields = yields + 1
            until coroutine.status(co) == "dead"
            return yields
        end
        assert(yields_while_waiting(true) > 0, "device.await did not yield in a registered coroutine")
        -- Twin: an unregistered coroutine (a caller's own) is not yielded from.
        assert.are.equal(0, yields_while_waiting(false))
    end)

    it("misuse: ctx with contexts, a job with several contexts, an empty list", function()
        local base = { embeddings = e, starts = starts, length = 4 }
        local function run_with(extra)
            local o = {}
            for k, v in pairs(base) do o[k] = v end
            for k, v in pairs(extra) do o[k] = v end
            return pcall(driver.run, o)
        end
        local ok, err = run_with{ ctx = h.ctx(), contexts = { h.ctx() } }
        assert.is_false(ok)
        assert.matches("give ctx or contexts, not both", err)
        ok, err = run_with{ contexts = {} }
        assert.is_false(ok)
        assert.matches("non%-empty list", err)
        ok, err = run_with{ contexts = { h.ctx(), second_ctx() }, job = vk.job(h.ctx(), e) }
        assert.is_false(ok)
        assert.matches("a job belongs to one context", err)
    end)
end)
