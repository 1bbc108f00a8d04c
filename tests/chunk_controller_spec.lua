-- Specs for divgpu.chunk_controller, driven by a simulated GPU whose cost per
-- iteration the test controls.  Run: luajit tests/run_busted.lua

local ChunkController = require "divgpu.chunk_controller"

local TARGET = 0.25

-- Runs `chunks` submissions against a simulated GPU.  cost(i) is the true
-- seconds per iteration during chunk i; report(i, n, seconds) may replace what
-- the "timer" reports.  Returns the list of { n =, seconds = } per chunk.
local function simulate(cc, chunks, cost, report, remaining)
    remaining = remaining or 1e12
    local log = {}
    for i = 1, chunks do
        if remaining < 1 then break end
        local n = cc:next_chunk(remaining)
        local seconds = n * cost(i)
        log[i] = { n = n, seconds = seconds }
        cc:observe(n, report and report(i, n, seconds) or seconds)
        remaining = remaining - n
    end
    return log
end

local function within(seconds, target, tolerance)
    return math.abs(seconds - target) <= tolerance * target
end

-- Index of the first chunk from which every later chunk is within tolerance.
local function settled_at(log, tolerance)
    local first
    for i = #log, 1, -1 do
        if not within(log[i].seconds, TARGET, tolerance) then break end
        first = i
    end
    return first
end

local function const(c) return function() return c end end

