-- The command line: bin/divgpu <command> [options]. Every failure ends as one
-- line on stderr starting "divgpu:" and a non-zero exit status.

local argparse = require "argparse"

local io_stderr, io_stdout = io.stderr, io.stdout
local string_format, floor, min = string.format, math.floor, math.min
local tostring, tonumber, error, ipairs = tostring, tonumber, error, ipairs

local _M = {}  -- helpers shared with the bench command

-- The shipped poems: the installed copy, or the checkout's (divgpu.data).
local DEFAULT_EMBEDDINGS, DEFAULT_FROM = require("divgpu.data").default_embeddings()
local EMBEDDINGS_HELP = " The shipped poems by default, " .. DEFAULT_FROM
    .. " ($DIVGPU_DATA names another data folder)."
_M.DEFAULT_EMBEDDINGS = DEFAULT_EMBEDDINGS

--- An integer as its exact decimal digits (%d wraps at 2^63 in LuaJIT and
--- prints 1e19 as -9223372036854775808).
local function integer_text(x)
    if type(x) == "number" and x % 1 == 0 and x == x and x ~= math.huge and x ~= -math.huge then
        return string_format("%.0f", x)
    end
    return tostring(x)
end
_M.integer_text = integer_text

--- Raises a user error: one line. Each %d is printed by integer_text.
local function fail(fmt, ...)
    local args, i = { ... }, 0
    fmt = fmt:gsub("%%[%-+ #0]*%d*%.?%d*[%a%%]", function(spec)
        if spec == "%%" then return spec end
        i = i + 1
        if spec == "%d" then args[i] = integer_text(args[i]) return "%s" end
    end)
    error({ divgpu_user_error = string_format(fmt, unpack(args, 1, select("#", ...))) }, 0)
end
_M.fail = fail

local function stderr_is_terminal()
    local ok, ffi = pcall(require, "ffi")
    if not ok then return false end
    pcall(ffi.cdef, "int isatty(int fd);")
    return ffi.C.isatty(2) == 1
end

local function format_duration(s)
    if s ~= s or s == math.huge then return "?" end
    s = floor(s + 0.5)
    if s >= 3600 then return string_format("%dh%02dm", floor(s / 3600), floor(s % 3600 / 60)) end
    if s >= 60 then return string_format("%dm%02ds", floor(s / 60), s % 60) end
    return string_format("%ds", s)
end

