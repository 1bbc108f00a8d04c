-- A lane keeps its chunk controller across batches (driver.lane_controller):
-- only its first batch starts with the controller's probe; the next starts
-- at the chunk size learned on the first. On fake lanes (the scheduler with
-- a fake clock, each step costing the same: on lavapipe, timer noise on a
-- shared machine moves real chunk sizes too much to tell). The twin:
-- a lane that makes a fresh controller per batch probes again, and the
-- same check fails.
local scheduler = require "divgpu.scheduler"
local driver = require "divgpu.driver"
local ChunkController = require "divgpu.chunk_controller"

local COST, TARGET = 0.001, 0.02 -- seconds a step; a chunk aims at 20 steps

--- A fake lane whose chunks take COST a step on a fake clock; `controller_for`
--- gives it the controller of each batch.
local function fake_lane(clk, chunks, controller_for)
    local l = { timeout = 1e9 }
    function l:start(b) self.b, self.cc = b, controller_for(self) end
    function l:plan_chunk(remaining) return self.cc:next_chunk(remaining) end
    function l:submit(first, n)
        chunks[#chunks + 1] = { batch = self.b, first = first, n = n }
        return { seconds = n * COST }
    end
    function l:done() return true end
    function l:complete(c) clk.t = clk.t + c.handle.seconds self.cc:observe(c.n, c.handle.seconds) end
    function l:finish() return {} end
    return l
end

local function run_fake(controller_for)
    local clk, chunks = { t = 0 }, {}
    local lane = fake_lane(clk, chunks, controller_for)
    scheduler.run({ batches = 2, length = 200, in_flight = 1, now = function() return clk.t end },
                  { lane }, { deliver = function() end })
    return chunks
end

--- nil when batch 2's first chunk is as large as batch 1's largest (the
--- size the controller learned; batch 1's last chunk may be cut short by the
--- steps left), else what is wrong.
local function second_batch_starts_learned(chunks)
    local largest_of_first, first_of_second = 0, nil
    for _, c in ipairs(chunks) do
        if c.batch == chunks[1].batch then largest_of_first = math.max(largest_of_first, c.n)
        elseif not first_of_second then first_of_second = c.n end
    end
    if not first_of_second then return "no second batch" end
    if first_of_second < largest_of_first then
        return string.format("batch 2 starts with %d steps, batch 1 reached %d: it probed afresh", first_of_second,
            largest_of_first)
    end
end

describe("a lane's chunk controller across batches", function()
    local opts = { target_seconds = TARGET }

    it("fake lanes: the second batch starts at the learned chunk size", function()
        local chunks = run_fake(function(lane) return driver.lane_controller(lane, opts) end)
        assert.are.equal(1, chunks[1].n) -- the first batch probes
        local why = second_batch_starts_learned(chunks)
        assert(why == nil, why)
        -- Twin: a fresh controller per batch probes again and fails the check.
        local fresh = run_fake(function() return ChunkController.new(opts) end)
        assert(second_batch_starts_learned(fresh), "a fresh controller per batch passed the check")
    end)
end)
