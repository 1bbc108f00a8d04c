-- `divgpu bench`: A/B of two or more configurations of `run` on one table,
-- the way docs/contract.md#measuring says: parity first (every
-- configuration's first --parity-sequences sequences against the CPU
-- mirror, and its whole output against the first configuration of its
-- contract; one that differs is refused, not timed), a warm-up, then
-- alternating pairs (24 by default); per configuration the median per-pair
-- ratio of its time to the first configuration's, the pairs it won, and
-- iterations per second over the first --steps steps. The ratio is of GPU
-- time (timestamps), except between configurations with different in-flight
-- counts: those are compared by wall clock, since GPU timestamps cannot see
-- the idle gaps in flight removes.
--
-- A configuration of the direct method is
-- SHAPE[:PRECISION][:kIN_FLIGHT][:tTILE][:columns], e.g. `baseline`,
-- `tiled:fp16-exact:k2`, `tile-dispatch:fp32:k1:t4096`, `baseline:columns`;
-- one of another method is METHOD[:kIN_FLIGHT][:columns] (`gram`); `auto` is
-- whichever `run --method auto` would pick (docs/contract.md#auto). A
-- configuration named by a shape runs the method of `--method` (default
-- auto: the cheaper of gram and that shape by the cost model, as run);
-- `direct:SHAPE...` always runs the direct method. Its options are cli/options.lua's.

local divgpu = require "divgpu"
local device = require "divgpu.device"
local driver = require "divgpu.driver"
local failure = require "divgpu.failure"
local methods = require "divgpu.methods"
local plan = require "divgpu.plan"
local options = require "divgpu.cli.options"
local report = require "divgpu.cli.report"
local run_command = require "divgpu.cli.run"

local need, fail = failure.need, options.fail
local positive_integer, check_choice = options.positive_integer, options.check_choice
local min, max = math.min, math.max
local string_format, table_sort = string.format, table.sort
local io_stderr = io.stderr
local ipairs, pairs, type, tonumber, tostring = ipairs, pairs, type, tonumber, tostring

local _M = {}

--- Whether a configuration's first word names a method of its own (auto,
--- or one with its own kernel: not direct, whose configurations are shapes).
local function is_method(word)
    if word == "auto" then return true end
    for _, m in ipairs(methods.names()) do
        if m == word and m ~= "direct" then return true end
    end
    return false
end

