-- The lane scheduler: a whole job's batches over one or more lanes (a lane
-- is a device, or a context on one), without a GPU of its own. It deals the
-- next batch to whichever lane is free, keeps up to `in_flight` chunks of
-- steps submitted on each lane, completes the oldest chunk that is done
-- (polling the lanes' fences so that no device waits on another; a chunk
-- past its lane's timeout is completed anyway, and its wait reports it),
-- and hands finished batches on in the order of the starts. A batch that
-- finishes ahead of an earlier one waits; while `max_waiting` wait, the
-- free lanes take no new batch (a slow device holds the others back rather
-- than filling memory). `stop` is polled before each batch and after each
-- chunk: once it gives a reason, nothing more is submitted, the chunks in
-- flight complete, a batch they finish is still delivered, and one stopped
-- midway is dropped.
--
-- A lane is an object the driver makes (tests/scheduler_spec.lua makes
-- fake ones):
--   lane.timeout                  seconds a chunk may run before its wait is forced
--   lane:start(b)                 begins batch b (0-based)
--   lane:plan_chunk(remaining)    steps in the next chunk, 1 .. remaining
--   lane:submit(first_step, n)    records and submits the chunk; returns its handle
--   lane:done(handle)             true once that chunk has finished (never waits)
--   lane:complete(chunk, spent)   waits for chunk = { handle, first, n, submitted } and
--                                 takes its results (spent: seconds already polled, or nil)
--   lane:finish()                 the batch's steps all ran: returns what to deliver
--
--   local scheduler = require "divgpu.scheduler"
--   local outcome = scheduler.run({ batches = 4, length = 100, in_flight = 2, now = clock.now,
--                                   sleep = clock.sleep, poll_seconds = 0.0002 },
--                                 lanes, { deliver = function(b, record) ... end,
--                                          after_chunk = function(lane, chunk) ... end, stop = fn })
--   -- outcome.stopped: stop's reason (nil if it never stopped); outcome.polled_seconds

local ipairs = ipairs

local _M = {}

-- The run's state: the plan, the hooks, a slot per lane (its queue of
-- chunks in flight, head to tail), the next batch to deal and to deliver,
-- and the finished batches waiting for an earlier one.

local function poll_stop(st)
    if st.hooks.stop and not st.outcome.stopped then st.outcome.stopped = st.hooks.stop() or nil end
    return st.outcome.stopped
end

local function start_batch(st, s)
    if st.next_batch >= st.plan.batches or st.next_batch - st.next_delivery >= st.max_waiting + #st.slots
        or poll_stop(st) then
        return
    end
    s.batch, st.next_batch = st.next_batch, st.next_batch + 1
    s.lane:start(s.batch)
    s.active, s.next_step = true, 1
end

-- Keeps up to in_flight chunks of the slot's batch submitted.
local function fill(st, s)
    local length = st.plan.length
    while s.next_step < length and s.tail - s.head + 1 < st.plan.in_flight and not st.outcome.stopped do
        local n = s.lane:plan_chunk(length - s.next_step)
        local handle = s.lane:submit(s.next_step, n)
        s.tail = s.tail + 1
        s.queue[s.tail] = { handle = handle, first = s.next_step, n = n, submitted = st.plan.now() }
        s.next_step = s.next_step + n
    end
end

-- The slot's batch is over: kept if all its steps ran, to be delivered in order.
local function end_batch(st, s)
    s.active = false
    if s.next_step >= st.plan.length then st.finished[s.batch] = s.lane:finish() end
end

local function deliver(st)
    while st.finished[st.next_delivery] ~= nil do
        local record = st.finished[st.next_delivery]
        st.finished[st.next_delivery] = nil
        st.hooks.deliver(st.next_delivery, record)
        st.next_delivery = st.next_delivery + 1
    end
end

local function complete(st, s, spent)
    local c = s.queue[s.head]
    s.queue[s.head], s.head = nil, s.head + 1
    s.lane:complete(c, spent)
    if s.next_step >= st.plan.length and s.head > s.tail then end_batch(st, s) end
    if st.hooks.after_chunk then st.hooks.after_chunk(s.lane, c) end
    poll_stop(st)
end

-- The slot whose oldest chunk is done first. One lane (or no sleep): the
-- oldest chunk of all, waited for. Several: their fences polled; past a
-- lane's timeout since it was submitted, that chunk (its wait, with the
-- time spent, then reports the timeout).
local function next_done(st)
    local oldest
    for _, s in ipairs(st.slots) do
        if s.head <= s.tail and (not oldest or s.queue[s.head].submitted < oldest.queue[oldest.head].submitted) then
            oldest = s
        end
    end
    local plan = st.plan
    if #st.slots == 1 or not plan.sleep then return oldest end
    local polled = plan.now()
    while true do
        for _, s in ipairs(st.slots) do
            if s.head <= s.tail and s.lane:done(s.queue[s.head].handle) then
                st.outcome.polled_seconds = st.outcome.polled_seconds + (plan.now() - polled)
                return s
            end
        end
        local spent = plan.now() - oldest.queue[oldest.head].submitted
        if spent > oldest.lane.timeout then return oldest, spent end
        plan.sleep(plan.poll_seconds)
    end
end

--- Runs every batch; returns { stopped = reason or nil, polled_seconds }.
--- plan: batches, length (steps per sequence: chunks cover steps 1 ..
--- length - 1), in_flight, now, and for several lanes sleep and
--- poll_seconds (without sleep the oldest chunk is waited for); max_waiting
--- (default 2 per lane). hooks: deliver(b, record) in batch order,
--- after_chunk(lane, chunk) after each completion, stop() -> reason or nil.
function _M.run(plan, lanes, hooks)
    local st = { plan = plan, hooks = hooks, slots = {}, max_waiting = plan.max_waiting or 2 * #lanes,
                 next_batch = 0, next_delivery = 0, finished = {}, outcome = { polled_seconds = 0 } }
    for i, lane in ipairs(lanes) do st.slots[i] = { lane = lane, queue = {}, head = 1, tail = 0 } end
    while true do
        local busy = false
        for _, s in ipairs(st.slots) do
            if not s.active then start_batch(st, s) end
            if s.active then
                fill(st, s)
                -- Nothing in flight: a batch of length 1, or one stopped midway.
                if s.head > s.tail then end_batch(st, s) else busy = true end
            end
        end
        deliver(st)
        if not busy then
            if st.outcome.stopped or st.next_batch >= plan.batches then break end
        else
            complete(st, next_done(st))
        end
    end
    deliver(st)
    return st.outcome
end

return _M
