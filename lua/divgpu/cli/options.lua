-- The command line's grammar: every command and its options (lua-argparse),
-- and the checks of their values. Every value is checked before any work
-- starts (nothing read, nothing written, no device opened); a value that is
-- wrong, or an option that does not apply to what runs (an option silently
-- ignored is a lie about what ran), is one line naming the option.
--
--   local options = require "divgpu.cli.options"
--   local parser = options.parser()
--   options.validators.run(args)        -- fails with the one line
--
-- A user error is thrown with `fail` (a divgpu.failure): cli.lua prints it.

local argparse = require "argparse"
local divgpu = require "divgpu"
local failure = require "divgpu.failure"
local methods = require "divgpu.methods"
local direct = require "divgpu.methods.direct"
local report = require "divgpu.cli.report"

local string_format = string.format
local tostring, tonumber, ipairs, select, type, unpack = tostring, tonumber, ipairs, select, type, unpack
local concat = table.concat

local _M = {}

-- The shipped poems: the installed copy, or the checkout's (divgpu.data).
local DEFAULT_EMBEDDINGS, DEFAULT_FROM = require("divgpu.data").default_embeddings()
_M.DEFAULT_EMBEDDINGS = DEFAULT_EMBEDDINGS
local EMBEDDINGS_HELP = " The shipped poems by default, " .. DEFAULT_FROM .. " ($DIVGPU_DATA names another data folder)."

--- An integer as its exact decimal digits (%d wraps at 2^63 in LuaJIT and
--- prints 1e19 as -9223372036854775808).
local function integer_text(x)
    if type(x) == "number" and x % 1 == 0 and x == x and x ~= math.huge and x ~= -math.huge then
        return string_format("%.0f", x)
    end
    return tostring(x)
end

--- Throws a user error: one line. Each %d is printed by integer_text.
function _M.fail(fmt, ...)
    local args, i = { ... }, 0
    fmt = fmt:gsub("%%[%-+ #0]*%d*%.?%d*[%a%%]", function(spec)
        if spec == "%%" then return spec end
        i = i + 1
        if spec == "%d" then args[i] = integer_text(args[i]) return "%s" end
    end)
    failure.fail(string_format(fmt, unpack(args, 1, select("#", ...))))
end
local fail = _M.fail

--- The largest integer a Lua number holds exactly (2^53 - 1).
local MAX_INTEGER = 9007199254740991

--- A positive integer option, at most `max` (default MAX_INTEGER).
function _M.positive_integer(value, option, max)
    local n = tonumber(value)
    if not n or n < 1 or n % 1 ~= 0 then fail("%s '%s' is not a positive integer", option, tostring(value)) end
    max = max or MAX_INTEGER
    if n > max then fail("%s '%s' is out of range: 1..%d", option, tostring(value), max) end
    return n
end

--- A non-negative integer option (a seed), at most MAX_INTEGER.
function _M.non_negative_integer(value, option)
    local n = tonumber(value)
    if not n or n < 0 or n % 1 ~= 0 then fail("%s '%s' is not a non-negative integer", option, tostring(value)) end
    if n > MAX_INTEGER then fail("%s '%s' is out of range: 0..%d", option, tostring(value), MAX_INTEGER) end
    return n
end

local function positive_number(value, option)
    local x = tonumber(value)
    if not x or x <= 0 or x ~= x or x == math.huge then fail("%s '%s' is not a positive number", option, tostring(value)) end
    return x
end

function _M.check_choice(value, allowed, option)
    for _, v in ipairs(allowed) do if v == value then return value end end
    fail("%s '%s' is not one of: %s", option, tostring(value), concat(allowed, ", "))
end

local function optional(check, value, option, ...)
    if value ~= nil then return check(value, option, ...) end
end

--- The largest --l2-bytes (4 GiB - 1): the tile it sizes is a 32-bit push constant.
_M.MAX_L2_BYTES = 4294967295

