-- Chooses how many iterations go into the next GPU submission.
--
-- Each submission should take about `target_seconds` of GPU time and never be
-- planned longer than `max_seconds` (0.9 s: always under a second, so a
-- display watchdog never fires).  The cost per iteration is not known up front
-- and changes during a run (it falls as candidates are used up and can jump),
-- so it is measured: a short probe first, then an estimate from every finished
-- submission that takes a rise at once and smooths a fall.
--
--   local ChunkController = require "divgpu.chunk_controller"
--   local cc = ChunkController.new{ target_seconds = 0.25 }
--   local n = cc:next_chunk(remaining)   -- 1 <= n <= remaining
--   cc:observe(n, gpu_seconds)           -- when that submission has finished
--
-- With several submissions in flight, next_chunk is called several times
-- before the matching observe calls, which come in the same order (oldest
-- first, as the driver waits on them).  The controller counts both, so it
-- knows which chunks were planned before an observation: when a reading
-- shows the cost rose, the chunks already in flight were sized at the old
-- rate and will overshoot too, and the reading itself may understate the rise
-- (the chunk may have met the new cost only in its last part); so until those
-- chunks have been observed, the next plans are a fraction of the target
-- (option `caution`, default 4).
-- What that buys, for a sudden rise of the cost by R x with two submissions
-- in flight: the first submission that reads more than 10% over the estimate
-- (r x, r > 1.1) may overshoot, and so may the one already in flight behind
-- it (R x target at most): nothing can shrink a submission already made.
-- The next takes at most R x target / (r x caution), under a second for R up
-- to 17 at the default target; the ones after it are sized from readings made
-- at the new cost.  tests/chunk_controller_spec.lua replays the driver's order
-- of calls and checks this for every position of the rise within a chunk.

local floor, min, max, huge = math.floor, math.min, math.max, math.huge
local type, pairs, setmetatable, getmetatable, error, tostring =
    type, pairs, setmetatable, getmetatable, error, tostring

local _M = {}

local mt = { __index = _M }

-- A chunk may be at most this many times the previous one: a probe of a few
-- iterations is noisy, and if it under-estimates the cost, extrapolating
-- straight to the target could plan a multi-second chunk.
local GROWTH = 4

-- Weight of a new observation in the moving average: smooths timer noise.
local ALPHA = 0.3

-- A fall by more than this factor is a regime change (the cost really
-- moved), not noise: the estimate jumps to it instead of averaging. (A rise
-- of any size is taken at once: planning from a low estimate is what makes
-- a submission overshoot.)
local JUMP = 2

-- A reading more than this far above the estimate is a surprise: the cost
-- rose, beyond timer noise (a few percent).
local SURPRISE = 1.1

