-- The checks of the command line's values (its grammar: divgpu.cli.grammar).
-- Every value is checked before any work starts (nothing read, nothing
-- written, no device opened); a value that is wrong, or an option that does
-- not apply to what runs (an option silently ignored is a lie about what
-- ran), is one line naming the option.
--
--   local args = require("divgpu.cli.grammar").parser():parse()
--   require("divgpu.cli.options").validators.run(args)   -- fails with the one line
--
-- A user error is thrown with `fail` (a divgpu.failure): cli.lua prints it.

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
_M.EMBEDDINGS_HELP = EMBEDDINGS_HELP

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

--- The methods whose jobs take the run option `key` (a method's `options`).
local function methods_taking(key)
    local list = {}
    for _, m in ipairs(methods.modules()) do
        if m.options[key] then list[#list + 1] = m.name end
    end
    return list
end

--- The methods whose jobs take a layout.
local function layout_methods() return methods_taking("layout") end

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

--- --starts' syntax, before the table (and so its size) is known: the whole
--- grammar is divgpu.files.parse_starts (src/table/starts.rs). Returns
--- { count, file }: how many starts the value gives where it says (nil for
--- every item and @FILE), and @FILE's path, read once the table is.
local function check_starts_syntax(spec)
    local syntax, err = divgpu.files.parse_starts(spec)
    if not syntax then fail("%s", err) end
    if syntax.file then check_path(syntax.file, "--starts") end
    return syntax
end

--- Parses --starts: "A:B" (half-open, A <= s < B), "i,j,k", "@FILE" (one
--- index a line) or "sample:K:SEED" (docs/cli.md#starts); nil -> all.
function _M.parse_starts(spec, n)
    check_starts_syntax(spec)
    local starts, err = divgpu.files.parse_starts(spec, n)
    if not starts then fail("%s", err) end
    return starts
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
--- gives it (without --starts it is the table's size, and @FILE's count is
--- the file's: both checked once read, by shard_starts).
local function check_shard(spec, starts)
    local _, n = parse_shard(spec)
    local m = check_starts_syntax(starts).count
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
    -- The host's cores (--device cpu: the CPU method) run no workgroups.
    local method = a.device == "cpu" and a.method == "auto" and "cpu" or a.method
    if a.workgroup_size and method ~= "auto" and not methods.get(method).options.workgroup_size then
        fail("--workgroup-size applies to --method %s; the %s method runs no Vulkan workgroups%s",
            in_words(methods_taking("workgroup_size")), method, a.device == "cpu" and " (--device cpu)" or "")
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
    local starts_file = check_starts_syntax(a.starts).file
    if starts_file then inputs[#inputs + 1] = { "--starts", starts_file } end
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

_M.method_docs, _M.default_layouts = method_docs, default_layouts  -- the grammar's help words them

return _M