--- The registry's names the options choose among: the direct method's
--- shapes (the reference first), the precisions and layouts of the
--- reference, the methods (auto first).
function _M.shapes() return direct.shapes() end
function _M.precisions() return direct.axis_values(direct.default_shape(), "precision") end
local function layouts() return direct.axis_values(direct.default_shape(), "layout") end
function _M.method_names()
    local names = { "auto" }
    for _, m in ipairs(methods.names()) do names[#names + 1] = m end
    return names
end

--- Each method with what it computes, for --help (the registry's docs).
local function method_docs()
    local list = {}
    for _, m in ipairs(methods.modules()) do list[#list + 1] = m.name .. " (" .. (m.doc or m.name) .. ")" end
    return concat(list, ", ")
end

--- The methods' default layouts, for --help.
local function default_layouts()
    local list = {}
    for _, m in ipairs(methods.modules()) do
        if m.options.layout and m.default_layout then list[#list + 1] = m.default_layout .. " for " .. m.name end
    end
    return concat(list, ", ")
end

--- The methods whose jobs take a layout.
local function layout_methods()
    local list = {}
    for _, m in ipairs(methods.modules()) do
        if m.options.layout then list[#list + 1] = m.name end
    end
    return list
end

--- Whether `shape` (a direct shape) is tiled: its descriptor needs a tile.
function _M.tiled(shape)
    local d = direct.descriptor(shape)
    return d ~= nil and d.needs_tile == true
end

--- A path given on the command line is valid UTF-8 (divgpu's files are
--- named in UTF-8; any other bytes are refused here, shown escaped).
local function check_path(path, option)
    if not divgpu.files.is_utf8(path) then
        local shown = path:gsub("[\128-\255]", function(c) return string_format("\\x%02x", c:byte()) end)
        fail("%s '%s': the path is not valid UTF-8 (divgpu reads and writes UTF-8 paths only)", option, shown)
    end
end
_M.check_path = check_path

--- --starts sample:K:SEED -> K, SEED; nil for another --starts.
local function sample_spec(spec)
    if not spec:find("^sample:") then return nil end
    local k, seed = spec:match("^sample:(%d+):(%d+)$")
    if not k then
        fail("--starts '%s': expected sample:K:SEED (K distinct starts chosen by a generator seeded with SEED)", spec)
    end
    k, seed = tonumber(k), tonumber(seed)
    if k < 1 or k > MAX_INTEGER then fail("--starts '%s': K is out of range: 1..%d", spec, MAX_INTEGER) end
    if seed > MAX_INTEGER then fail("--starts '%s': SEED is out of range: 0..%d", spec, MAX_INTEGER) end
    return k, seed
end

--- --starts' syntax, before the table (and so its size) is known: the file
--- of --starts @FILE is read once the table is.
local function check_starts_syntax(spec)
    if spec == nil then return end
    local file = spec:match("^@(.*)$")
    if file then
        if file == "" then fail("--starts @FILE: name the file (one item index a line)") end
        return check_path(file, "--starts")
    end
    if sample_spec(spec) then return end
    if spec:find(":") then
        if not spec:match("^%s*%d+%s*:%s*%d+%s*$") then
            fail("--starts '%s': expected A:B (half-open range), a list i,j,k, @FILE or sample:K:SEED", spec)
        end
        return
    end
    for item in (spec .. ","):gmatch("([^,]*),") do
        local s = tonumber(item)
        if not s or s % 1 ~= 0 or s < 0 then fail("--starts: '%s' is not an item index", item) end
    end
end

--- Parses --starts: "A:B" (half-open, A <= s < B), "i,j,k", "@FILE" (one
--- index a line) or "sample:K:SEED" (docs/cli.md#starts); nil -> all.
function _M.parse_starts(spec, n)
    local list = {}
    check_starts_syntax(spec)
    if spec == nil then
        for s = 0, n - 1 do list[#list + 1] = s end
    elseif spec:find("^@") then
        local starts, err = divgpu.files.read_starts(spec:sub(2), n)
        if not starts then fail("--starts: %s", err) end
        return starts
    elseif sample_spec(spec) then
        local k, seed = sample_spec(spec)
        if k > n then fail("--starts %s: K = %d is more than the table's %d items", spec, k, n) end
        return divgpu.files.sample_starts(n, k, seed)
    elseif spec:find(":") then
        local a, b = spec:match("^%s*(%d+)%s*:%s*(%d+)%s*$")
        a, b = tonumber(a), tonumber(b)
        if a >= b then fail("--starts '%s' is empty: A must be less than B", spec) end
        if b > n then fail("--starts '%s' is out of range: the table has %d items (0..%d)", spec, n, n - 1) end
        for s = a, b - 1 do list[#list + 1] = s end
    else
        for item in (spec .. ","):gmatch("([^,]*),") do
            local s = tonumber(item)
            if s >= n then fail("--starts: %s is out of range: the table has %d items (0..%d)", item, n, n - 1) end
            list[#list + 1] = s
        end
    end
    return failure.need(divgpu.array("u32", list))
end

--- --shard I/N -> I, N: part I (0-based) of N.
local function parse_shard(spec)
    local i, n = tostring(spec):match("^%s*(%d+)%s*/%s*(%d+)%s*$")
    if not i then fail("--shard '%s': expected I/N (part I of N, I counted from 0)", tostring(spec)) end
    i, n = tonumber(i), tonumber(n)
    if n < 1 then fail("--shard '%s': N must be at least 1", spec) end
    if i >= n then fail("--shard '%s': I is 0-based and must be below N (0..%d)", spec, n - 1) end
    return i, n
end

local function empty_part(spec, n, m)
    fail("--shard %s: %d parts of %d starts would leave a part empty: N must be at most the number of starts", spec, n, m)
end

--- --shard's values, and N against the number of starts where --starts
--- gives it (without --starts it is the table's size: checked once read).
local function check_shard(spec, starts)
    local _, n = parse_shard(spec)
    local m
    if starts and starts:find("^@") then
        m = nil  -- the file's count is known once it is read (shard_starts checks it)
    elseif starts and sample_spec(starts) then
        m = sample_spec(starts)
    elseif starts and starts:find(":") then
        local a, b = starts:match("^%s*(%d+)%s*:%s*(%d+)%s*$")
        m = tonumber(b) - tonumber(a)
    elseif starts then
        m = select(2, (starts .. ","):gsub(",", ""))
    end
    if m and m >= 1 and n > m then empty_part(spec, n, m) end
end

--- The starts of --shard I/N: the contiguous block of positions
--- [floor(I*M/N), floor((I+1)*M/N)) of the run's M starts (cache::shard),
--- and what the checkpoint and the part's header record of the whole run.
function _M.shard_starts(spec, all)
    local i, n = parse_shard(spec)
    if n > #all then empty_part(spec, n, #all) end
    local first, count = divgpu.files.shard_block(#all, i, n)
    local part = failure.need(divgpu.array("u32", count))
    for k = 1, count do part[k] = all[first + k] end
    return part, { index = i, count = n, starts = all, first = first }
end

function _M.device_option(value)
    if value == nil then return nil end
    return tonumber(value) or value
end

--- --device's entries: "all", or a comma-separated list of indices or name
--- substrings (one entry: one device). Syntax only; no device is opened.
function _M.device_entries(value)
    if value == nil then return { false } end  -- false: the default device
    if value == "all" then return "all" end
    local list = {}
    for item in (value .. ","):gmatch("([^,]*),") do
        item = item:match("^%s*(.-)%s*$")
        if item == "" then fail("--device '%s': an empty entry (expected all, or indices or names separated by commas)", value) end
        list[#list + 1] = _M.device_option(item)
    end
    return list
end

--- Every output checked before any work (durable::safe_write): a folder,
--- FIFO or device refused, its folder present and writable, no output the
--- same file as an input or as another output. outputs and inputs are lists
--- of {option, path} (nil entries skipped); stdout_ok: "-" is standard output.
function _M.check_outputs(outputs, inputs, stdout_ok)
    local outs, ins = {}, {}
    for _, o in ipairs(outputs) do
        if o[2] then check_path(o[2], o[1]) outs[#outs + 1] = o end
    end
    for _, i in ipairs(inputs or {}) do
        if i[2] then check_path(i[2], i[1]) ins[#ins + 1] = i end
    end
    local ok, err = divgpu.files.check{ outputs = outs, inputs = ins, stdout = stdout_ok }
    if not ok then fail("%s", err) end
end

--- "a", "a and b", "a, b and c".
local function in_words(list)
    if #list <= 1 then return list[1] or "" end
    return concat(list, ", ", 1, #list - 1) .. " and " .. list[#list]
end

--- --progress and --progress-interval; both say how progress is shown, which
--- --quiet turns off.
local function check_progress(a)
    if a.progress then _M.check_choice(a.progress, report.PROGRESS_FORMATS, "--progress") end
    if a.progress_interval then positive_number(a.progress_interval, "--progress-interval") end
    if a.quiet and (a.progress or a.progress_interval) then
        fail("%s does not apply with --quiet, which shows no progress", a.progress and "--progress" or "--progress-interval")
    end
end

--- How report.progress shows a command's progress (`resumed`: sequences an
--- earlier run did).
function _M.progress_how(a, resumed)
    return { format = a.progress, interval = a.progress_interval and tonumber(a.progress_interval), resumed = resumed }
end

--- The direct shapes that need a tile.
local function tiled_shapes()
    local list = {}
    for _, s in ipairs(_M.shapes()) do
        if _M.tiled(s) then list[#list + 1] = s end
    end
    return list
end

--- run's options that size the tile (--tile-size, --l2-bytes, --measure-l2)
--- apply to the direct method's tiled shapes only, and size it one way.
local function check_tile_options(a)
    local given = {}
    if a.tile_size then given[#given + 1] = "--tile-size" end
    if a.l2_bytes then given[#given + 1] = "--l2-bytes" end
    if a.measure_l2 then given[#given + 1] = "--measure-l2" end
    if given[1] and a.method ~= "auto" and a.method ~= "direct" then
        fail("%s applies to the direct method's tiled shapes, not to --method %s", given[1], a.method)
    elseif given[1] and not _M.tiled(a.shape) then
        fail("%s applies to --shape %s only, not to --shape %s", given[1], in_words(tiled_shapes()), a.shape)
    end
    if a.tile_size and a.tile_size ~= "auto" and (a.l2_bytes or a.measure_l2) then
        fail("%s sizes the tile for --tile-size auto; it does not apply to --tile-size %s",
            a.l2_bytes and "--l2-bytes" or "--measure-l2", a.tile_size)
    end
    if a.l2_bytes and a.measure_l2 then fail("--l2-bytes and --measure-l2 both give the L2 size: use one") end
end

--- A shape or precision other than the plain job's applies to the direct
--- method only; --memory-budget plans auto's choice, which only the plain
--- job has.
local function check_method_options(a)
    if a.workgroup_size and a.shape == "gemm" then
        fail("--workgroup-size applies to the scanning shapes, gram and tensor, not to --shape gemm (its tiling sets its threads)")
    end
    if a.layout and a.method ~= "auto" and not methods.get(a.method).options.layout then
        fail("--layout applies to --method %s; the %s method reads the table its own way", in_words(layout_methods()),
            a.method)
    end
    local plain = methods.request(a.shape, a.precision).plain
    if a.method ~= "auto" and not methods.get(a.method).serves(methods.request(a.shape, a.precision)) then
        fail("--method %s runs the fp32 contract with its own kernel; %s applies to --method direct only", a.method,
            (a.shape ~= methods.AUTO_SHAPE and a.shape ~= direct.default_shape()) and "--shape " .. a.shape
            or "--precision " .. a.precision)
    end
    if a.memory_budget then
        if a.method ~= "auto" then
            fail("--memory-budget plans --method auto's choice; it does not apply to --method %s", a.method)
        elseif not plain then
            fail("--memory-budget plans --method auto's choice of gram, which only --shape %s --precision fp32 can make; "
                .. "it does not apply to --shape %s --precision %s", direct.default_shape(), a.shape, a.precision)
        end
    end
end

--- The inputs `run` reads: the table, and for fp16 the two files beside it.
local function run_inputs(a)
    local inputs = { { "--embeddings", a.embeddings } }
    if a.starts and a.starts:find("^@") then inputs[#inputs + 1] = { "--starts", a.starts:sub(2) } end
    if a.precision == "fp16" then
        check_path(a.embeddings, "--embeddings")
        local dir = a.embeddings:match("^(.*)/[^/]*$") or "."
        inputs[#inputs + 1] = { "--embeddings' embeddings_fp16.bin", dir .. "/embeddings_fp16.bin" }
        inputs[#inputs + 1] = { "--embeddings' embeddings_fp16.meta.json", dir .. "/embeddings_fp16.meta.json" }
    end
    return inputs
end

--- The two forms of a cache (--format).
_M.FORMATS = { "json", "binary" }
local DEFAULT_OUT = { json = "diversity_cache.json", binary = "diversity_cache.bin" }

--- run's --shape values: auto (the cost model's choice between the shapes
--- it weighs, the default), then every direct shape.
local function run_shapes()
    local list = { methods.AUTO_SHAPE }
    for _, s in ipairs(_M.shapes()) do list[#list + 1] = s end
    return list
end

--- A --shape value as a shape whose axes can be read: auto's are the reference's.
local function concrete_shape(shape)
    return shape == methods.AUTO_SHAPE and direct.default_shape() or shape
end

local function validate_run(a)
    _M.check_choice(a.format, _M.FORMATS, "--format")
    a.out = a.out or DEFAULT_OUT[a.format]
    _M.check_choice(a.shape, run_shapes(), "--shape")
    _M.check_choice(a.precision, direct.axis_values(concrete_shape(a.shape), "precision"), "--precision")
    _M.check_choice(a.method, _M.method_names(), "--method")
    if a.layout then _M.check_choice(a.layout, layouts(), "--layout") end
    _M.positive_integer(a.in_flight, "--in-flight", 64)
    optional(_M.positive_integer, a.length, "--length")
    optional(_M.positive_integer, a.batch, "--batch")
    positive_number(a.checkpoint_interval, "--checkpoint-interval")
    local target_ms = positive_number(a.target_ms, "--target-ms")
    if target_ms > 900 then
        fail("--target-ms %s is out of range: more than 0 and at most 900 (a submission must stay under a second)", a.target_ms)
    end
    optional(_M.positive_integer, a.memory_budget, "--memory-budget")
    -- The tile it sizes is a 32-bit push constant: 4 GiB of L2 is beyond any device.
    optional(_M.positive_integer, a.l2_bytes, "--l2-bytes", _M.MAX_L2_BYTES)
    optional(_M.positive_integer, a.workgroup_size, "--workgroup-size")
    -- A tile is a 32-bit push constant.
    if a.tile_size ~= nil and a.tile_size ~= "auto" then _M.positive_integer(a.tile_size, "--tile-size", 4294967295) end
    check_starts_syntax(a.starts)
    check_progress(a)
    _M.device_entries(a.device)
    if a.shard then check_shard(a.shard, a.starts) end
    check_method_options(a)
    check_tile_options(a)
    if a.stats == "-" then fail("--stats -: the stats are a file of their own; name one") end
    _M.check_outputs({ { "--out", a.out }, { "--stats", a.stats } }, run_inputs(a), true)
end

local function validate_plot(a)
    _M.check_choice(a.x, { "step", "elapsed" }, "--x")
    _M.check_choice(a.scale, { "auto", "linear", "log" }, "--scale")
    local w = _M.positive_integer(a.width, "--width")
    if w < 200 or w > 8000 then fail("--width %d is out of range: 200..8000 pixels", w) end
    local hgt = a.height and _M.positive_integer(a.height, "--height")
    if hgt and (hgt < 150 or hgt > 8000) then fail("--height %d is out of range: 150..8000 pixels", hgt) end
    local colours = #divgpu.plot.palette
    if #a.stats > colours then fail("%d stats files: a chart draws at most %d (one colour each)", #a.stats, colours) end
    if a.title and not divgpu.files.is_utf8(a.title) then
        fail("--title: not valid UTF-8 (a chart's text is UTF-8)")
    end
    local inputs = {}
    for i, path in ipairs(a.stats) do inputs[i] = { "stats file", path } end
    _M.check_outputs({ { "--out", a.out } }, inputs, false)
end

local function validate_synth(a)
    local n = _M.positive_integer(a.n, "--n")
    if n < 2 then fail("--n '%s' is out of range: a table has at least 2 items", a.n) end
    _M.positive_integer(a.dim, "--dim")
    -- More centres than items would only cost memory (16, the default, is always allowed).
    local k = _M.positive_integer(a.clusters, "--clusters")
    if k > math.max(n, 16) then
        fail("--clusters '%s' is out of range: 1..%d (the larger of --n and 16)", a.clusters, math.max(n, 16))
    end
    _M.non_negative_integer(a.seed, "--seed")
    _M.check_outputs({ { "--out", a.out } }, {}, true)
    -- The name chooses the format (.npy or .json; "-" streams JSON): refused before the table is made.
    local lower = a.out:lower()
    if a.out ~= "-" and not lower:find("%.npy$") and not lower:find("%.json$") then
        fail("--out %s: a table is written as .npy or .json: the name must end in one of them", a.out)
    end
end

--- The checks of each command but bench (cli/bench.lua has its own).
_M.validators = {
    run = validate_run,
    plot = validate_plot,
    synth = validate_synth,
    ["convert-fp16"] = function(a) check_path(a.embeddings, "convert-fp16") end,
    verify = function(a)
        optional(_M.positive_integer, a.sequences, "--sequences")
        check_progress(a)
        optional(_M.positive_integer, a.sample, "--sample")
        if a.sequences and a.sample then fail("--sequences and --sample both choose the sequences to check: give one") end
        if a.seed and not a.sample then fail("--seed applies to --sample only") end
        optional(_M.non_negative_integer, a.seed, "--seed")
        check_path(a.cache, "--cache")
        check_path(a.embeddings, "--embeddings")
    end,
    convert = function(a)
        if not a.out then fail("convert needs --out PATH (the cache to write)") end
        if a.format then _M.check_choice(a.format, _M.FORMATS, "--format") end
        -- Standard output takes the text form (the default there) only.
        _M.check_outputs({ { "--out", a.out } }, { { "convert's CACHE", a.cache } }, a.format ~= "binary")
    end,
    merge = function(a)
        if a.format then _M.check_choice(a.format, _M.FORMATS, "--format") end
        if not a.out then fail("merge needs --out PATH (the merged cache to write)") end
        local inputs = {}
        for i, path in ipairs(a.parts) do inputs[i] = { "part", path } end
        _M.check_outputs({ { "--out", a.out } }, inputs, true)
    end,
    info = function(a)
        optional(_M.positive_integer, a.max_mib, "--max-mib")
        if not a.measure_l2 then
            if a.max_mib then fail("--max-mib applies to --measure-l2 only") end
            if a.device then fail("--device applies to --measure-l2 only (info lists every device)") end
        end
    end,
}

--- The options of how progress is shown (run, verify).
function _M.progress_options(command)
    command:option("--progress", "How progress is shown on stderr: auto (a line redrawn in place on a terminal, "
        .. "plain lines elsewhere), plain (a line every --progress-interval seconds) or json (a JSON line as often; "
        .. "docs/cli.md#progress). Default: auto.")
    command:option("--progress-interval", "Seconds between progress lines in a log (plain, json, or auto off a "
        .. "terminal); more than 0. Default: " .. report.PROGRESS_INTERVAL .. ".")
end

local function run_command(p)
    local run = p:command("run", "Compute the diversity sequences and write the cache (docs/formats.md#cache-file).")
    run:epilog("Each finished batch is committed to OUT.checkpoint/ beside the output. Ctrl-C (SIGINT) or "
        .. "SIGTERM stops at the next chunk boundary (exit 130 or 143; a second signal, more than a second after the first, exits at once: "
        .. "two within a second, as `timeout -s INT` sends to the process and its group, count as one); kill -9 "
        .. "loses at most the batches in progress and any still being written. Running the same command again resumes and writes the bytes "
        .. "of an uninterrupted run; a checkpoint of another table, --length, --starts or contract is refused "
        .. "(--restart discards it).")
    run:option("--embeddings", "The table to read: an embeddings.json, or X.npy (float32 rows; titles from "
        .. "X.titles.json beside it, if there)." .. EMBEDDINGS_HELP, DEFAULT_EMBEDDINGS)
    run:option("--out", "Cache to write (atomically; a link is written through), held by OUT.lock while the run lasts; "
        .. "- streams it to standard output (no checkpoint). Default: diversity_cache.json, or diversity_cache.bin "
        .. "with --format binary.")
    run:option("--format", "The cache's form: json or binary (docs/formats.md#binary-cache; 'divgpu convert' "
        .. "turns one into the other, byte for byte).", "json")
    run:option("--starts", "Starting items: A:B (A <= s < B), i,j,k, @FILE (one index a line) or sample:K:SEED "
        .. "(K distinct items chosen by a seeded generator, the same on every machine, in ascending order; "
        .. "docs/cli.md#starts). Default: every item.")
    run:option("--shard", "I/N: run only part I of N of the starts (I is 0-based: 0 <= I < N; N <= the number of "
        .. "starts), the contiguous block of positions floor(I*M/N) .. floor((I+1)*M/N)-1 of the M starts; the cache "
        .. "is a part for 'divgpu merge'.")
    run:option("--length", "Items per sequence, 1..N. Default: N (a full ordering).")
    run:option("--batch", "Sequences per GPU batch. Default: from the device's limits, and no more than the plan "
        .. "estimates to finish in --checkpoint-interval seconds.")
    run:option("--checkpoint-interval", "Seconds of work a batch aims at (its size from the plan's estimate), so a "
        .. "finished batch is committed to the checkpoint about this often; the bytes do not depend on it.", "60")
    run:option("--device", "Device index or name substring (see 'divgpu info'); all (every GPU); or a list "
        .. "0,1 (the sequences are split across them, same output; naming one device twice opens two "
        .. "contexts on it); or cpu (the host's cores, the cpu method, no Vulkan). Default: $DIVGPU_DEVICE where set, "
        .. "else a discrete GPU (none named: auto may move a job from a CPU-only Vulkan device to the host).")
    run:option("--target-ms", "GPU time each submission aims at, in milliseconds (90: a tenfold rise in cost "
        .. "still keeps the two chunks in flight under a second).", "90")
    run:option("--method", "auto (the cheapest, by estimates from the device's rates, of the methods that "
        .. "serve the request and fit the device; the run prints its plan), or one of: " .. method_docs() .. ".",
        "auto")
    run:option("--memory-budget", "Device memory in MiB that --method auto may plan for. Default: the device's.")
    run:option("--shape", "Shape of the direct method's work: auto (the cheapest of gemm and "
        .. direct.default_shape() .. " by the cost model, for the plain fp32 job; else " .. direct.default_shape()
        .. "), or one of " .. concat(_M.shapes(), ", ") .. " (docs/contract.md#shapes).", methods.AUTO_SHAPE)
    run:option("--in-flight", "Submissions kept in flight (the CPU records the next while the GPU runs one).", "2")
    run:option("--precision", "fp32 (the contract), fp16 (reads embeddings_fp16.bin; own contract) "
        .. "or fp16-exact (half loads filter, fp32 decides: identical to fp32).", "fp32")
    run:option("--layout", "Table layout on the GPU: rows (as the JSON) or columns (coalesced loads; same output). "
        .. "Default: the method's (" .. default_layouts() .. ").")
    run:option("--tile-size", "Candidates per tile for tiled shapes, or auto (from the L2 size). Default: auto.")
    run:option("--l2-bytes", "L2 size in bytes for --tile-size auto (default: known-device table).")
    run:flag("--measure-l2", "Measure the L2 size for --tile-size auto instead of using the table.")
    run:option("--workgroup-size", "Threads per sequence (default: 256 on a GPU, 64 on a CPU device).")
    run:flag("--wait", "If another run is writing --out (it holds OUT.lock), wait for it instead of refusing.")
    run:flag("--restart", "Discard OUT.checkpoint/ (what an interrupted run of another job left) "
        .. "instead of refusing it. A checkpoint of this same job is resumed without it.")
    run:flag("--quiet", "No progress or summary on stderr.")
    run:flag("--plan-only", "Print the plan (method, shape, tile, layout and why) and stop: no output is written.")
    _M.progress_options(run)
    run:option("--stats", "Write per-chunk figures (steps, speed, GPU time; gram: windows, fallbacks) to this "
        .. "file as JSON lines (docs/formats.md#stats-file), streamed to a temporary beside it and renamed at the end.")
end

local function file_commands(p)
    local fp16 = p:command("convert-fp16", "Write embeddings_fp16.bin and its meta file next to an embeddings.json "
        .. "(for run --precision fp16; 'convert' converts caches).")
    fp16:argument("embeddings", "The embeddings.json to convert.")

    local verify = p:command("verify", "Check a cache (either form) against the CPU mirror; names the first difference.")
    verify:epilog("Exit status: 0 when every sequence checked agrees with the mirror, 1 for a difference (a sequence, "
        .. "or a cache made from another table), 2 for input that cannot be read or is not valid (a missing file, "
        .. "a truncated cache, bad JSON, a bad option).")
    verify:option("--embeddings", "The table the cache was made from: an embeddings.json, or X.npy." .. EMBEDDINGS_HELP, DEFAULT_EMBEDDINGS)
    verify:option("--cache", "Cache to check, JSON or binary.", "diversity_cache.json")
    verify:option("--sequences", "Check only the first K sequences. Default: all.")
    verify:option("--sample", "Check K sequences at positions chosen by --seed (the same on every machine, "
        .. "docs/formats.md#samples-of-a-cache); the positions are printed.")
    verify:option("--seed", "The seed of --sample's positions (default 1).")
    verify:flag("--quiet", "No progress on stderr.")
    _M.progress_options(verify)

    local convert = p:command("convert", "Convert a cache between its JSON and binary forms "
        .. "(docs/formats.md#binary-cache), byte-identical to a run that wrote that form.")
    convert:argument("cache", "The cache to convert (either form).")
    convert:option("--out", "Cache to write (atomically; never the input); required.")
    convert:option("--format", "The form to write: json or binary. Default: the other form than the input's.")
    convert:flag("--quiet", "No summary on stderr.")

    local merge = p:command("merge", "Check the parts of a sharded run (run --shard I/N) and merge them into one "
        .. "cache, byte-identical to the unsharded run's.")
    merge:epilog("Every part must be of the same table, contract, length, format version and run (its count of parts "
        .. "and starts); each shard once, none missing. Any other input is refused with one line naming the file; "
        .. "the output is written atomically (an existing one stays as it was on failure).")
    merge:argument("parts", "The part files, in any order."):args("+")
    merge:option("--out", "Cache to write (atomically; - for standard output); required.")
    merge:option("--format", "The form to write: json or binary. Default: the first part's (parts may be of "
        .. "either form, mixed).")
    merge:flag("--quiet", "No summary on stderr.")

    local synth = p:command("synth", "Write a clustered synthetic embeddings.json (docs/contract.md#reference-tables).")
    synth:option("--n", "Number of items."):args(1)
    synth:option("--dim", "Values per item."):args(1)
    synth:option("--clusters", "Number of cluster centres.", "16")
    synth:option("--seed", "Random seed.", "1")
    synth:option("--out", "File to write (atomically; - for standard output)."):args(1)

    local info = p:command("info", "List the Vulkan devices and their features.")
    info:flag("--measure-l2", "Measure the L2 size of a device with a read-bandwidth sweep.")
    info:option("--device", "Device to measure (index or name substring).")
    info:option("--max-mib", "Largest working set of the sweep, in MiB (default 512).")
end

local function bench_command(p)
    local b = p:command("bench", "A/B configurations of run in alternating pairs (docs/contract.md#measuring).")
    b:argument("configs", "SHAPE[:PRECISION][:kIN_FLIGHT][:tTILE][:columns] (the direct method) or "
        .. "gram|auto[:kIN_FLIGHT][:columns] (docs/contract.md#gram); the first is the reference."):args("2+")
    b:option("--method", "The method of configurations named by a shape: auto (gram where G fits the device, "
        .. "for baseline fp32), direct or gram (docs/contract.md#auto).", "auto")
    b:option("--embeddings", "The table to run on: an embeddings.json, or X.npy (default: the shipped poems).")
    b:option("--synth", "Use a synthetic clustered table N,D[,CLUSTERS] instead.")
    b:option("--sequences", "Sequences per run (default: every item, at most 4096).")
    b:option("--steps", "Steps per run (iterations timed).", "100")
    b:option("--pairs", "Alternating pairs after the warm-up (docs/contract.md#measuring: at least 24).", "24")
    b:option("--batch", "Sequences per batch (default: from the device).")
    b:option("--device", "Device index or name substring.")
    b:option("--l2-bytes", "L2 size in bytes for configurations without a tile (default: known-device table).")
    b:option("--parity-sequences", "Sequences of the first configuration checked against the CPU mirror.", "16")
    b:flag("--json", "Print the results as JSON.")
    b:option("--plot", "Also draw the pairs to this PNG: each configuration's time per pair and its speed-up "
        .. "over the first, per pair.")
end

local function plot_command(p)
    local plot = p:command("plot", "Draw stats files of 'run --stats' as a PNG chart: sequence-steps per second "
        .. "and GPU time per step over the run, one line per file.")
    plot:argument("stats", "Stats files written by run --stats."):args("+")
    plot:option("--out", "PNG to write (atomically).", "run.png")
    plot:option("--x", "The x axis: step (every batch from step 1) or elapsed (seconds since the run began).", "step")
    plot:option("--scale", "The y axes: linear, log, or auto (log where a panel's values span over 20x).", "auto")
    plot:option("--title", "The chart's title.")
    plot:option("--width", "Width in pixels.", "1200")
    plot:option("--height", "Height in pixels. Default: 800, 1000 with the gram panel.")
end

-- --help's text, once asked for: cli.lua writes it and checks the write (a
-- full disk behind a redirection is an error), where argparse would print it
-- and exit 0 whatever happened.
local help_text

--- The help text --help asked for while parsing, or nil.
function _M.help_requested() return help_text end

--- The parser's and each command's --help stop the parse with their text
--- kept (help_requested), in place of argparse's print and os.exit(0).
local function checked_help(p)
    for _, cmd in ipairs({ p, unpack(p._commands) }) do
        local help = cmd._help_option_idx and cmd._options[cmd._help_option_idx]
        if help then
            help:action(function()
                help_text = cmd:get_help()
                error("--help", 0)
            end)
        end
    end
end

--- The parser of the whole command line.
function _M.parser()
    local p = argparse("divgpu", "Diversity sequences on the GPU (Vulkan compute), bit-exact on every device.")
    p:command_target("command")
    p:require_command(false)
    p:flag("--version", "Print divgpu's version and exit.")
    run_command(p)
    file_commands(p)
    bench_command(p)
    plot_command(p)
    checked_help(p)
    return p
end

return _M