local DEFAULTS = {
    target_seconds = 0.25,
    max_seconds = 0.9,
    probe_iterations = 1,
    max_iterations = false,   -- false = no cap beyond the time limits
    -- A 0 s reading means "shorter than the timer can tell"; counting it as
    -- this long keeps the estimate positive (no division by zero) and errs on
    -- the side of smaller chunks.
    timer_resolution = 1e-6,
    -- After a surprise (a reading more than 10% over the estimate), the next
    -- plan and any made while chunks sized before it are in flight aim at
    -- target / caution: the surprise's reading may understate the rise.
    -- 1 turns this guard off (the tests' twin).
    caution = 4,
}

local function is_count(x)
    return type(x) == "number" and x >= 1 and x % 1 == 0 and x < huge
end

local function is_positive(x)
    -- x == x rejects NaN
    return type(x) == "number" and x == x and x > 0 and x < huge
end

local function check_self(self, fname)
    if getmetatable(self) ~= mt then
        error("chunk_controller: call " .. fname .. " with ':' on a controller", 3)
    end
end

--- ChunkController.new(opts) -> controller.  All options are optional.
function _M.new(opts)
    if opts == nil then
        opts = {}
    elseif type(opts) ~= "table" then
        error("chunk_controller.new: options must be a table, got " .. type(opts), 2)
    end
    -- Reject unknown keys: a typo would otherwise silently fall back to a default.
    for k in pairs(opts) do
        if DEFAULTS[k] == nil then
            error("chunk_controller.new: unknown option '" .. tostring(k) .. "'", 2)
        end
    end

    local o = {}
    for k, v in pairs(DEFAULTS) do
        local given = opts[k]
        if given == nil then o[k] = v else o[k] = given end
    end

    if not is_positive(o.target_seconds) then
        error("chunk_controller.new: target_seconds must be a positive number, got "
              .. tostring(o.target_seconds), 2)
    end
    if not is_positive(o.max_seconds) then
        error("chunk_controller.new: max_seconds must be a positive number, got "
              .. tostring(o.max_seconds), 2)
    end
    if o.target_seconds > o.max_seconds then
        error(("chunk_controller.new: target_seconds (%g) exceeds max_seconds (%g)")
              :format(o.target_seconds, o.max_seconds), 2)
    end
    if not is_count(o.probe_iterations) then
        error("chunk_controller.new: probe_iterations must be an integer >= 1, got "
              .. tostring(o.probe_iterations), 2)
    end
    if o.max_iterations ~= false and not is_count(o.max_iterations) then
        error("chunk_controller.new: max_iterations must be nil or an integer >= 1, got "
              .. tostring(o.max_iterations), 2)
    end
    if not is_positive(o.timer_resolution) then
        error("chunk_controller.new: timer_resolution must be a positive number, got "
              .. tostring(o.timer_resolution), 2)
    end

    if type(o.caution) ~= "number" or not (o.caution >= 1) or o.caution == huge then
        error("chunk_controller.new: caution must be a number >= 1, got " .. tostring(o.caution), 2)
    end

    return setmetatable({
        target = o.target_seconds,
        max_seconds = o.max_seconds,
        probe = o.probe_iterations,
        max_iterations = o.max_iterations or huge,
        resolution = o.timer_resolution,
        caution = o.caution,
        est = nil,    -- seconds per iteration; nil until the first observation
        prev = nil,   -- size of the last chunk handed out (for the growth limit)
        planned = 0,  -- chunks handed out so far
        observed = 0, -- of those, chunks reported finished (oldest first)
        stale_until = 0, -- chunks 1 .. this were sized before the latest surprise
        surprised = false, -- a surprise came after the latest plan
    }, mt)
end

--- cc:next_chunk(remaining) -> iterations for the next submission (1..remaining).
function _M.next_chunk(self, remaining)
    check_self(self, "next_chunk")
    if not is_count(remaining) then
        error("chunk_controller:next_chunk: remaining must be an integer >= 1, got "
              .. tostring(remaining), 2)
    end

    local n
    local est = self.est
    if est == nil then
        -- Nothing measured yet: a short probe.
        n = self.probe
    else
        -- est > 0 always (observe floors readings at timer_resolution).
        n = floor(self.target / est)
        if self.prev then
            n = min(n, self.prev * GROWTH)
        end
        if self.surprised or self.observed < self.stale_until then
            -- Just surprised, or chunks sized at the old rate are still in
            -- flight (see the top).
            n = min(n, floor(self.target / (est * self.caution)))
        end
        -- The hard cap, last: never more than max_seconds at the estimate,
        -- which is at least the latest reading (rises are taken at once).
        n = min(n, floor(self.max_seconds / est))
    end
    n = min(n, self.max_iterations, remaining)
    -- One iteration is the least we can submit, even if it alone exceeds
    -- max_seconds (and the probe, planned with no estimate, is probe_iterations).
    n = max(n, 1)

    self.prev = n
    self.planned = self.planned + 1
    self.surprised = false
    return n
end

--- cc:observe(iterations, gpu_seconds): report a finished submission.
function _M.observe(self, iterations, gpu_seconds)
    check_self(self, "observe")
    if not is_count(iterations) then
        error("chunk_controller:observe: iterations must be an integer >= 1, got "
              .. tostring(iterations), 2)
    end
    if type(gpu_seconds) ~= "number" or gpu_seconds ~= gpu_seconds
       or gpu_seconds < 0 or gpu_seconds == huge then
        error("chunk_controller:observe: gpu_seconds must be a finite number >= 0, got "
              .. tostring(gpu_seconds), 2)
    end

    -- Observations come oldest first; one with no plan outstanding (a caller
    -- seeding the estimate) is not counted.
    if self.observed < self.planned then self.observed = self.observed + 1 end
    local cost = max(gpu_seconds, self.resolution) / iterations
    local est = self.est
    if est ~= nil and cost > est * SURPRISE then
        -- Every chunk handed out so far was sized below this cost: the next
        -- plan, and those made before all of these are observed, are cautious.
        self.stale_until = self.planned
        self.surprised = true
    end
    if est == nil or cost >= est or cost * JUMP < est then
        self.est = cost
    else
        self.est = est + ALPHA * (cost - est)
    end
end

--- cc:estimate() -> seconds per iteration, or nil before the first observation.
function _M.estimate(self)
    check_self(self, "estimate")
    return self.est
end

return _M
