-- The lane scheduler (lua/divgpu/scheduler.lua) without a GPU: fake lanes
-- on a fake clock, each chunk taking its lane's cost per step, one chunk at
-- a time per lane. A trace of every start, submission, completion and
-- delivery is checked against the scheduler's promises: every batch
-- delivered once and in order, its chunks covering steps 1 .. length - 1 in
-- order and completed before it is delivered, never more chunks in flight
-- on a lane than asked, never more batches between start and delivery than
-- the back-pressure allows. Each check has a twin: a trace with that
-- promise broken on purpose must fail it.
local scheduler = require "divgpu.scheduler"

--- A fake clock: now() and sleep(s), which moves it on.
local function clock()
    local c = { t = 0 }
    function c.now() return c.t end
    function c.sleep(s) c.t = c.t + s end
    return c
end

--- A fake lane: `cost` seconds a step, chunks of `chunk` steps (or fewer),
--- run one after another; `stuck`: its chunks never finish.
local function lane(name, cost, trace, clk, opts)
    opts = opts or {}
    local l = { name = name, timeout = opts.timeout or 1e9, busy_until = 0, chunk = opts.chunk or 3 }
    function l:start(b) self.b = b trace[#trace + 1] = { "start", name, b } end
    function l:plan_chunk(remaining) return math.min(self.chunk, remaining) end
    function l:submit(first, n)
        local begin = math.max(clk.t, self.busy_until)
        self.busy_until = begin + n * cost
        trace[#trace + 1] = { "submit", name, self.b, first, n }
        return { finish = opts.stuck and math.huge or self.busy_until }
    end
    function l:done(handle) return clk.t >= handle.finish end
    function l:complete(c, spent)
        -- A blocking wait: the clock moves to the chunk's end (a stuck one gives up at once).
        if not opts.stuck then clk.t = math.max(clk.t, c.handle.finish) end
        trace[#trace + 1] = { "complete", name, self.b, c.first, c.n, spent }
    end
    function l:finish() trace[#trace + 1] = { "finish", name, self.b } return { batch = self.b, lane = name } end
    return l
end

--- Runs `batches` batches of `length` steps over lanes of the given costs.
local function run(costs, batches, length, opts)
    opts = opts or {}
    local clk, trace, lanes = clock(), {}, {}
    for i, cost in ipairs(costs) do lanes[i] = lane("L" .. i, cost, trace, clk, opts.lane) end
    local outcome = scheduler.run(
        { batches = batches, length = length, in_flight = opts.in_flight or 2, now = clk.now,
          sleep = #costs > 1 and clk.sleep or nil, poll_seconds = 0.001, max_waiting = opts.max_waiting },
        lanes,
        { deliver = function(b, record)
              trace[#trace + 1] = { "deliver", record.lane, b }
          end,
          stop = opts.stop and function() return opts.stop(trace) end })
    return trace, outcome
end

--- What is wrong with a trace of `batches` batches of `length` steps, or nil.
local function check_trace(trace, batches, length, in_flight, max_open)
    local next_delivery, in_flight_now, open, steps, completed = 0, {}, 0, {}, {}
    for i, e in ipairs(trace) do
        local kind, name, b = e[1], e[2], e[3]
        if kind == "start" then
            open = open + 1
            if max_open and open > max_open then return string.format("event %d: %d batches open", i, open) end
            steps[b] = 1
        elseif kind == "submit" then
            if e[4] ~= steps[b] then return string.format("event %d: batch %d's chunk starts at %d, not %d", i, b, e[4], steps[b]) end
            steps[b] = e[4] + e[5]
            in_flight_now[name] = (in_flight_now[name] or 0) + 1
            if in_flight_now[name] > in_flight then return string.format("event %d: %d chunks in flight on %s", i, in_flight_now[name], name) end
        elseif kind == "complete" then
            in_flight_now[name] = in_flight_now[name] - 1
            completed[b] = e[4] + e[5]
        elseif kind == "deliver" then
            if b ~= next_delivery then return string.format("event %d: batch %d delivered before batch %d", i, b, next_delivery) end
            if (completed[b] or 1) ~= length and length > 1 then return string.format("event %d: batch %d delivered unfinished", i, b) end
            next_delivery, open = next_delivery + 1, open - 1
        end
    end
    if next_delivery ~= batches then return string.format("%d of %d batches delivered", next_delivery, batches) end
end

local function count(trace, kind, name)
    local n = 0
    for _, e in ipairs(trace) do if e[1] == kind and (not name or e[2] == name) then n = n + 1 end end
    return n
end

describe("the lane scheduler, on fake lanes", function()
    it("one lane: every batch in order, its chunks covering every step, two in flight", function()
        local trace = run({ 1 }, 4, 20)
        assert.is_nil(check_trace(trace, 4, 20, 2))
        assert.are.equal(4 * 7, count(trace, "submit"))  -- 19 steps in chunks of 3, 3, ..., 1
    end)

    it("two lanes of unequal speed: batches go to whichever is free, delivered in order", function()
        local trace = run({ 1, 5 }, 12, 10)
        assert.is_nil(check_trace(trace, 12, 10, 2, 2 * 2 + 2))
        local fast, slow = count(trace, "start", "L1"), count(trace, "start", "L2")
        assert(fast > slow and slow > 0, string.format("fast lane %d batches, slow lane %d", fast, slow))
    end)

    it("back-pressure: a slow lane holds the others back once max_waiting batches wait", function()
        local trace = run({ 1, 50 }, 10, 10, { max_waiting = 1 })
        assert.is_nil(check_trace(trace, 10, 10, 2, 1 + 2))
        -- Twin: without the limit the fast lane runs further ahead.
        local loose = run({ 1, 50 }, 10, 10, { max_waiting = 100 })
        assert.is_not_nil(check_trace(loose, 10, 10, 2, 1 + 2))
    end)

    it("one submission in flight when asked", function()
        local trace = run({ 1, 2 }, 5, 12, { in_flight = 1 })
        assert.is_nil(check_trace(trace, 5, 12, 1))
        assert.is_not_nil(check_trace(run({ 1, 2 }, 5, 12, { in_flight = 2 }), 5, 12, 1), "twin: two in flight seen")
    end)

    it("a stop: nothing more is submitted, whole batches before it are delivered, the one cut short is not", function()
        local stopped_at
        local trace, outcome = run({ 1, 3 }, 10, 30, { stop = function(t)
            if count(t, "deliver") >= 2 then stopped_at = stopped_at or #t return "halt" end
        end })
        assert.are.equal("halt", outcome.stopped)
        for i = stopped_at + 1, #trace do assert.are_not.equal("submit", trace[i][1], "a submission after the stop") end
        local delivered = count(trace, "deliver")
        assert(delivered >= 2 and delivered < 10, delivered .. " batches delivered")
        -- Every delivered batch is whole; the batches cut short are not among them.
        local err = check_trace(trace, delivered, 30, 2)
        assert.is_nil(err)
        assert.are.equal(count(trace, "finish"), delivered)
    end)

    it("length 1: no chunk at all, every batch still delivered", function()
        local trace = run({ 1, 1 }, 3, 1)
        assert.are.equal(0, count(trace, "submit"))
        assert.is_nil(check_trace(trace, 3, 1, 2))
    end)

    it("a chunk past its lane's timeout is completed with the time spent, so its wait can say so", function()
        local trace = run({ 1, 1 }, 2, 5, { lane = { stuck = true, timeout = 0.05 } })
        local first = nil
        for _, e in ipairs(trace) do if e[1] == "complete" then first = first or e end end
        assert.is_not_nil(first)
        assert(first[6] and first[6] > 0.05, "no time spent reported: " .. tostring(first[6]))
    end)

    it("twins: the trace check catches a batch delivered out of order, a gap of steps, a batch delivered unfinished", function()
        local good = run({ 1 }, 3, 10)
        assert.is_nil(check_trace(good, 3, 10, 2))
        local function copy()
            local t = {}
            for i, e in ipairs(good) do t[i] = { unpack(e) } end
            return t
        end
        local swapped = copy()
        local a, b
        for i, e in ipairs(swapped) do
            if e[1] == "deliver" then if not a then a = i elseif not b then b = i end end
        end
        swapped[a][3], swapped[b][3] = swapped[b][3], swapped[a][3]
        assert.matches("delivered before", check_trace(swapped, 3, 10, 2))
        local gap = copy()
        for _, e in ipairs(gap) do
            if e[1] == "submit" and e[4] > 1 then e[4] = e[4] + 1 break end
        end
        assert.matches("chunk starts at", check_trace(gap, 3, 10, 2))
        local early = copy()
        for i, e in ipairs(early) do
            if e[1] == "complete" then table.remove(early, i) break end
        end
        assert.is_not_nil(check_trace(early, 3, 10, 2))
    end)
end)
