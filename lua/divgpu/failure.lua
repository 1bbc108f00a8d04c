-- The Lua modules' side of the API's one error rule (docs/api.md#errors):
-- misuse raises `error(msg, 2)`, at the caller's position; an expected
-- failure (a file, a device, the GPU) is returned as `nil, err`.
--
-- Inside a module the work reads straight: `need` turns a call's `nil, err`
-- into a thrown failure, `fail` throws one of the module's own, and the
-- public function hands it back as `nil, err` with `catch`. A failure is a
-- table with its message (tostring gives it), so `catch` never mistakes
-- misuse, or a bug, for one: those are raised on as they are.
--
--   local failure = require "divgpu.failure"
--   local need = failure.need
--   function M.job(ctx, e, opts)
--       if type(e) ~= "userdata" then error("job: e must be a table", 2) end  -- misuse
--       return failure.catch(make_job, ctx, e, opts)                           -- job or nil, err
--   end
--   -- in make_job: local buf = need(ctx:buffer(bytes, "centroids"))

local error, pcall, setmetatable, getmetatable, tostring = error, pcall, setmetatable, getmetatable, tostring
local resume = coroutine.resume

local _M = {}

local Failure = { __tostring = function(f) return f.message end }

-- With DIVGPU_DEBUG set, a failure keeps the Lua traceback of where it was
-- thrown (`failure.trace`), for whoever debugs divgpu itself.
local DEBUG = os.getenv("DIVGPU_DEBUG")

--- Throws an expected failure with this message (one line).
function _M.fail(message)
    local f = setmetatable({ message = tostring(message) }, Failure)
    if DEBUG then f.trace = debug.traceback(f.message, 2) end
    error(f, 0)
end

--- Throws a failure that is the caller's mistake, found only once the work
--- began (an option value the device cannot take): the CLI exits 2 for it.
function _M.usage(message)
    local f = setmetatable({ message = tostring(message), usage = true }, Failure)
    if DEBUG then f.trace = debug.traceback(f.message, 2) end
    error(f, 0)
end

--- Whether `e` is a failure thrown by `usage`.
function _M.is_usage(e)
    return getmetatable(e) == Failure and e.usage == true
end

--- Where failure `e` was thrown, with DIVGPU_DEBUG set (else nil).
function _M.trace(e)
    return getmetatable(e) == Failure and e.trace or nil
end

--- True when `e` is a failure thrown by `fail` or `need`.
function _M.is(e)
    return getmetatable(e) == Failure
end

--- Its arguments as they are, unless the first is nil and the second an
--- error message: then that message is thrown as a failure.
function _M.need(value, err, ...)
    if value == nil and err ~= nil then _M.fail(err) end
    return value, err, ...
end

local function settle(ok, ...)
    if ok then return ... end
    local e = ...
    if getmetatable(e) == Failure then return nil, e.message end
    error(e, 0)
end

--- f(...)'s results, or nil and the message of a failure it threw; any
--- other error is raised on, unchanged.
function _M.catch(f, ...)
    return settle(pcall(f, ...))
end

local function resumed(ok, ...)
    if not ok then error((...), 0) end
    return ...
end

--- Like coroutine.resume, but a failure or an error inside the coroutine is
--- thrown again here (a failure stays a failure).
function _M.resume(co, ...)
    return resumed(resume(co, ...))
end

return _M