--- A configuration, parsed: its method, shape, precision, in-flight count,
--- tile and layout. What it names must apply to it (as for run's options).
local function parse_config(text, default_method)
    local parts = {}
    for p in text:gmatch("[^:]+") do parts[#parts + 1] = p end
    local method = default_method
    local shape_default = options.shapes()[1]
    if is_method(parts[1]) then
        -- A method's configuration: METHOD[:kIN_FLIGHT][:columns|rows]; auto
        -- leaves the direct method's shape open, as run's default --shape does.
        method = parts[1]
        parts[1] = method == "auto" and methods.AUTO_SHAPE or shape_default
    elseif parts[1] == "direct" then
        -- direct:SHAPE[...]: the direct method whatever --method says.
        method = "direct"
        table.remove(parts, 1)
        parts[1] = parts[1] or shape_default
    end
    local label = "configuration '" .. text .. "': "
    local shape = parts[1] == methods.AUTO_SHAPE and method == "auto" and parts[1]
        or check_choice(parts[1], options.shapes(), label .. "shape")
    local c = { name = text, method = method, shape = shape,
                precision = "fp32", in_flight = 2, layout = "rows" }
    for i = 2, #parts do
        local p = parts[i]
        if p:match("^k%d+$") then c.in_flight = positive_integer(p:sub(2), label .. "in flight k")
        elseif p:match("^t%d+$") then c.tile = positive_integer(p:sub(2), label .. "tile t")
        elseif p == "columns" or p == "rows" then c.layout = p
        else c.precision = check_choice(p, options.precisions(), label .. "precision") end
    end
    local plain = methods.request(c.shape, c.precision).plain
    if c.method ~= "auto" and c.method ~= "direct" and not plain then
        fail("configuration '%s': --method %s runs the fp32 contract with its own kernel; %s applies to "
            .. "the direct method only", text, c.method,
            c.shape ~= shape_default and "shape " .. c.shape or "precision " .. c.precision)
    end
    if c.tile and ((c.method ~= "auto" and c.method ~= "direct") or not options.tiled(c.shape)) then
        fail("configuration '%s': a tile (t%d) applies to the direct method's tiled shapes only", text, c.tile)
    end
    return c
end

local function median(list)
    local s = {}
    for i, x in ipairs(list) do s[i] = x end
    table_sort(s)
    local n = #s
    if n == 0 then return nil end
    if n % 2 == 1 then return s[(n + 1) / 2] end
    return (s[n / 2] + s[n / 2 + 1]) / 2
end

--- The results as JSON (dkjson), keys in sorted order so runs diff cleanly.
function _M.encode_json(value)
    local keys, seen = {}, {}
    local function collect(v)
        if type(v) ~= "table" then return end
        for k, x in pairs(v) do
            if type(k) == "string" and not seen[k] then seen[k] = true keys[#keys + 1] = k end
            collect(x)
        end
    end
    collect(value)
    table_sort(keys)
    -- Loaded here: `divgpu run` builds the parser with bench in it and needs no JSON library.
    return require("dkjson").encode(value, { keyorder = keys })
end

local function synth_spec(text)
    local n, d, k = text:match("^(%d+),(%d+),?(%d*)$")
    if not n then fail("--synth '%s': expected N,D[,CLUSTERS]", text) end
    n, d, k = tonumber(n), tonumber(d), tonumber(k) or 16
    if n < 1 or d < 1 or k < 1 then fail("--synth '%s': N, D and CLUSTERS must be positive", text) end
    if n < 2 then fail("--synth '%s': a table has at least 2 items", text) end
    return n, d, k
end

--- Every option value and configuration checked before any work starts.
function _M.validate(a)
    positive_integer(a.steps, "--steps")
    positive_integer(a.pairs, "--pairs")
    positive_integer(a.parity_sequences, "--parity-sequences")
    if a.sequences then positive_integer(a.sequences, "--sequences") end
    if a.batch then positive_integer(a.batch, "--batch") end
    if a.l2_bytes then positive_integer(a.l2_bytes, "--l2-bytes", options.MAX_L2_BYTES) end
    if a.embeddings then options.check_path(a.embeddings, "--embeddings") end
    local method = check_choice(a.method, options.method_names(), "--method")
    if a.synth then
        synth_spec(a.synth)
        if a.embeddings then fail("--synth and --embeddings both name the table: use one") end
    end
    local tiled = false
    for _, text in ipairs(a.configs) do
        local c = parse_config(text, method)
        if options.tiled(c.shape) and not c.tile then tiled = true end
    end
    if a.plot then options.check_outputs({ { "--plot", a.plot } }, { { "--embeddings", a.embeddings } }, false) end
    if a.l2_bytes and not tiled then
        fail("--l2-bytes sizes the tile of tiled configurations without tTILE; no configuration has one")
    end
end

--- The parity gate of one configuration's output `out`: its first `check`
--- sequences against the CPU mirror (made once per contract, kept in
--- state.mirrors), then all of it against the first configuration of its
--- contract (state.references) bit for bit. Fails with one line naming both.
function _M.parity(c, out, starts, length, check, state)
    local mirror = state.mirrors[c.contract]
    if not mirror then
        mirror = need(divgpu.mirror(c.table, starts:slice(1, check), length))
        state.mirrors[c.contract] = mirror
    end
    local d = divgpu.first_difference(out:slice(1, check * length), mirror, length)
    if d then fail("%s differs from the CPU mirror (sequence %d, step %d): not measured", c.name, d.row, d.step) end
    local ref = state.references[c.contract]
    if not ref then
        state.references[c.contract] = { out = out, name = c.name }
        return
    end
    d = divgpu.first_difference(out, ref.out, length)
    if d then
        fail("%s is not bit-identical to %s (sequence %d, step %d): a bug, not a benchmark entry",
            c.name, ref.name, d.row, d.step)
    end
end

--- The table, the starts and the length of the bench's runs.
local function bench_job(a)
    local steps = positive_integer(a.steps, "--steps")
    local e
    if a.synth then
        local n, d, k = synth_spec(a.synth)
        e = need(divgpu.synth{ n = n, dim = d, clusters = k, seed = 1 })
    else
        e = need(divgpu.load_embeddings(a.embeddings or options.DEFAULT_EMBEDDINGS))
    end
    if steps + 1 > e.n then fail("--steps %d needs at least %d items; the table has %d", steps, steps + 1, e.n) end
    local count = min(a.sequences and positive_integer(a.sequences, "--sequences") or min(e.n, 4096), e.n)
    local starts = need(divgpu.array("u32", count))
    for i = 1, count do starts[i] = (i - 1) % e.n end
    return e, starts, steps + 1
end

--- Each configuration with its table, method, tile and job, made once; auto
--- weighs the methods by cost for `count` sequences of `length`, as run does.
local function prepare(a, ctx, e, count, length)
    local e16 -- E' for fp16 configurations, made once
    local configs = {}
    for i, text in ipairs(a.configs) do
        local c = parse_config(text, a.method)
        c.table = e
        if c.precision == "fp16" then
            e16 = e16 or need(e:fp16_rounded())
            c.table = e16
        end
        c.contract = c.precision == "fp16" and "fp16" or "fp32"
        local asked = c.method
        local p = run_command.make_plan({ ctx }, c.table, {
            method = asked, shape = c.shape, precision = c.precision, length = length, sequences = count,
            layout = c.layout, tile_size = c.tile, l2_bytes = a.l2_bytes and positive_integer(a.l2_bytes, "--l2-bytes") })
        local why = plan.lines(p)[1]
        c.method, c.shape, c.tile, c.tile_note = p.method, p.shape or c.shape, p.tile, p.why.tile
        if asked == "auto" then
            c.name = c.name .. " (" .. c.method .. ")"
            io_stderr:write("divgpu: ", text, ": ", why, "\n")
        end
        local m = methods.get(c.method)
        c.job = need(m.job(ctx, c.table, { shape = p.shape, precision = p.precision, tile_size = p.tile,
                                           layout = c.layout }))
        configs[i] = c
    end
    return configs
end

--- Parity before speed (also the warm-up), then the alternating pairs.
local function measure(a, configs, run, starts, length, check)
    local pairs_n = positive_integer(a.pairs, "--pairs")
    local state, first = { mirrors = {}, references = {} }, configs[1]
    for _, c in ipairs(configs) do
        _M.parity(c, run(c), starts, length, check, state)
        c.gpu, c.wall, c.ratio, c.wins = {}, {}, {}, 0
        -- GPU timestamps cannot see the gaps between submissions that more
        -- frames in flight remove: such a pair is compared by wall clock.
        c.timed_by = c.in_flight ~= first.in_flight and "wall" or "gpu"
    end
    -- The pairs done: a line redrawn on a terminal, plain lines in a log (--json: none).
    local show, finish = report.progress(a.json, { unit = "pairs" })
    local t0 = divgpu.clock.now()
    for p = 1, pairs_n do
        -- Alternate the order within each pair so drift does not favour one side.
        for k = 1, #configs do
            local c = configs[(p % 2 == 1) and k or (#configs + 1 - k)]
            local _, stats, wall = run(c)
            c.gpu[p], c.wall[p] = stats.gpu_seconds, wall
        end
        for i = 2, #configs do
            local c = configs[i]
            local mine, theirs = c.gpu[p], first.gpu[p]
            if c.timed_by == "wall" then mine, theirs = c.wall[p], first.wall[p] end
            c.ratio[p] = theirs / mine  -- speed-up over the first
            if mine < theirs then c.wins = c.wins + 1 end
        end
        show{ done = p, total = pairs_n, elapsed = divgpu.clock.now() - t0 }
    end
    finish()
    return pairs_n
end

--- One row of the results per configuration.
local function result_rows(configs, steps, pairs_n, check)
    local rows = {}
    for i, c in ipairs(configs) do
        local gpu = median(c.gpu)
        local lo, hi = math.huge, -math.huge
        for _, r in ipairs(c.ratio) do lo, hi = min(lo, r), max(hi, r) end
        rows[i] = {
            config = c.name, shape = c.shape, precision = c.precision, in_flight = c.in_flight, tile = c.tile,
            layout = c.layout, median_gpu_seconds = gpu, median_wall_seconds = median(c.wall),
            min_gpu_seconds = math.min(unpack(c.gpu)), max_gpu_seconds = math.max(unpack(c.gpu)),
            iterations_per_second = steps / gpu,
            speedup_median = i > 1 and median(c.ratio) or 1, speedup_min = i > 1 and lo or 1,
            speedup_max = i > 1 and hi or 1, wins = i > 1 and c.wins or nil, pairs = pairs_n,
            speedup_from = i > 1 and (c.timed_by == "wall" and "wall clock" or "GPU timestamps") or nil,
            parity = string_format("first %d sequences = CPU mirror%s", check,
                i > 1 and ", whole output = the first " .. c.contract .. " configuration's" or ""),
        }
    end
    return rows
end

--- The results as a table on standard output.
local function print_rows(meta, configs, rows, check)
    local lines = { string_format("%s (%s), %d items x %d dims, %d sequences, first %d steps, %d pairs\n",
        meta.device, meta.driver, meta.items, meta.dim, meta.sequences, meta.steps, meta.pairs) }
    for _, c in ipairs(configs) do
        if c.tile_note then lines[#lines + 1] = "  " .. c.name .. ": " .. c.tile_note .. "\n" end
    end
    lines[#lines + 1] = string_format("  parity: every configuration's first %d sequences match the CPU mirror; "
        .. "every output matches the first of its contract bit for bit\n", check)
    lines[#lines + 1] = string_format("%-34s %12s %12s %10s %22s %6s %s\n", "config", "median GPU s", "median wall",
        "it/s", "speed-up (min..max)", "wins", "speed-up from")
    for _, r in ipairs(rows) do
        lines[#lines + 1] = string_format("%-34s %12.4f %12.4f %10.1f %8.3fx (%.3f..%.3f) %6s %s\n", r.config,
            r.median_gpu_seconds, r.median_wall_seconds, r.iterations_per_second, r.speedup_median, r.speedup_min,
            r.speedup_max, r.wins and string_format("%d/%d", r.wins, meta.pairs) or "-", r.speedup_from or "-")
    end
    for i = 2, #configs do
        if configs[i].timed_by == "wall" then
            lines[#lines + 1] = "  configurations with another in-flight count than the first are compared by wall "
                .. "clock: GPU timestamps cannot see the gaps in flight removes\n"
            break
        end
    end
    report.write_stdout(table.concat(lines))
end

--- `divgpu bench`.
function _M.command(a)
    _M.validate(a)
    local e, starts, length = bench_job(a)
    local ctx = need(device.open{ device = options.device_option(a.device) })
    local configs = prepare(a, ctx, e, #starts, length)
    local batch = a.batch and positive_integer(a.batch, "--batch")
    -- Wall time is measured here, around the whole run, so that it covers
    -- everything in flight removes (recording, submission, waits).
    local function run(c)
        local t0 = divgpu.clock.now()
        local result, stats = need(driver.run{ ctx = ctx, embeddings = c.table, starts = starts, length = length,
                                               job = c.job, in_flight = c.in_flight, batch = batch })
        return result, stats, divgpu.clock.now() - t0
    end
    local check = min(#starts, positive_integer(a.parity_sequences, "--parity-sequences"))
    local pairs_n = measure(a, configs, run, starts, length, check)
    local rows = result_rows(configs, length - 1, pairs_n, check)
    local meta = { device = ctx.info.name, driver = ctx.info.driver .. " " .. ctx.info.driver_info,
                   fma = need(device.fma_mode(ctx)), items = e.n, dim = e.dim, sequences = #starts, steps = length - 1,
                   pairs = pairs_n }
    if a.plot then
        need(require("divgpu.charts").pairs(configs, meta, { out = a.plot }))
        io_stderr:write("divgpu: pairs drawn to ", a.plot, "\n")
    end
    if a.json then return report.write_stdout(_M.encode_json{ meta = meta, results = rows }, "\n") end
    print_rows(meta, configs, rows, check)
end

return _M