describe("chunk_controller", function()

    describe("with a constant cost", function()
        it("starts with the probe, then converges to ±10% of the target within 5 chunks", function()
            local cc = ChunkController.new{ target_seconds = TARGET }
            local log = simulate(cc, 30, const(1e-3))
            assert.are.equal(1, log[1].n)          -- default probe
            local s = settled_at(log, 0.10)
            assert.is_not_nil(s, "never settled within ±10%")
            assert.is_true(s <= 5, "settled only at chunk " .. tostring(s))
            -- and stays there: every chunk after settling is on target
            for i = s, #log do
                assert.is_true(within(log[i].seconds, TARGET, 0.10),
                               ("chunk %d took %g s"):format(i, log[i].seconds))
            end
        end)

        it("stays within ±10% under ±3% timer noise", function()
            math.randomseed(12345)
            local cc = ChunkController.new{ target_seconds = TARGET }
            local function noisy(_, _, seconds)
                return seconds * (0.97 + 0.06 * math.random())
            end
            local log = simulate(cc, 200, const(1e-3), noisy)
            for i = 6, #log do
                assert.is_true(within(log[i].seconds, TARGET, 0.10),
                               ("chunk %d took %g s"):format(i, log[i].seconds))
            end
        end)

        it("uses probe_iterations for the first chunk, capped by remaining", function()
            local cc = ChunkController.new{ probe_iterations = 8 }
            assert.are.equal(8, cc:next_chunk(100))
            assert.is_nil(cc:estimate())
            local cc2 = ChunkController.new{ probe_iterations = 8 }
            assert.are.equal(3, cc2:next_chunk(3))
        end)

        it("respects max_iterations", function()
            local cc = ChunkController.new{ max_iterations = 50 }
            local log = simulate(cc, 20, const(1e-6))
            for i = 1, #log do assert.is_true(log[i].n <= 50) end
            assert.are.equal(50, log[#log].n)
        end)
    end)

    describe("chunk size bounds", function()
        it("returns an integer in [1, remaining] for random costs, remainders and zero readings", function()
            math.randomseed(4242)
            local checked, ones, zeros = 0, 0, 0
            for _ = 1, 2000 do
                local max_s = 0.05 + math.random() * 0.95
                local cc = ChunkController.new{
                    target_seconds = max_s * (0.1 + 0.9 * math.random()),
                    max_seconds = max_s,
                    probe_iterations = math.random(1, 16),
                }
                local remaining = math.random() < 0.2 and 1 or math.random(1, 10 ^ math.random(0, 7))
                -- cost spans 1 ns .. 10 s per iteration, and may change each chunk
                local cost = 10 ^ (-9 + 10 * math.random())
                local zero_rate = math.random() < 0.3 and 1 or math.random() * 0.5
                for _ = 1, 40 do
                    if remaining < 1 then break end
                    local n = cc:next_chunk(remaining)
                    assert.is_number(n)
                    assert.are.equal(n, math.floor(n))
                    assert.is_true(n >= 1 and n <= remaining,
                                   ("n = %s with remaining = %s"):format(n, remaining))
                    if remaining == 1 then ones = ones + 1 end
                    local reading = n * cost
                    if math.random() < zero_rate then reading = 0; zeros = zeros + 1 end
                    cc:observe(n, reading)
                    local e = cc:estimate()
                    assert.is_true(e > 0 and e < math.huge, "estimate " .. tostring(e))
                    remaining = remaining - n
                    if math.random() < 0.1 then cost = cost * 10 ^ (2 * math.random() - 1) end
                    checked = checked + 1
                end
            end
            -- the interesting cases were actually exercised
            assert.is_true(checked > 10000)
            assert.is_true(ones > 100)
            assert.is_true(zeros > 1000)
        end)

        it("handles only-zero readings: finite chunks that still grow", function()
            local cc = ChunkController.new{}
            local sizes = {}
            for i = 1, 30 do
                local n = cc:next_chunk(1e9)
                sizes[i] = n
                cc:observe(n, 0)
            end
            for i = 2, #sizes do
                assert.is_true(sizes[i] <= 4 * sizes[i - 1], "growth limit broken at " .. i)
            end
            assert.is_true(sizes[#sizes] > 1000, "stuck at " .. sizes[#sizes])
            assert.is_true(sizes[#sizes] <= 1e9)   -- capped by remaining, not infinite
        end)

        it("returns 1 when remaining is 1, whatever the estimate", function()
            for _, cost in ipairs{ 0, 1e-9, 1e-3, 5 } do
                local cc = ChunkController.new{ probe_iterations = 4 }
                assert.are.equal(1, cc:next_chunk(1))
                cc:observe(1, cost)
                for _ = 1, 5 do
                    assert.are.equal(1, cc:next_chunk(1))
                    cc:observe(1, cost)
                end
            end
        end)

        it("never plans a chunk longer than max_seconds at the current estimate", function()
            math.randomseed(777)
            local planned = 0
            for _ = 1, 500 do
                local max_s = 0.1 + math.random() * 0.8
                -- target == max half of the time, where rounding up would overshoot
                local target = math.random() < 0.5 and max_s or max_s * math.random()
                local cc = ChunkController.new{ target_seconds = target, max_seconds = max_s }
                local cost = 10 ^ (-7 + 6 * math.random())
                cc:observe(1, cost)   -- an estimate before the first plan
                for _ = 1, 20 do
                    local e = cc:estimate()
                    local n = cc:next_chunk(1e12)
                    assert.is_true(n * e <= max_s * (1 + 1e-12),
                                   ("planned %d x %g s = %g s > %g s"):format(n, e, n * e, max_s))
                    if n > 1 then planned = planned + 1 end
                    cc:observe(n, n * cost * (0.5 + math.random()))
                end
            end
            assert.is_true(planned > 5000)
        end)

        it("returns 1 when a single iteration already exceeds max_seconds", function()
            local cc = ChunkController.new{}
            cc:observe(1, 3.0)
            assert.are.equal(1, cc:next_chunk(100))
        end)
    end)

    describe("estimate", function()
        it("is nil before the first observation, then the observed cost", function()
            local cc = ChunkController.new()
            assert.is_nil(cc:estimate())
            cc:observe(4, 0.02)
            assert.are.equal(0.005, cc:estimate())
        end)

        it("smooths a change within 2x but jumps on a change beyond 2x", function()
            local cc = ChunkController.new()
            cc:observe(10, 0.010)              -- 1 ms/iter
            cc:observe(10, 0.015)              -- 1.5 ms: noise, averaged in
            local e = cc:estimate()
            assert.is_true(e > 1.0e-3 and e < 1.5e-3, "smoothed estimate " .. e)
            cc:observe(10, 0.050)              -- 5 ms: regime change, taken as is
            assert.are.equal(5e-3, cc:estimate())
            cc:observe(10, 0.002)              -- 0.2 ms: regime change downwards
            assert.are.equal(2e-4, cc:estimate())
        end)

        it("counts a 0 s reading as the timer resolution, not as free", function()
            local cc = ChunkController.new{ timer_resolution = 1e-6 }
            cc:observe(10, 0)
            assert.are.equal(1e-7, cc:estimate())
        end)
    end)

    describe("when the cost changes", function()
        -- Settle at `before`, switch to `after` from chunk 21 on: chunk 21 is the
        -- one that meets the change unplanned.  At most 2 chunks may be off
        -- target; from the 3rd chunk after the change on, all are within ±20%.
        local function follows(before, after)
            local cc = ChunkController.new{ target_seconds = TARGET }
            local log = simulate(cc, 40, function(i) return i <= 20 and before or after end)
            assert.is_true(within(log[20].seconds, TARGET, 0.10), "not settled before the change")
            assert.is_false(within(log[21].seconds, TARGET, 0.20), "the change did not happen")
            for i = 23, #log do
                assert.is_true(within(log[i].seconds, TARGET, 0.20),
                               ("chunk %d (%d after the change) took %g s")
                               :format(i, i - 20, log[i].seconds))
            end
        end

        it("follows a tenfold rise in cost within 3 chunks", function()
            follows(1e-3, 1e-2)
        end)

        it("follows a tenfold fall in cost within 3 chunks", function()
            follows(1e-2, 1e-3)
        end)

        it("recovers from a probe that over-estimates the cost 100x within 6 chunks", function()
            local cc = ChunkController.new{ target_seconds = TARGET }
            local log = simulate(cc, 20, const(1e-3), function(i, _, seconds)
                return i == 1 and seconds * 100 or seconds
            end)
            local s = settled_at(log, 0.10)
            assert.is_not_nil(s, "never reached the target")
            assert.is_true(s <= 6, "reached the target only at chunk " .. tostring(s))
        end)

        it("limits growth after a probe that under-estimates the cost 1000x", function()
            local cc = ChunkController.new{ target_seconds = TARGET }
            local log = simulate(cc, 20, const(1e-3), function(i, _, seconds)
                return i == 1 and seconds / 1000 or seconds
            end)
            for i = 1, #log do
                assert.is_true(log[i].seconds <= 0.9, ("chunk %d took %g s"):format(i, log[i].seconds))
            end
            assert.is_not_nil(settled_at(log, 0.10))
        end)

        it("keeps working with several submissions in flight (late observations)", function()
            local cc = ChunkController.new{ target_seconds = TARGET }
            local cost = 1e-3
            local queue, log = {}, {}
            for i = 1, 40 do
                local n = cc:next_chunk(1e12)
                assert.is_true(n >= 1)
                queue[#queue + 1] = n
                log[i] = { n = n, seconds = n * cost }
                if #queue > 2 then   -- three in flight; oldest finishes
                    local done = table.remove(queue, 1)
                    cc:observe(done, done * cost)
                end
            end
            local s = settled_at(log, 0.10)
            assert.is_not_nil(s, "never reached the target")
            assert.is_true(s <= 12, "reached the target only at chunk " .. tostring(s))
        end)
    end)

    describe("argument errors", function()
        -- error(msg, 2) blames the caller: the message points at this file.
        local function fails(fn, pattern)
            local ok, err = pcall(fn)
            assert.is_false(ok, "expected an error")
            assert.matches(pattern, err)
            assert.matches("chunk_controller_spec", err)
        end

        it("rejects bad options in new()", function()
            fails(function() ChunkController.new{ target_seconds = -0.1 } end, "target_seconds")
            fails(function() ChunkController.new{ target_seconds = 0 } end, "target_seconds")
            fails(function() ChunkController.new{ target_seconds = 0 / 0 } end, "target_seconds")
            fails(function() ChunkController.new{ target_seconds = 1.0, max_seconds = 0.5 } end,
                  "exceeds max_seconds")
            -- the default max (0.9 s) applies too
            fails(function() ChunkController.new{ target_seconds = 2 } end, "exceeds max_seconds")
            fails(function() ChunkController.new{ max_seconds = -1 } end, "max_seconds")
            fails(function() ChunkController.new{ probe_iterations = 0 } end, "probe_iterations")
            fails(function() ChunkController.new{ probe_iterations = 1.5 } end, "probe_iterations")
            fails(function() ChunkController.new{ max_iterations = 0 } end, "max_iterations")
            fails(function() ChunkController.new{ target_secs = 0.1 } end, "unknown option")
            fails(function() ChunkController.new(0.25) end, "must be a table")
            -- valid edge: target == max
            assert.is_not_nil(ChunkController.new{ target_seconds = 0.5, max_seconds = 0.5 })
        end)

        it("rejects remaining < 1 or non-integer in next_chunk()", function()
            local cc = ChunkController.new()
            fails(function() cc:next_chunk(0) end, "remaining")
            fails(function() cc:next_chunk(-5) end, "remaining")
            fails(function() cc:next_chunk(2.5) end, "remaining")
            fails(function() cc:next_chunk(math.huge) end, "remaining")
            fails(function() cc:next_chunk(nil) end, "remaining")
            fails(function() cc.next_chunk(10) end, "with ':'")
            assert.are.equal(1, cc:next_chunk(1))
        end)

        it("rejects bad observations", function()
            local cc = ChunkController.new()
            fails(function() cc:observe(0, 0.1) end, "iterations")
            fails(function() cc:observe(1, -0.1) end, "gpu_seconds")
            fails(function() cc:observe(1, 0 / 0) end, "gpu_seconds")
            fails(function() cc:observe(1, math.huge) end, "gpu_seconds")
            fails(function() cc:observe(1, "0.1") end, "gpu_seconds")
            assert.is_nil(cc:estimate())   -- rejected observations change nothing
        end)
    end)
end)
