-- Per-chunk figures of a run (`divgpu run --stats PATH`): JSON lines, one
-- record per line (docs/formats.md#stats-file):
--   {"record": "header", "format": "divgpu-run-stats", "version": 1, ...}  the run
--   {"record": "chunk", "device": 1, "batch": 1, "first_step": 1, "steps": 4, ...}
--   {"record": "end", "stopped": null, "chunks": ..., ...}                    the totals
-- The writer streams through divgpu's one safe write path (divgpu.files.output:
-- a temporary file beside PATH, `.divgpu-tmp.*`, a line per chunk written as
-- it comes, so `tail -f` on writer.temp_path follows a run), synced and renamed
-- to PATH when the run ends, also when a signal stopped it (the end record
-- says so). A failed write (a full disk) is returned at once as nil, err,
-- naming PATH; after an error the temporary is removed and PATH left as it was.
--
--   local stats = require "divgpu.stats"
--   local w = assert(stats.writer(path, header))   assert(w:chunk(c))   assert(w:finish(summary))   w:abort()
--   local run, err = stats.read(path)      -- run.header, run.chunks, run["end"]; nil, "PATH:LINE: ..."
--
-- Misuse raises error(msg, 2); a file that cannot be written or read returns nil, err.

local divgpu = require "divgpu"
local json = require "dkjson"
local methods = require "divgpu.methods"

local io_open = io.open
local string_format, type, ipairs, pairs, tostring, setmetatable = string.format, type, ipairs, pairs, tostring, setmetatable
local huge = math.huge

local _M = {}

_M.FORMAT, _M.VERSION = "divgpu-run-stats", 1