--- Parses --starts: "A:B" (half-open, A <= s < B) or "i,j,k"; nil -> all.
local function parse_starts(divgpu, spec, n)
    local list = {}
    if spec == nil then
        for s = 0, n - 1 do list[#list + 1] = s end
    elseif spec:find(":") then
        local a, b = spec:match("^%s*(%d+)%s*:%s*(%d+)%s*$")
        if not a then fail("--starts '%s': expected A:B (half-open range) or a list i,j,k", spec) end
        a, b = tonumber(a), tonumber(b)
        if a >= b then fail("--starts '%s' is empty: A must be less than B", spec) end
        if b > n then fail("--starts '%s' is out of range: the table has %d items (0..%d)", spec, n, n - 1) end
        for s = a, b - 1 do list[#list + 1] = s end
    else
        for item in (spec .. ","):gmatch("([^,]*),") do
            local s = tonumber(item)
            if not s or s % 1 ~= 0 or s < 0 then fail("--starts: '%s' is not an item index", item) end
            if s >= n then fail("--starts: %s is out of range: the table has %d items (0..%d)", item, n, n - 1) end
            list[#list + 1] = s
        end
    end
    return divgpu.array("u32", list)
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

--- The starts of --shard I/N: the contiguous block of positions
--- [floor(I*M/N), floor((I+1)*M/N)) of the run's M starts (contract::shard),
--- and what the checkpoint and the part's header record of the whole run.
local function shard_starts(divgpu, spec, all)
    local i, n = parse_shard(spec)
    if n > #all then
        fail("--shard %s: %d parts of %d starts would leave a part empty: N must be at most the number of starts", spec, n, #all)
    end
    local first, count = divgpu.shard_block(#all, i, n)
    local part = divgpu.array("u32", count)
    for k = 1, count do part[k] = all[first + k] end
    return part, { index = i, count = n, starts = all, first = first }
end

local function device_option(value)
    if value == nil then return nil end
    return tonumber(value) or value
end

--- --device's entries: "all", or a comma-separated list of indices or name
--- substrings (one entry: one device). Syntax only; no device is opened.
local function device_entries(value)
    if value == nil then return { false } end  -- false: the default device
    if value == "all" then return "all" end
    local list = {}
    for item in (value .. ","):gmatch("([^,]*),") do
        item = item:match("^%s*(.-)%s*$")
        if item == "" then fail("--device '%s': an empty entry (expected all, or indices or names separated by commas)", value) end
        list[#list + 1] = device_option(item)
    end
    return list
end

--- Opens the contexts --device names: "all" is every discrete GPU, else every
--- other GPU (integrated, virtual), else every device (a CI machine with
--- lavapipe only); a list may name a device twice, which opens two contexts
--- on it (their queues run side by side).
local function open_devices(value)
    local vk = require "divgpu.vk_compute"
    local entries = device_entries(value)
    if entries == "all" then
        local devices = require("divgpu").devices{}
        entries = {}
        for _, wanted in ipairs{ function(d) return d.type == "discrete" end,
                                 function(d) return d.type ~= "cpu" end,
                                 function() return true end } do
            for _, d in ipairs(devices) do
                if wanted(d) then entries[#entries + 1] = d.index end
            end
            if #entries > 0 then break end
        end
        if #entries == 0 then fail("--device all: no Vulkan devices found") end
    end
    local contexts = {}
    for i, entry in ipairs(entries) do contexts[i] = vk.open{ device = entry or nil } end
    return contexts
end
_M.open_devices = open_devices

--- Shows progress on a terminal. `resumed`: sequences done by an earlier run
--- (from the checkpoint), counted in the sequences shown but not in the rate.
local function progress_printer(quiet, resumed)
    local function nothing() end
    if quiet or not stderr_is_terminal() then return nothing, nothing end
    local last = -1
    local driver = require "divgpu.driver"
    local function show(p)
        local t = driver.now()
        if t - last < 0.2 and p.done < p.total then return end
        last = t
        local rate = p.done / math.max(p.elapsed, 1e-9)
        local eta = (p.total - p.done) / math.max(rate, 1e-9)
        local sequences = ""
        if p.sequences_total then
            local done, all = p.sequences + (resumed or 0), p.sequences_total + (resumed or 0)
            sequences = string_format("  sequences %d/%d (%.0f%%%s)", done, all, 100 * done / all,
                (resumed or 0) > 0 and string_format(", %d resumed", resumed) or "")
        end
        io_stderr:write(string_format("\r\27[Kbatch %d/%d  step %d/%d%s  %.1f it/s  elapsed %s  ETA %s",
            p.batch, p.batches, min(p.step, p.length), p.length, sequences, rate, format_duration(p.elapsed),
            format_duration(eta)))
        io_stderr:flush()
    end
    local function finish() io_stderr:write("\r\27[K") io_stderr:flush() end
    return show, finish
end

--- The largest integer a Lua number holds exactly (2^53 - 1).
local MAX_INTEGER = 9007199254740991

--- A positive integer option, at most `max` (default MAX_INTEGER).
local function positive_integer(value, option, max)
    local n = tonumber(value)
    if not n or n < 1 or n % 1 ~= 0 then fail("%s '%s' is not a positive integer", option, tostring(value)) end
    max = max or MAX_INTEGER
    if n > max then fail("%s '%s' is out of range: 1..%d", option, tostring(value), max) end
    return n
end

--- Loads the table a precision runs on: fp16 reads embeddings_fp16.bin next
--- to the JSON (E' = (f32)E16); fp32 and fp16-exact read the JSON.
local function load_for(divgpu, path, precision)
    if precision == "fp16" then return divgpu.load_fp16(path) end
    return divgpu.load_embeddings(path)
end

local CONTRACT = { fp32 = "fp32", fp16 = "fp16", ["fp16-exact"] = "fp32" }

--- The tile size for a shape ("auto": from the L2 size), and a line saying
--- where it came from; nil for the baseline shape.
local function choose_tile(ctx, e, shape, precision, tile_option, l2_option, measure)
    if shape == "baseline" then return nil end
    local tiles = require "divgpu.tiles"
    if tile_option ~= "auto" then
        local t = positive_integer(tile_option, "--tile-size")
        return t, string_format("tile size %d candidates (given with --tile-size)", t)
    end
    local l2_bytes = l2_option and positive_integer(l2_option, "--l2-bytes")
    local measured
    if measure then measured = require("divgpu.l2_probe").measure(ctx) end
    local l2, source = tiles.l2_bytes(ctx.info, { l2_bytes = l2_bytes, measured = measured })
    if not l2 then fail("%s", source) end
    local bpv = tiles.BYTES_PER_VALUE[precision]
    local t = tiles.tile_size(l2, e.dim, bpv)
    return t, string_format("tile size %d candidates = floor(%d B L2 x 0.85 / (%d dims x %d B)); L2 from the %s",
        t, l2, e.dim, bpv, source)
end

local function check_choice(value, allowed, option)
    for _, v in ipairs(allowed) do if v == value then return value end end
    fail("%s '%s' is not one of: %s", option, tostring(value), table.concat(allowed, ", "))
end

local function check_choice_of(allowed)
    return function(value, option) return check_choice(value, allowed, option) end
end

local SHAPE_NAMES = { "baseline", "tiled", "tile-dispatch" }
local PRECISION_NAMES = { "fp32", "fp16", "fp16-exact" }
local LAYOUT_NAMES = { "rows", "columns" }

local METHOD_NAMES = { "auto", "direct", "gram" }

--- The method a run uses, and a line saying why (SPEC section 8).
local function choose_method(ctx, e, a, shape, precision, sequences)
    local method = check_choice(a.method, METHOD_NAMES, "--method")
    if method == "gram" and (shape ~= "baseline" or precision ~= "fp32") then
        fail("--method gram runs the fp32 contract with its own kernel; --shape %s and --precision %s "
            .. "apply to --method direct only", shape, precision)
    end
    local budget = a.memory_budget and positive_integer(a.memory_budget, "--memory-budget") * 1048576
    local driver = require "divgpu.driver"
    local chosen, why = driver.choose_method(ctx, e, { method = method, shape = shape, precision = precision,
                                                       memory_budget = budget }, sequences)
    if method == "gram" then
        local ok, reason = require("divgpu.gram").choose(ctx, e, { sequences = sequences, memory_budget = math.huge })
        if ok ~= "gram" then fail("--method gram: %s", reason) end
    end
    return chosen, string_format("method %s (%s: %s)", chosen, method, why)
end
_M.choose_method = choose_method

--- One line on the Gram filter's work: windows, fallbacks.
local function gram_summary(stats)
    local g = stats.gram
    if not g or g.steps == 0 then return nil end
    -- The window-size histogram, as shares of the steps, bins that occurred only.
    local labels, bins = require("divgpu.gram").histogram_labels, {}
    for k, c in ipairs(g.window_histogram or {}) do
        if c > 0 then bins[#bins + 1] = string_format("%s: %.3g%%", labels[k], 100 * c / g.steps) end
    end
    return string_format("gram: G built in %.2f s; windows: mean %.3f, %.1f%% of steps a window of one, largest %d; "
        .. "%d fallback(s) to a full scan in %d sequence-steps; window sizes %s", stats.build_seconds,
        g.window_total / g.steps, 100 * g.window_ones / g.steps, g.window_max, g.fallbacks, g.steps,
        table.concat(bins, ", "))
end
_M.gram_summary = gram_summary

--- A message without the "path/file.lua:NN: " prefixes error() adds: the
--- user is told what went wrong, not where in divgpu's Lua it was noticed.
local function strip_location(msg)
    msg = tostring(msg):gsub("^runtime error: ", "")
    local n
    repeat msg, n = msg:gsub("^[^%s:]*%.lua:%d+: ", "") until n == 0
    return msg
end
_M.strip_location = strip_location

local function first_line(err)
    if type(err) == "table" and err.divgpu_user_error then return err.divgpu_user_error end
    return (strip_location(err):match("^[^\n]*"))
end

--- The names of the contexts' devices, in --device's order (a chunk's
--- "device" in the stats is a position in this list, from 1).
local function device_names(contexts)
    local names = {}
    for i, c in ipairs(contexts) do names[i] = c.info.name end
    return names
end

--- run --stats: the writer of the per-chunk figures (divgpu.stats), its
--- header describing this run.
local function stats_writer(a, e, contexts, method, method_note, shape, precision, layout, in_flight, target_ms,
                            sequences, resumed, length)
    local direct = method == "direct"
    return require("divgpu.stats").writer(a.stats, {
        command = "run", table = a.embeddings, table_sha256 = e.sha256, items = e.n, dim = e.dim, method = method,
        method_reason = method_note, shape = direct and shape or nil, precision = direct and precision or nil,
        layout = layout, in_flight = in_flight, target_ms = target_ms, devices = device_names(contexts),
        sequences = sequences, resumed = resumed, length = length,
        window_bins = method == "gram" and require("divgpu.gram").histogram_labels or nil,
    })
end

--- Commits the --stats file of a run that ended (`stats`), or removes it
--- after an error (`stats` false). A stats file that cannot be written ends
--- the run with an error; the sequences stay in the checkpoint.
local function close_stats(recorder, stats, cp)
    if not stats then return recorder:abort() end
    local written, why = pcall(recorder.finish, recorder, stats)
    if not written then
        fail("%s (%d of %d sequences are kept in %s: run the same command again to write the cache)",
            first_line(why), cp.done, cp.total, cp.path)
    end
end

--- Runs the starts the checkpoint `cp` does not have yet, committing each
--- finished batch to it; SIGINT and SIGTERM stop the run at a chunk boundary
--- (stats.stopped names the signal).
local function run_rest(a, e, starts, length, batch, target_ms, shape, precision, in_flight, cp)
    local divgpu = require "divgpu"
    local vk = require "divgpu.vk_compute"
    local driver = require "divgpu.driver"
    local resumed = cp.done
    local rest = divgpu.array("u32", #starts - resumed)
    for i = 1, #rest do rest[i] = starts[resumed + i] end
    local contexts = open_devices(a.device)
    local ctx = contexts[1]
    local method, method_note = choose_method(ctx, e, a, shape, precision, #rest)
    if method == "gram" then
        -- Every device runs the method chosen on the first (the bytes would be
        -- the same either way; one method keeps the summary and stats plain),
        -- so each must hold G and its share of the state.
        local budget = a.memory_budget and positive_integer(a.memory_budget, "--memory-budget") * 1048576
        for i = 2, #contexts do
            local ok, why = require("divgpu.gram").choose(contexts[i], e,
                { sequences = math.ceil(#rest / #contexts), memory_budget = budget })
            if ok ~= "gram" then
                fail("device %d of --device %s (%s) cannot run the Gram method the first one chose (%s): "
                    .. "leave it out, or give --method direct", i, a.device, contexts[i].info.name, why)
            end
        end
    end
    -- Each method's fastest layout on the H200 (bench/RESULTS.md): the direct
    -- scan wants coalesced columns, the Gram rescoring one row per thread.
    local layout = a.layout or (method == "gram" and "rows" or "columns")
    local tile, tile_note
    if method == "direct" then
        tile, tile_note = choose_tile(ctx, e, shape, precision, a.tile_size or "auto", a.l2_bytes, a.measure_l2)
    end
    local show, finish = progress_printer(a.quiet, resumed)
    if not a.quiet then
        local where = ctx.info.name
        if #contexts > 1 then
            where = string_format("%d devices (%s)", #contexts, table.concat(device_names(contexts), ", "))
        end
        if method == "gram" then
            io_stderr:write(string_format("divgpu: %d sequences x %d steps on %s (%d items, dim %d), %s layout, %d in flight%s, fma %s\n",
                #rest, length, where, e.n, e.dim, layout, in_flight, #contexts > 1 and " per device" or "", vk.fma_mode(ctx)))
        else
            io_stderr:write(string_format("divgpu: %d sequences x %d steps on %s (%d items, dim %d), shape %s, %s, %s layout, %d in flight%s, fma %s\n",
                #rest, length, where, e.n, e.dim, shape, precision, layout, in_flight, #contexts > 1 and " per device" or "",
                vk.fma_mode(ctx)))
        end
        io_stderr:write("divgpu: ", method_note, "\n")
        if tile_note then io_stderr:write("divgpu: ", tile_note, "\n") end
    end
    local workgroup_size = a.workgroup_size and positive_integer(a.workgroup_size, "--workgroup-size")
    local recorder = a.stats and stats_writer(a, e, contexts, method, method_note, shape, precision, layout, in_flight,
        target_ms, #rest, resumed, length)
    divgpu.catch_signals(true)
    local delivered = 0
    local ok, err, stats = pcall(driver.run, {
        contexts = contexts, embeddings = e, starts = rest, length = length, batch = batch, method = method,
        shape = shape, precision = precision, tile_size = tile, in_flight = in_flight, layout = layout,
        target_seconds = target_ms / 1000, on_progress = show, workgroup_size = workgroup_size,
        -- Each finished batch goes to the checkpoint, in order: cp:append hands
        -- it to a writer thread (formatted and synced there) and returns.
        on_batch = function(first, count, sequences)
            assert(first == delivered, "batches arrive in order")
            delivered = delivered + count
            cp:append(sequences)
        end,
        stop = divgpu.interrupted,
        on_chunk = recorder and function(c) recorder:chunk(c) end,
    })
    divgpu.catch_signals(false)
    finish()
    if recorder then close_stats(recorder, ok and stats, cp) end
    if not ok then
        if a.out ~= "-" and cp.done > 0 then
            fail("%s (%d of %d sequences are kept in %s: run the same command again to resume)",
                first_line(err), cp.done, cp.total, cp.path)
        end
        error(err, 0)
    end
    return stats
end

--- Writes to standard output; a failed write (a full disk behind a
--- redirection, a closed pipe) is an error, not a silent loss.
local function write_stdout(...)
    local ok, err = io_stdout:write(...)
    if ok then ok, err = io_stdout:flush() end
    if not ok then fail("standard output: write failed: %s", tostring(err)) end
end
_M.write_stdout = write_stdout

--- The lock of --out (OUT.lock), taken before the table is read, so a second
--- run on the same output is refused at once (or waits with --wait). Its
--- notes (a wait, a stale lock taken over) are printed even with --quiet.
local function lock_output(divgpu, a)
    if a.out == "-" then return nil end
    local lock = divgpu.lock(a.out, { wait = a.wait, on_wait = function(msg)
        io_stderr:write("divgpu: ", msg, " (--wait)\n") io_stderr:flush()
    end })
    if lock.note then io_stderr:write("divgpu: ", lock.note, "\n") end
    return lock
end

local cmd_run_locked

local function cmd_run(a)
    local divgpu = require "divgpu"
    local held = { lock = lock_output(divgpu, a) }
    local ok, status = pcall(cmd_run_locked, a, divgpu, held)
    -- os.exit runs no finaliser: the lock (and the checkpoint holding it) are
    -- released here, also after an error or a signal.
    if held.cp then held.cp:close() end
    if held.lock then held.lock:release() end
    if not ok then error(status, 0) end
    return status
end

function cmd_run_locked(a, divgpu, held)
    local shape = check_choice(a.shape, SHAPE_NAMES, "--shape")
    local precision = check_choice(a.precision, PRECISION_NAMES, "--precision")
    local in_flight = positive_integer(a.in_flight, "--in-flight")
    if a.layout then check_choice(a.layout, LAYOUT_NAMES, "--layout") end
    check_choice(a.method, METHOD_NAMES, "--method")
    local e = load_for(divgpu, a.embeddings, precision)
    local starts = parse_starts(divgpu, a.starts, e.n)
    local shard
    if a.shard then starts, shard = shard_starts(divgpu, a.shard, starts) end
    local length = a.length and tonumber(a.length) or e.n
    if length > e.n then
        fail("--length %s is out of range: it must be between 1 and the number of items, %d", tostring(a.length), e.n)
    end
    local batch = a.batch and positive_integer(a.batch, "--batch")
    local target_ms = tonumber(a.target_ms)
    -- Before the device: a checkpoint of another job is refused at once.
    local cp = divgpu.checkpoint(a.out, { contract = CONTRACT[precision], table = e, length = length,
                                          starts = starts, restart = a.restart, shard = shard, lock = held.lock })
    held.cp, held.lock = cp, nil
    -- Batches that failed their check are said even with --quiet.
    for _, note in ipairs(cp.notes) do io_stderr:write("divgpu: ", note, "\n") end
    if shard and not a.quiet then
        io_stderr:write(string_format("divgpu: shard %d/%d: starts at positions %d..%d of %d, written as a part for 'divgpu merge'\n",
            shard.index, shard.count, shard.first, shard.first + #starts - 1, #shard.starts))
    end
    local resumed, total = cp.done, cp.total
    if resumed > 0 and not a.quiet then
        io_stderr:write(string_format("divgpu: resuming from %s: %d of %d sequences already done\n",
            cp.path, resumed, total))
    end
    local stats
    if resumed < total then
        stats = run_rest(a, e, starts, length, batch, target_ms, shape, precision, in_flight, cp)
        if stats.stopped and a.out == "-" then
            io_stderr:write(string_format("divgpu: interrupted by %s; the cache streamed to standard output is "
                .. "incomplete (nothing is kept: --out - has no checkpoint)\n", stats.stopped))
            return stats.stopped == "SIGTERM" and 143 or 130
        elseif stats.stopped then
            local kept = cp.done > 0
                and string_format("%d of %d sequences are kept in %s", cp.done, total, cp.path)
                or "no batch had finished, nothing was kept"
            io_stderr:write(string_format("divgpu: interrupted by %s; %s: run the same command again to %s\n",
                stats.stopped, kept, cp.done > 0 and "resume" or "start over"))
            return stats.stopped == "SIGTERM" and 143 or 130
        end
    end
    cp:finish()
    if not a.quiet and stats then
        io_stderr:write(string_format(
            "divgpu: done in %.2f s wall, %.2f s GPU%s, %d batch(es) of up to %d, %d submissions\n",
            stats.wall_seconds, stats.gpu_seconds, #stats.devices > 1 and " (summed over the devices)" or "",
            stats.batches, stats.batch_size, stats.chunks))
        io_stderr:write(string_format("divgpu: wall time: %.2f s making the jobs%s, %.2f s making batches, "
            .. "%.2f s waiting for the GPU%s, %.2f s recording and reading back\n", stats.jobs_seconds,
            stats.method == "gram" and " (tables uploaded, G built)" or " (tables uploaded)", stats.batch_setup_seconds,
            stats.wait_seconds, #stats.devices > 1 and "s" or "",
            stats.wall_seconds - stats.jobs_seconds - stats.batch_setup_seconds - stats.wait_seconds))
        if #stats.devices > 1 then
            for d, share in ipairs(stats.devices) do
                io_stderr:write(string_format("divgpu: device %d (%s): %d sequences in %d batch(es), %.2f s GPU%s\n",
                    d, share.name, share.sequences, share.batches, share.gpu_seconds,
                    share.build_seconds and string_format(", G built in %.2f s", share.build_seconds) or ""))
            end
        end
        local g = gram_summary(stats)
        if g then io_stderr:write("divgpu: ", g, "\n") end
        if stats.underflow then io_stderr:write("divgpu: ", stats.underflow, "\n") end
    end
    if a.out ~= "-" then write_stdout(a.out, "\n") end
end

local function cmd_convert_fp16(a)
    local divgpu = require "divgpu"
    local bin, meta = divgpu.convert_fp16(a.embeddings)
    write_stdout(bin, "\n", meta, "\n")
end

local function cmd_verify(a)
    local divgpu = require "divgpu"
    local cache = divgpu.read_cache(a.cache)
    local e = divgpu.load_embeddings(a.embeddings)
    if cache.embeddings_sha256 ~= e.sha256 or cache.num_items ~= e.n or cache.dim ~= e.dim then
        fail("%s was made from another table (sha256 %s, %dx%d) than %s (sha256 %s, %dx%d)",
            a.cache, cache.embeddings_sha256, cache.num_items, cache.dim, a.embeddings, e.sha256, e.n, e.dim)
    end
    if cache.contract == "fp16" then
        e = e:fp16_rounded()
    elseif cache.contract ~= "fp32" then
        fail("%s: unknown contract '%s'", a.cache, tostring(cache.contract))
    end
    local count = cache.count
    if count == 0 then fail("%s has no sequences: there is nothing to verify", a.cache) end
    if a.sequences then
        local k = tonumber(a.sequences)
        if not k or k < 1 or k % 1 ~= 0 then fail("--sequences '%s' is not a positive integer", a.sequences) end
        count = min(count, k)
    end
    local L = cache.length
    local show, finish = progress_printer(a.quiet)
    local driver = require "divgpu.driver"
    local t0 = driver.now()
    local step = 64
    for first = 0, count - 1, step do
        local k = min(step, count - first)
        local starts = divgpu.array("u32", k)
        local cached = divgpu.array("u32", k * L)
        for i = 1, k do starts[i] = cache.starts[first + i] end
        for i = 1, k * L do cached[i] = cache.sequences[first * L + i] end
        local expected = divgpu.mirror(e, starts, L)
        local d = divgpu.first_difference(cached, expected, L)
        if d then
            finish()
            fail("%s: sequence %d (start %d) differs at step %d: the cache has %d, the CPU mirror gives %d",
                a.cache, first + d.row, starts[d.row + 1], d.step, d.a, d.b)
        end
        show{ batch = 1, batches = 1, step = first + k, length = count, done = first + k, total = count,
              elapsed = driver.now() - t0 }
    end
    finish()
    write_stdout(string_format("%s: %d of %d sequences (length %d, contract %s) match the CPU mirror\n",
        a.cache, count, cache.count, L, cache.contract))
end

local function cmd_synth(a)
    local divgpu = require "divgpu"
    local n, dim = tonumber(a.n), tonumber(a.dim)
    local clusters, seed = tonumber(a.clusters), tonumber(a.seed)
    local e = divgpu.synth{ n = n, dim = dim, clusters = clusters, seed = seed }
    e:write(a.out)  -- .npy or .json by the name; "-" streams JSON
    if a.out ~= "-" then write_stdout(a.out, "\n") end
end

--- Checks the parts of a sharded run and writes their merge (contract::shard).
local function cmd_merge(a)
    local m = require("divgpu").merge(a.out, a.parts)
    if not a.quiet then
        io_stderr:write(string_format("divgpu: merged %d parts: %d sequences of length %d\n", m.parts, m.sequences, m.length))
    end
    if a.out ~= "-" then write_stdout(a.out, "\n") end
end

local function cmd_info(a)
    local divgpu = require "divgpu"
    if a.measure_l2 then
        local vk = require "divgpu.vk_compute"
        local ctx = vk.open{ device = device_option(a.device) }
        local opts = a.max_mib and { max_bytes = positive_integer(a.max_mib, "--max-mib") * 1048576 } or nil
        local knee, points = require("divgpu.l2_probe").measure(ctx, opts)
        io_stdout:write(string_format("%s: read bandwidth by working-set size\n", ctx.info.name))
        for _, p in ipairs(points) do
            io_stdout:write(string_format("  %10.2f MiB  %9.1f GB/s\n", p.bytes / 1048576, p.gbps))
        end
        io_stdout:write(string_format("measured L2 size (bandwidth knee): %d bytes (%.1f MiB)\n", knee, knee / 1048576))
        return
    end
    local devices = divgpu.devices{}
    if #devices == 0 then fail("no Vulkan devices found") end
    local yes = function(b) return b and "yes" or "no" end
    for _, d in ipairs(devices) do
        io_stdout:write(string_format("%d: %s (%s)\n", d.index, d.name, d.type))
        io_stdout:write(string_format("   driver %s %s, Vulkan %s, vendor 0x%04x device 0x%04x\n",
            d.driver, d.driver_info, d.api_version, d.vendor_id, d.device_id))
        io_stdout:write(string_format("   shared memory %d B, workgroup <= %d threads, subgroup %d, storage buffer range %d B\n",
            d.max_shared_memory, d.max_workgroup_invocations, d.subgroup_size, d.max_storage_buffer_range))
        io_stdout:write(string_format("   16-bit storage %s, float16 %s, float64 %s, int64 %s, int64 atomics %s, timestamps %s (%.3g ns/tick)\n",
            yes(d.storage_buffer_16bit), yes(d.float16), yes(d.float64), yes(d.int64), yes(d.int64_atomics),
            yes(d.timestamps), d.timestamp_period_ns))
        io_stdout:write(string_format("   f32 denormals: preserve %s, flush %s, in divgpu's shaders %s%s; "
            .. "f32 round-to-nearest-even %s\n", yes(d.denorm_preserve_f32), yes(d.denorm_flush_f32), d.denormals,
            d.denormals_need_certificate and " (tables without the subnormal certificate run the exact underflow path)" or "",
            yes(d.rounding_rte_f32)))
    end
end

_M.positive_integer = positive_integer
_M.choose_tile = choose_tile
_M.check_choice = check_choice
_M.device_option = device_option
_M.SHAPE_NAMES, _M.PRECISION_NAMES = SHAPE_NAMES, PRECISION_NAMES


local function positive_number(value, option)
    local x = tonumber(value)
    if not x or x <= 0 or x ~= x or x == math.huge then fail("%s '%s' is not a positive number", option, tostring(value)) end
    return x
end

--- A path given on the command line is valid UTF-8 (divgpu's files are
--- named in UTF-8; any other bytes are refused here, shown escaped).
local function check_path(path, option)
    if not require("divgpu").is_utf8(path) then
        local shown = path:gsub("[\128-\255]", function(c) return string_format("\\x%02x", c:byte()) end)
        fail("%s '%s': the path is not valid UTF-8 (divgpu reads and writes UTF-8 paths only)", option, shown)
    end
end

--- Every output checked before any work (contract::safe_write): a folder,
--- FIFO or device refused, its folder present and writable, no output the
--- same file as an input or as another output. outputs and inputs are lists
--- of {option, path} (nil entries skipped); stdout_ok: "-" is standard output.
local function check_outputs(outputs, inputs, stdout_ok)
    local outs, ins = {}, {}
    for _, o in ipairs(outputs) do
        if o[2] then check_path(o[2], o[1]) outs[#outs + 1] = o end
    end
    for _, i in ipairs(inputs or {}) do
        if i[2] then check_path(i[2], i[1]) ins[#ins + 1] = i end
    end
    local ok, err = pcall(require("divgpu").check_files, { outputs = outs, inputs = ins, stdout = stdout_ok })
    if not ok then fail("%s", first_line(err)) end
end
_M.check_outputs = check_outputs

local function optional(check, value, option)
    if value ~= nil then return check(value, option) end
end

--- --starts' syntax, before the table (and so its size) is known.
local function check_starts_syntax(spec)
    if spec == nil then return end
    if spec:find(":") then
        if not spec:match("^%s*%d+%s*:%s*%d+%s*$") then
            fail("--starts '%s': expected A:B (half-open range) or a list i,j,k", spec)
        end
        return
    end
    for item in (spec .. ","):gmatch("([^,]*),") do
        local s = tonumber(item)
        if not s or s % 1 ~= 0 or s < 0 then fail("--starts: '%s' is not an item index", item) end
    end
end

--- --shard's values, and N against the number of starts where --starts
--- gives it (without --starts it is the table's size: checked once read).
local function check_shard(spec, starts)
    local _, n = parse_shard(spec)
    local m
    if starts and starts:find(":") then
        local a, b = starts:match("^%s*(%d+)%s*:%s*(%d+)%s*$")
        m = tonumber(b) - tonumber(a)
    elseif starts then
        m = select(2, (starts .. ","):gsub(",", ""))
    end
    if m and m >= 1 and n > m then
        fail("--shard %s: %d parts of %d starts would leave a part empty: N must be at most the number of starts", spec, n, m)
    end
end

--- Options that do not apply to the chosen method or shape are refused:
--- an option silently ignored is a lie about what ran.
local function validate_run(a)
    check_choice(a.shape, SHAPE_NAMES, "--shape")
    check_choice(a.precision, PRECISION_NAMES, "--precision")
    check_choice(a.method, METHOD_NAMES, "--method")
    optional(check_choice_of(LAYOUT_NAMES), a.layout, "--layout")
    positive_integer(a.in_flight, "--in-flight", 64)
    optional(positive_integer, a.length, "--length")
    optional(positive_integer, a.batch, "--batch")
    local target_ms = positive_number(a.target_ms, "--target-ms")
    if target_ms > 900 then
        fail("--target-ms %s is out of range: more than 0 and at most 900 (a submission must stay under a second)", a.target_ms)
    end
    optional(positive_integer, a.memory_budget, "--memory-budget")
    optional(positive_integer, a.l2_bytes, "--l2-bytes")
    optional(positive_integer, a.workgroup_size, "--workgroup-size")
    -- A tile is a 32-bit push constant.
    if a.tile_size ~= nil and a.tile_size ~= "auto" then positive_integer(a.tile_size, "--tile-size", 4294967295) end
    check_starts_syntax(a.starts)
    device_entries(a.device)
    if a.shard then check_shard(a.shard, a.starts) end
    local tile_options = {}
    if a.tile_size then tile_options[#tile_options + 1] = "--tile-size" end
    if a.l2_bytes then tile_options[#tile_options + 1] = "--l2-bytes" end
    if a.measure_l2 then tile_options[#tile_options + 1] = "--measure-l2" end
    if a.method == "gram" then
        if a.shape ~= "baseline" or a.precision ~= "fp32" then
            fail("--method gram runs the fp32 contract with its own kernel; %s applies to --method direct only",
                a.shape ~= "baseline" and "--shape " .. a.shape or "--precision " .. a.precision)
        end
        if tile_options[1] then fail("%s applies to the direct method's tiled shapes, not to --method gram", tile_options[1]) end
    elseif tile_options[1] and a.shape == "baseline" then
        fail("%s applies to --shape tiled and tile-dispatch only, not to --shape baseline", tile_options[1])
    end
    if a.memory_budget then
        if a.method ~= "auto" then
            fail("--memory-budget plans --method auto's choice; it does not apply to --method %s", a.method)
        elseif a.shape ~= "baseline" or a.precision ~= "fp32" then
            fail("--memory-budget plans --method auto's choice of gram, which only --shape baseline "
                .. "--precision fp32 can make; it does not apply to --shape %s --precision %s", a.shape, a.precision)
        end
    end
    if a.tile_size and a.tile_size ~= "auto" and (a.l2_bytes or a.measure_l2) then
        fail("%s sizes the tile for --tile-size auto; it does not apply to --tile-size %s",
            a.l2_bytes and "--l2-bytes" or "--measure-l2", a.tile_size)
    end
    if a.l2_bytes and a.measure_l2 then fail("--l2-bytes and --measure-l2 both give the L2 size: use one") end
    local inputs = { { "--embeddings", a.embeddings } }
    if a.precision == "fp16" then
        check_path(a.embeddings, "--embeddings")
        local dir = a.embeddings:match("^(.*)/[^/]*$") or "."
        inputs[2] = { "--embeddings' embeddings_fp16.bin", dir .. "/embeddings_fp16.bin" }
        inputs[3] = { "--embeddings' embeddings_fp16.meta.json", dir .. "/embeddings_fp16.meta.json" }
    end
    if a.stats == "-" then fail("--stats -: the stats are a file of their own; name one") end
    check_outputs({ { "--out", a.out }, { "--stats", a.stats } }, inputs, true)
end

local X_AXES = { "step", "elapsed" }

local function validate_plot(a)
    check_choice(a.x, X_AXES, "--x")
    check_choice(a.scale, { "auto", "linear", "log" }, "--scale")
    local w = positive_integer(a.width, "--width")
    if w < 200 or w > 8000 then fail("--width %d is out of range: 200..8000 pixels", w) end
    local hgt = a.height and positive_integer(a.height, "--height")
    if hgt and (hgt < 150 or hgt > 8000) then fail("--height %d is out of range: 150..8000 pixels", hgt) end
    local colours = #require("divgpu").plot_palette
    if #a.stats > colours then fail("%d stats files: a chart draws at most %d (one colour each)", #a.stats, colours) end
    local inputs = {}
    for i, path in ipairs(a.stats) do inputs[i] = { "stats file", path } end
    check_outputs({ { "--out", a.out } }, inputs, false)
end

--- `divgpu plot STATS... --out PNG`: each file read and checked (one line
--- naming the file and line on error), then one chart.
local function cmd_plot(a)
    local stats = require "divgpu.stats"
    local runs = {}
    for i, path in ipairs(a.stats) do
        local run, err = stats.read(path)
        if not run then fail("%s", err) end
        if #run.chunks == 0 then fail("%s: no chunk records to draw", path) end
        runs[i] = run
    end
    require("divgpu.charts").runs(runs, { out = a.out, x = a.x, scale = a.scale, title = a.title, width = tonumber(a.width),
                                          height = a.height and tonumber(a.height) })
    write_stdout(a.out, "\n")
end

local VALIDATE = {
    run = validate_run,
    ["convert-fp16"] = function(a) check_path(a.embeddings, "convert-fp16") end,
    verify = function(a)
        optional(positive_integer, a.sequences, "--sequences")
        check_path(a.cache, "--cache")
        check_path(a.embeddings, "--embeddings")
    end,
    merge = function(a)
        if not a.out then fail("merge needs --out PATH (the merged cache to write)") end
        local inputs = {}
        for i, path in ipairs(a.parts) do inputs[i] = { "part", path } end
        check_outputs({ { "--out", a.out } }, inputs, true)
    end,
    synth = function(a)
        local n = positive_integer(a.n, "--n")
        if n < 2 then fail("--n '%s' is out of range: a table has at least 2 items", a.n) end
        positive_integer(a.dim, "--dim")
        -- More centres than items would only cost memory (16, the default, is always allowed).
        local k = positive_integer(a.clusters, "--clusters")
        if k > math.max(n, 16) then
            fail("--clusters '%s' is out of range: 1..%d (the larger of --n and 16)", a.clusters, math.max(n, 16))
        end
        local seed = tonumber(a.seed)
        if not seed or seed < 0 or seed % 1 ~= 0 then fail("--seed '%s' is not a non-negative integer", tostring(a.seed)) end
        if seed > MAX_INTEGER then fail("--seed '%s' is out of range: 0..%d", a.seed, MAX_INTEGER) end
        check_outputs({ { "--out", a.out } }, {}, true)
    end,
    info = function(a)
        optional(positive_integer, a.max_mib, "--max-mib")
        if not a.measure_l2 then
            if a.max_mib then fail("--max-mib applies to --measure-l2 only") end
            if a.device then fail("--device applies to --measure-l2 only (info lists every device)") end
        end
    end,
    bench = function(a) require("divgpu.bench").validate(a, _M) end,
    plot = validate_plot,
}

local function build_parser()
    local p = argparse("divgpu", "Diversity sequences on the GPU (Vulkan compute), bit-exact on every device.")
    p:command_target("command")
    p:require_command(true)

    local run = p:command("run", "Compute the diversity sequences and write the cache (SPEC section 4).")
    run:epilog("Each finished batch is committed to OUT.checkpoint/ beside the output. Ctrl-C (SIGINT) or "
        .. "SIGTERM stops at the next chunk boundary (exit 130 or 143; a second signal exits at once); kill -9 "
        .. "loses at most the batches in progress and any still being written. Running the same command again resumes and writes the bytes "
        .. "of an uninterrupted run; a checkpoint of another table, --length, --starts or contract is refused "
        .. "(--restart discards it).")
    run:option("--embeddings", "embeddings.json to read." .. EMBEDDINGS_HELP, DEFAULT_EMBEDDINGS)
    run:option("--out", "Cache to write (atomically; a link is written through), held by OUT.lock while the run lasts; "
        .. "- streams it to standard output (no checkpoint).", "diversity_cache.json")
    run:option("--starts", "Starting items: A:B (A <= s < B) or i,j,k. Default: every item.")
    run:option("--shard", "I/N: run only part I of N of the starts (I is 0-based: 0 <= I < N; N <= the number of "
        .. "starts), the contiguous block of positions floor(I*M/N) .. floor((I+1)*M/N)-1 of the M starts; the cache "
        .. "is a part for 'divgpu merge'.")
    run:option("--length", "Items per sequence, 1..N. Default: N (a full ordering).")
    run:option("--batch", "Sequences per GPU batch. Default: from the device's limits.")
    run:option("--device", "Device index or name substring (see 'divgpu info'); all (every GPU); or a list "
        .. "0,1 (the sequences are split across them, same output; naming one device twice opens two "
        .. "contexts on it). Default: a discrete GPU.")
    run:option("--target-ms", "GPU time each submission aims at, in milliseconds (90: a tenfold rise in cost "
        .. "still keeps the two chunks in flight under a second).", "90")
    run:option("--method", "auto (gram where G and the state fit the device's memory, else direct), "
        .. "direct (every candidate's exact chain every step) or gram (the certified Gram filter, SPEC section 8).", "auto")
    run:option("--memory-budget", "Device memory in MiB that --method auto may plan for. Default: the device's.")
    run:option("--shape", "Shape of the direct method's work: baseline, tiled or tile-dispatch (SPEC section 5).", "baseline")
    run:option("--in-flight", "Submissions kept in flight (the CPU records the next while the GPU runs one).", "2")
    run:option("--precision", "fp32 (the contract), fp16 (reads embeddings_fp16.bin; own contract) "
        .. "or fp16-exact (half loads filter, fp32 decides: identical to fp32).", "fp32")
    run:option("--layout", "Table layout on the GPU: rows (as the JSON) or columns (coalesced loads; same output). "
        .. "Default: columns for direct, rows for gram.")
    run:option("--tile-size", "Candidates per tile for tiled shapes, or auto (from the L2 size). Default: auto.")
    run:option("--l2-bytes", "L2 size in bytes for --tile-size auto (default: known-device table).")
    run:flag("--measure-l2", "Measure the L2 size for --tile-size auto instead of using the table.")
    run:option("--workgroup-size", "Threads per sequence (default: 256 on a GPU, 64 on a CPU device).")
    run:flag("--wait", "If another run is writing --out (it holds OUT.lock), wait for it instead of refusing.")
    run:flag("--restart", "Discard OUT.checkpoint/ (what an interrupted run of another job left) "
        .. "instead of refusing it. A checkpoint of this same job is resumed without it.")
    run:flag("--quiet", "No progress or summary on stderr.")
    run:option("--stats", "Write per-chunk figures (steps, speed, GPU time; gram: windows, fallbacks) to this "
        .. "file as JSON lines (README \"File formats\"), streamed to a temporary beside it and renamed at the end.")

    local convert = p:command("convert-fp16", "Write embeddings_fp16.bin and its meta file next to an embeddings.json.")
    convert:argument("embeddings", "The embeddings.json to convert.")

    local verify = p:command("verify", "Check a cache against the CPU mirror; names the first difference.")
    verify:option("--embeddings", "embeddings.json the cache was made from." .. EMBEDDINGS_HELP, DEFAULT_EMBEDDINGS)
    verify:option("--cache", "Cache to check.", "diversity_cache.json")
    verify:option("--sequences", "Check only the first K sequences. Default: all.")
    verify:flag("--quiet", "No progress on stderr.")

    local merge = p:command("merge", "Check the parts of a sharded run (run --shard I/N) and merge them into one "
        .. "cache, byte-identical to the unsharded run's.")
    merge:epilog("Every part must be of the same table, contract, length, format version and run (its count of parts "
        .. "and starts); each shard once, none missing. Any other input is refused with one line naming the file; "
        .. "the output is written atomically (an existing one stays as it was on failure).")
    merge:argument("parts", "The part files, in any order."):args("+")
    merge:option("--out", "Cache to write (atomically; - for standard output); required.")
    merge:flag("--quiet", "No summary on stderr.")

    local synth = p:command("synth", "Write a clustered synthetic embeddings.json (SPEC section 6).")
    synth:option("--n", "Number of items."):args(1)
    synth:option("--dim", "Values per item."):args(1)
    synth:option("--clusters", "Number of cluster centres.", "16")
    synth:option("--seed", "Random seed.", "1")
    synth:option("--out", "File to write (atomically; - for standard output)."):args(1)

    local info = p:command("info", "List the Vulkan devices and their features.")
    info:flag("--measure-l2", "Measure the L2 size of a device with a read-bandwidth sweep.")
    info:option("--device", "Device to measure (index or name substring).")
    info:option("--max-mib", "Largest working set of the sweep, in MiB (default 512).")

    require("divgpu.bench").add_command(p)

    local plot = p:command("plot", "Draw stats files of 'run --stats' as a PNG chart: sequence-steps per second "
        .. "and GPU time per step over the run, one line per file.")
    plot:argument("stats", "Stats files written by run --stats."):args("+")
    plot:option("--out", "PNG to write (atomically).", "run.png")
    plot:option("--x", "The x axis: step (every batch from step 1) or elapsed (seconds since the run began).", "step")
    plot:option("--scale", "The y axes: linear, log, or auto (log where a panel's values span over 20x).", "auto")
    plot:option("--title", "The chart's title.")
    plot:option("--width", "Width in pixels.", "1200")
    plot:option("--height", "Height in pixels. Default: 800, 1000 with the gram panel.")
    return p
end

local function main(argv)
    local parser = build_parser()
    local ok, a = parser:pparse(argv)
    if not ok then
        if a:match("^Usage") then  -- --help output
            io_stdout:write(a, "\n")
            return 0
        end
        -- argparse's message may run over lines ("Did you mean ...?"): one line.
        io_stderr:write("divgpu: ", (a:gsub("%s*\n%s*", "; ")), " (see 'divgpu --help')\n")
        return 2
    end
    if a.command == "synth" then
        if not a.n or not a.dim or not a.out then
            io_stderr:write("divgpu: synth needs --n, --dim and --out (see 'divgpu synth --help')\n")
            return 2
        end
    end
    -- Every option value is checked before any work starts (nothing read,
    -- nothing written, no device opened).
    local checked, why = pcall(VALIDATE[a.command], a)
    if not checked then
        io_stderr:write("divgpu: ", first_line(why), " (see 'divgpu ", a.command, " --help')\n")
        return 2
    end
    local commands = { run = cmd_run, verify = cmd_verify, synth = cmd_synth, info = cmd_info, merge = cmd_merge,
                       ["convert-fp16"] = cmd_convert_fp16, plot = cmd_plot,
                       bench = function(args) return require("divgpu.bench").command(args, _M) end }
    local ran, err = xpcall(commands[a.command], function(e)
        if type(e) == "table" and e.divgpu_user_error then return e.divgpu_user_error end
        local msg = tostring(e)
        if os.getenv("DIVGPU_DEBUG") then return debug.traceback(msg, 2) end
        return msg
    end, a)
    if not ran then
        local msg = tostring(err):gsub("^runtime error: ", "")
        if not os.getenv("DIVGPU_DEBUG") then msg = strip_location(msg:match("^[^\n]*")) end
        io_stderr:write("divgpu: ", msg, "\n")
        return 1
    end
    return type(err) == "number" and err or 0  -- a command's own exit status (run: 130 when interrupted)
end

_M.main = main
return _M
