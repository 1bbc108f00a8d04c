-- What every method's batch shares: its recorders (one per submission in
-- flight), recording a chunk, submission, waiting and the winners ring the
-- driver reads. A method's batch class inherits it (`batch.class()`) and adds
-- `record_steps`, which records the steps themselves.
--
--   local batch = require "divgpu.methods.batch"
--   local Batch = batch.class()
--   function Batch:record_steps(first, count, rec) ... return true end
--   local b = setmetatable({ job = job, count = #starts, ring = ring }, Batch)
--   assert(b:add_recorders(in_flight))
--   Job.batch = batch.maker(make_batch)   -- job:batch(starts, ring, in_flight)
--
-- Misuse raises error(msg, 2); what the GPU refuses returns nil, err.

local divgpu = require "divgpu"
local failure = require "divgpu.failure"

local need, catch = failure.need, failure.catch
local error, setmetatable, string_format, type = error, setmetatable, string.format, type

local _M = {}

--- A job's `batch(starts, ring, in_flight)` method from the method's
--- `make_batch(job, starts, ring, in_flight)`: starts as a u32 array or a
--- plain list; a failure is returned as nil, err.
function _M.maker(make_batch)
    return function(job, starts, ring, in_flight)
        if type(starts) == "table" then starts = divgpu.array("u32", starts) end
        if type(starts) ~= "userdata" then error("job:batch: starts must be a u32 array or a list of item indices", 2) end
        return catch(make_batch, job, starts, ring, in_flight)
    end
end

local Batch = {}
Batch.__index = Batch

--- A new batch class, inheriting these methods.
function _M.class()
    local class = setmetatable({}, { __index = Batch })
    class.__index = class
    return class
end

local function add_recorders(self, in_flight)
    self.recorders = {}
    for i = 1, in_flight or 1 do self.recorders[i] = need(self.job.ctx:recorder()) end
    self.recorder = self.recorders[1]
    return true
end

--- Gives the batch `in_flight` recorders (default 1) to cycle through:
--- true, or nil, err.
function Batch:add_recorders(in_flight)
    return catch(add_recorders, self, in_flight)
end

--- Records steps first .. first+count-1 on `rec` (default: the first
--- recorder) by the class's `record_steps`: true, or nil, err. A chunk
--- longer than the winners ring is misuse and raises.
function Batch:record(first, count, rec)
    if count > self.ring then
        error(string_format("chunk of %d steps exceeds the winners ring of %d", count, self.ring), 2)
    end
    return catch(self.record_steps, self, first, count, rec or self.recorder)
end

--- Submits what `rec` (default: the first recorder) holds: true, or nil, err.
function Batch:submit(rec)
    return (rec or self.recorder):submit()
end

--- Waits: the GPU seconds of the submission (false without timestamps), or nil, err.
function Batch:wait(rec)
    return (rec or self.recorder):wait()
end

--- The winners ring, u32 [#starts][ring] (or nil, err).
function Batch:winners()
    return self.winners_buffer:read("u32")
end

return _M