-- Key order of the records, so that files read (and diff) well: the run's,
-- then each method's own figures of a chunk (its name, then its fields).
local KEY_ORDER = {
    "record", "format", "version", "stopped", "command", "table", "table_sha256", "items", "dim", "method",
    "method_reason", "shape", "precision", "layout", "in_flight", "target_ms", "devices", "device", "batch",
    "first_step", "steps", "sequences", "resumed", "length", "window_bins", "gpu_seconds", "wall_seconds",
    "elapsed", "steps_per_second", "wall_steps_per_second", "ms_per_step",
}
do
    local seen = {}
    for _, k in ipairs(KEY_ORDER) do seen[k] = true end
    local function add(k) if not seen[k] then seen[k], KEY_ORDER[#KEY_ORDER + 1] = true, k end end
    for _, m in ipairs(methods.modules()) do
        if m.chunk_fields then
            add(m.name)
            for _, k in ipairs(m.chunk_fields) do add(k) end
        end
    end
    for _, k in ipairs{ "chunks", "batches", "batch_size", "build_seconds" } do add(k) end
end

local function encode(record)
    return json.encode(record, { keyorder = KEY_ORDER })
end

-- A rate, or nil (JSON null) when the time is not positive.
local function per(amount, seconds)
    if type(seconds) ~= "number" or seconds <= 0 then return nil end
    return amount / seconds
end

local Writer = {}
Writer.__index = Writer

--- stats.writer(path, header) -> writer, streaming to writer.temp_path; or
--- nil, err when the file cannot be made. header: the run's description
--- (table, method, devices, sequences, length, ...); "record", "format"
--- and "version" are added.
function _M.writer(path, header)
    if type(path) ~= "string" or type(header) ~= "table" then error("stats.writer(path, header)", 2) end
    local out, err = divgpu.files.output(path)
    if not out then return nil, "--stats " .. err end
    local h = { record = "header", format = _M.FORMAT, version = _M.VERSION }
    for k, v in pairs(header) do h[k] = v end
    local self = setmetatable({ path = path, out = out, temp_path = out.temp_path }, Writer)
    local ok, why = self:line(h)
    if not ok then return nil, why end
    return self
end

--- One record as a line: true, or nil, err.
function Writer:line(record)
    local ok, err = self.out:write(encode(record) .. "\n")
    if ok == nil and err then return nil, string_format("--stats %s: writing the stats failed: %s", self.path, err) end
    return true
end

--- One chunk, as driver.run's on_chunk receives it: true, or nil, err.
function Writer:chunk(c)
    local work = c.steps * c.sequences
    local r = { record = "chunk", device = c.device, batch = c.batch, first_step = c.first_step, steps = c.steps,
                sequences = c.sequences, gpu_seconds = c.gpu_seconds, wall_seconds = c.wall_seconds,
                elapsed = c.elapsed, steps_per_second = per(work, c.gpu_seconds),
                wall_steps_per_second = per(work, c.wall_seconds),
                ms_per_step = c.steps > 0 and 1000 * c.gpu_seconds / c.steps or nil }
    -- The method's own figures of the chunk, under its name (gram: windows, fallbacks).
    for _, m in ipairs(methods.modules()) do
        if m.chunk_record and c[m.name] then r[m.name] = m.chunk_record(c[m.name]) end
    end
    return self:line(r)
end

--- The end record (driver.run's stats: stopped, chunks, batches, batch_size,
--- gpu_seconds, wall_seconds, build_seconds, sequences), then PATH.part ->
--- PATH: true, or nil, err.
function Writer:finish(s)
    s = s or {}
    local ok, err = self:line{ record = "end", stopped = s.stopped or json.null, sequences = s.sequences,
                               chunks = s.chunks, batches = s.batches, batch_size = s.batch_size,
                               gpu_seconds = s.gpu_seconds, wall_seconds = s.wall_seconds,
                               build_seconds = s.build_seconds }
    if not ok then return nil, err end
    local committed, why = self.out:commit()
    if committed == nil and why then return nil, string_format("--stats %s: the stats could not be written: %s", self.path, why) end
    return true
end

--- After an error: the temporary is removed, PATH untouched.
function Writer:abort()
    self.out:abort()
end

-- Field checks of the reader: each returns an error text or nil.
local function number_field(r, key, min_value, integer)
    local v = r[key]
    if type(v) ~= "number" or v ~= v or v == huge or v == -huge then return key .. " must be a number" end
    if integer and v % 1 ~= 0 then return key .. " must be an integer" end
    if v < min_value then return string_format("%s must be at least %s, not %s", key, tostring(min_value), tostring(v)) end
end

local CHUNK_FIELDS = {
    { "device", 1, true }, { "batch", 1, true }, { "first_step", 1, true }, { "steps", 1, true },
    { "sequences", 1, true }, { "gpu_seconds", 0 }, { "wall_seconds", 0 }, { "elapsed", 0 },
}

-- The longest line read: a record is a few hundred bytes (a gram chunk's
-- histogram included); a file with a longer one is not a stats file.
local LINE_LIMIT = 1048576

--- An iterator over f's lines (without their newline), read a block at a
--- time: a line over LINE_LIMIT bytes ends it with nil, "too long".
local function bounded_lines(f)
    local buffer, pos, eof = "", 1, false
    return function()
        while true do
            local nl = buffer:find("\n", pos, true)
            if nl then
                local line = buffer:sub(pos, nl - 1)
                pos = nl + 1
                return line
            end
            if #buffer - pos + 1 > LINE_LIMIT then return nil, "too long" end
            if eof then
                if pos > #buffer then return nil end
                local line = buffer:sub(pos)
                buffer, pos = "", 1
                return line
            end
            local block = f:read(65536)
            if block then buffer, pos = buffer:sub(pos) .. block, 1 else eof = true end
        end
    end
end

local KIND_NAMES = { fifo = "FIFO (named pipe)", device = "device node" }

--- The file at `path` opened for reading, if it is a regular file (a FIFO
--- would be waited on, /dev/zero read for ever); nil and one line if not.
local function open_regular(path)
    local kind, err = divgpu.files.kind(path)
    if not kind then return nil, string_format("%s: cannot read: %s", path, tostring(err)) end
    if kind ~= "file" then
        return nil, string_format("%s: a %s, not a regular file: a stats file is a file that divgpu run --stats wrote",
            path, KIND_NAMES[kind] or kind)
    end
    local f, open_err = io_open(path, "r")
    if not f then return nil, string_format("%s: cannot read: %s", path, tostring(open_err)) end
    return f
end

--- A chunk's `gram` (gram runs): an object whose figures the charts draw.
local function gram_field(r)
    local g = r.gram
    if g == nil then return nil end
    if type(g) ~= "table" then return "gram must be an object" end
    local bad = number_field(g, "window_mean", 0)
    return bad and "gram: " .. bad
end

--- stats.read(path) -> run | nil, err. run.header, run.chunks (in file
--- order), run["end"] (nil for a run killed before it ended), run.batches
--- (run.batches[device][batch] = steps done). Checks: every line one JSON
--- object; a header first (format and version); each chunk's fields; the
--- chunks of each device's batch contiguous from step 1; after an end record
--- of a run that was not stopped, every batch has length - 1 steps. err is
--- one line, "PATH:LINE: what".
function _M.read(path)
    local f, open_err = open_regular(path)
    if not f then return nil, open_err end
    local run = { header = nil, chunks = {}, batches = {}, path = path }
    local next_step = {}  -- [device][batch] -> the step the next chunk must start at
    local n, err = 0, nil
    local next_line = bounded_lines(f)
    while true do
        local line, too_long = next_line()
        if too_long then
            err = string_format("%s:%d: a line longer than %d bytes: not a stats file", path, n + 1, LINE_LIMIT)
            break
        end
        if line == nil then break end
        n = n + 1
        local where = string_format("%s:%d: ", path, n)
        if line:match("^%s*$") then err = where .. "empty line" break end
        local r, _, jerr = json.decode(line, 1, nil)
        if type(r) ~= "table" then err = where .. "not a JSON object" .. (jerr and " (" .. jerr .. ")" or "") break end
        if run["end"] then err = where .. "a record after the end record" break end
        if n == 1 then
            if r.record ~= "header" or r.format ~= _M.FORMAT then
                err = where .. "not a divgpu run-stats file (the first line must be its header record)" break
            end
            if r.version ~= _M.VERSION then
                err = where .. string_format("stats version %s; this divgpu reads version %d", tostring(r.version), _M.VERSION)
                break
            end
            local bad = number_field(r, "length", 1, true)
            if bad then err = where .. "header: " .. bad break end
            run.header = r
        elseif r.record == "chunk" then
            local bad
            for _, spec in ipairs(CHUNK_FIELDS) do
                bad = number_field(r, spec[1], spec[2], spec[3])
                if bad then break end
            end
            bad = bad or gram_field(r)
            if bad then err = where .. "chunk: " .. bad break end
            local d, b = r.device, r.batch
            next_step[d] = next_step[d] or {}
            local expected = next_step[d][b] or 1
            if r.first_step ~= expected then
                err = where .. string_format("device %d batch %d: this chunk starts at step %d, but the steps before it "
                    .. "end before step %d (a chunk is missing or repeated)", d, b, r.first_step, expected)
                break
            end
            next_step[d][b] = r.first_step + r.steps
            if next_step[d][b] > run.header.length then
                err = where .. string_format("device %d batch %d: steps up to %d, past the length %d", d, b,
                    next_step[d][b] - 1, run.header.length)
                break
            end
            run.chunks[#run.chunks + 1] = r
        elseif r.record == "end" then
            run["end"] = r
        else
            err = where .. string_format("unknown record '%s'", tostring(r.record)) break
        end
    end
    f:close()
    if not err and n == 0 then err = path .. ": empty file (no header record)" end
    if err then return nil, err end
    for d, list in pairs(next_step) do
        run.batches[d] = {}
        for b, s in pairs(list) do
            run.batches[d][b] = s - 1
            if run["end"] and run["end"].stopped == nil and s ~= run.header.length then
                return nil, string_format("%s: device %d batch %d has %d of %d steps, but the run ended without "
                    .. "being stopped", path, d, b, s - 1, run.header.length - 1)
            end
        end
    end
    return run
end

return _M
