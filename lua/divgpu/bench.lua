-- `divgpu bench`: A/B of two or more configurations of `run` on one table,
-- the way SPEC section 7 measures: parity first (every configuration's first
-- --parity-sequences sequences against the CPU mirror, and its whole output
-- against the first configuration of its contract; one that differs is
-- refused, not timed), a warm-up, then alternating pairs (24 by default);
-- per configuration the median per-pair ratio of its time to the first
-- configuration's, the pairs it won, and iterations per second over the first
-- --steps steps. The ratio is of GPU time (timestamps), except between
-- configurations with different in-flight counts: those are compared by wall
-- clock, since GPU timestamps cannot see the idle gaps in flight removes.
--
-- A configuration of the direct method is
-- SHAPE[:PRECISION][:kIN_FLIGHT][:tTILE][:columns], e.g. `baseline`,
-- `tiled:fp16-exact:k2`, `tile-dispatch:fp32:k1:t4096`, `baseline:columns`;
-- one of the Gram method is gram[:kIN_FLIGHT][:columns]; `auto` is whichever
-- `run --method auto` would pick (SPEC section 8). A configuration named by
-- a shape runs the method of `--method` (default auto: gram for baseline
-- fp32 where G fits); `direct:SHAPE...` always runs the direct method.

local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"

local min, max = math.min, math.max
local string_format, table_sort = string.format, table.sort
local io_stdout, io_stderr = io.stdout, io.stderr
local ipairs, tonumber, tostring = ipairs, tonumber, tostring


local _M = {}

function _M.add_command(parser)
    local b = parser:command("bench", "A/B configurations of run in alternating pairs (SPEC section 7).")
    b:argument("configs", "SHAPE[:PRECISION][:kIN_FLIGHT][:tTILE][:columns] (the direct method) or "
        .. "gram|auto[:kIN_FLIGHT][:columns] (SPEC section 8); the first is the reference."):args("2+")
    b:option("--method", "The method of configurations named by a shape: auto (gram where G fits the device, "
        .. "for baseline fp32), direct or gram (SPEC section 8).", "auto")
    b:option("--embeddings", "embeddings.json to run on (default: the shipped poems).")
    b:option("--synth", "Use a synthetic clustered table N,D[,CLUSTERS] instead.")
    b:option("--sequences", "Sequences per run (default: every item, at most 4096).")
    b:option("--steps", "Steps per run (iterations timed).", "100")
    b:option("--pairs", "Alternating pairs after the warm-up (SPEC section 7: at least 24).", "24")
    b:option("--batch", "Sequences per batch (default: from the device).")
    b:option("--device", "Device index or name substring.")
    b:option("--l2-bytes", "L2 size in bytes for configurations without a tile (default: known-device table).")
    b:option("--parity-sequences", "Sequences of the first configuration checked against the CPU mirror.", "16")
    b:flag("--json", "Print the results as JSON.")
    b:option("--plot", "Also draw the pairs to this PNG: each configuration's time per pair and its speed-up "
        .. "over the first, per pair.")
end

local function parse_config(text, h, default_method)
    local parts = {}
    for p in text:gmatch("[^:]+") do parts[#parts + 1] = p end
    local method = default_method
    if parts[1] == "gram" or parts[1] == "auto" then
        -- A method's configuration: METHOD[:kIN_FLIGHT][:columns|rows].
        method = parts[1]
        parts[1] = "baseline"
    elseif parts[1] == "direct" then
        -- direct:SHAPE[...]: the direct method whatever --method says.
        method = "direct"
        table.remove(parts, 1)
        parts[1] = parts[1] or "baseline"
    end
    local c = { name = text, method = method,
                shape = h.check_choice(parts[1], h.SHAPE_NAMES, "configuration '" .. text .. "': shape"),
                precision = "fp32", in_flight = 2, layout = "rows" }
    for i = 2, #parts do
        local p = parts[i]
        if p:match("^k%d+$") then c.in_flight = h.positive_integer(p:sub(2), "configuration '" .. text .. "': in flight k")
        elseif p:match("^t%d+$") then c.tile = h.positive_integer(p:sub(2), "configuration '" .. text .. "': tile t")
        elseif p == "columns" or p == "rows" then c.layout = p
        else c.precision = h.check_choice(p, h.PRECISION_NAMES, "configuration '" .. text .. "': precision") end
    end
    -- What a configuration names must apply to it (as for run's options).
    if c.method == "gram" and (c.shape ~= "baseline" or c.precision ~= "fp32") then
        h.fail("configuration '%s': --method gram runs the fp32 contract with its own kernel; %s applies to "
            .. "the direct method only", text, c.shape ~= "baseline" and "shape " .. c.shape or "precision " .. c.precision)
    end
    if c.tile and (c.method == "gram" or c.shape == "baseline") then
        h.fail("configuration '%s': a tile (t%d) applies to the direct method's tiled shapes only", text, c.tile)
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

local function synth_spec(text, h)
    local n, d, k = text:match("^(%d+),(%d+),?(%d*)$")
    if not n then h.fail("--synth '%s': expected N,D[,CLUSTERS]", text) end
    n, d, k = tonumber(n), tonumber(d), tonumber(k) or 16
    if n < 1 or d < 1 or k < 1 then h.fail("--synth '%s': N, D and CLUSTERS must be positive", text) end
    return n, d, k
end

--- Every option value and configuration checked before any work starts.
function _M.validate(a, h)
    h.positive_integer(a.steps, "--steps")
    h.positive_integer(a.pairs, "--pairs")
    h.positive_integer(a.parity_sequences, "--parity-sequences")
    if a.sequences then h.positive_integer(a.sequences, "--sequences") end
    if a.batch then h.positive_integer(a.batch, "--batch") end
    if a.l2_bytes then h.positive_integer(a.l2_bytes, "--l2-bytes") end
    local method = h.check_choice(a.method, { "auto", "direct", "gram" }, "--method")
    if a.synth then
        synth_spec(a.synth, h)
        if a.embeddings then h.fail("--synth and --embeddings both name the table: use one") end
    end
    local tiled = false
    for _, text in ipairs(a.configs) do
        local c = parse_config(text, h, method)
        if c.shape ~= "baseline" and not c.tile then tiled = true end
    end
    if a.plot then h.check_outputs({ { "--plot", a.plot } }, { { "--embeddings", a.embeddings } }, false) end
    if a.l2_bytes and not tiled then
        h.fail("--l2-bytes sizes the tile of tiled configurations without tTILE; no configuration has one")
    end
end

--- The parity gate of one configuration's output `out`: its first `check`
--- sequences against the CPU mirror (made once per contract, kept in
--- state.mirrors), then all of it against the first configuration of its
--- contract (state.references) bit for bit. Fails with one line naming both.
function _M.parity(c, out, starts, length, check, state, h)
    local mirror = state.mirrors[c.contract]
    if not mirror then
        local few = divgpu.array("u32", check)
        for i = 1, check do few[i] = starts[i] end
        mirror = divgpu.mirror(c.table, few, length)
        state.mirrors[c.contract] = mirror
    end
    local head = divgpu.array("u32", check * length)
    for i = 1, check * length do head[i] = out[i] end
    local d = divgpu.first_difference(head, mirror, length)
    if d then h.fail("%s differs from the CPU mirror (sequence %d, step %d): not measured", c.name, d.row, d.step) end
    local ref = state.references[c.contract]
    if not ref then
        state.references[c.contract] = { out = out, name = c.name }
        return
    end
    d = divgpu.first_difference(out, ref.out, length)
    if d then
        h.fail("%s is not bit-identical to %s (sequence %d, step %d): a bug, not a benchmark entry",
            c.name, ref.name, d.row, d.step)
    end
end

function _M.command(a, h)
    _M.validate(a, h)
    local steps = h.positive_integer(a.steps, "--steps")
    local pairs_n = h.positive_integer(a.pairs, "--pairs")
    local e
    if a.synth then
        local n, d, k = synth_spec(a.synth, h)
        e = divgpu.synth{ n = n, dim = d, clusters = k, seed = 1 }
    else
        e = divgpu.load_embeddings(a.embeddings or h.DEFAULT_EMBEDDINGS)
    end
    if steps + 1 > e.n then h.fail("--steps %d needs at least %d items; the table has %d", steps, steps + 1, e.n) end
    local count = a.sequences and h.positive_integer(a.sequences, "--sequences") or min(e.n, 4096)
    count = min(count, e.n)
    local starts = divgpu.array("u32", count)
    for i = 1, count do starts[i] = (i - 1) % e.n end
    local length = steps + 1
    local ctx = vk.open{ device = h.device_option(a.device) }
    local e16 -- E' for fp16 configurations, made once
    local configs = {}
    for i, text in ipairs(a.configs) do
        local c = parse_config(text, h, h.check_choice(a.method, { "auto", "direct", "gram" }, "--method"))
        local table_ = e
        if c.precision == "fp16" then
            e16 = e16 or e:fp16_rounded()
            table_ = e16
        end
        local tile, note = h.choose_tile(ctx, table_, c.shape, c.precision, c.tile and tostring(c.tile) or "auto", a.l2_bytes)
        c.tile, c.tile_note, c.table = tile, note, table_
        c.contract = c.precision == "fp16" and "fp16" or "fp32"
        do
            local asked, why = c.method, nil
            c.method, why = h.choose_method(ctx, table_, { method = asked }, c.shape, c.precision, count)
            if asked == "auto" then
                c.name = c.name .. " (" .. c.method .. ")"
                io_stderr:write("divgpu: ", text, ": ", why, "\n")
            end
        end
        if c.method == "gram" then
            c.job = require("divgpu.gram").job(ctx, table_, { layout = c.layout })
        else
            c.job = vk.job(ctx, table_, { shape = c.shape, precision = c.precision, tile_size = tile, layout = c.layout })
        end
        configs[i] = c
    end
    local batch = a.batch and h.positive_integer(a.batch, "--batch")
    -- Wall time is measured here, around the whole run, so that it covers
    -- everything in flight removes (recording, submission, waits).
    local function run(c)
        local t0 = driver.now()
        local result, stats = driver.run{ ctx = ctx, embeddings = c.table, starts = starts, length = length,
                                          job = c.job, in_flight = c.in_flight, batch = batch }
        return result, stats, driver.now() - t0
    end

    -- Parity before speed (also the warm-up).
    local state = { mirrors = {}, references = {} }
    local check = min(count, h.positive_integer(a.parity_sequences, "--parity-sequences"))
    local first = configs[1]
    for _, c in ipairs(configs) do
        local out = run(c)
        _M.parity(c, out, starts, length, check, state, h)
        c.gpu, c.wall, c.ratio, c.wins = {}, {}, {}, 0
        -- GPU timestamps cannot see the gaps between submissions that more
        -- frames in flight remove: such a pair is compared by wall clock.
        c.timed_by = c.in_flight ~= first.in_flight and "wall" or "gpu"
    end

    for p = 1, pairs_n do
        -- Alternate the order within each pair so drift does not favour one side.
        local order = {}
        for i = 1, #configs do order[i] = (p % 2 == 1) and i or (#configs + 1 - i) end
        for _, i in ipairs(order) do
            local c = configs[i]
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
        if not a.json then io_stderr:write(string_format("\rpair %d/%d", p, pairs_n)) io_stderr:flush() end
    end
    if not a.json then io_stderr:write("\r\27[K") end

    local rows = {}
    for i, c in ipairs(configs) do
        local gpu = median(c.gpu)
        local ratios = c.ratio
        local lo, hi = math.huge, -math.huge
        for _, r in ipairs(ratios) do lo, hi = min(lo, r), max(hi, r) end
        rows[i] = {
            config = c.name, shape = c.shape, precision = c.precision, in_flight = c.in_flight, tile = c.tile,
            layout = c.layout,
            median_gpu_seconds = gpu, median_wall_seconds = median(c.wall),
            min_gpu_seconds = math.min(unpack(c.gpu)), max_gpu_seconds = math.max(unpack(c.gpu)),
            iterations_per_second = steps / gpu,
            speedup_median = i > 1 and median(ratios) or 1, speedup_min = i > 1 and lo or 1,
            speedup_max = i > 1 and hi or 1, wins = i > 1 and c.wins or nil, pairs = pairs_n,
            speedup_from = i > 1 and (c.timed_by == "wall" and "wall clock" or "GPU timestamps") or nil,
            parity = string_format("first %d sequences = CPU mirror%s", check,
                i > 1 and ", whole output = the first " .. c.contract .. " configuration's" or ""),
        }
    end
    local meta = { device = ctx.info.name, driver = ctx.info.driver .. " " .. ctx.info.driver_info,
                   fma = vk.fma_mode(ctx), items = e.n, dim = e.dim, sequences = count, steps = steps,
                   pairs = pairs_n }
    if a.plot then
        require("divgpu.charts").pairs(configs, meta, { out = a.plot })
        io_stderr:write("divgpu: pairs drawn to ", a.plot, "\n")
    end
    if a.json then
        h.write_stdout(_M.encode_json{ meta = meta, results = rows }, "\n")
        return
    end
    io_stdout:write(string_format("%s (%s), %d items x %d dims, %d sequences, first %d steps, %d pairs\n",
        meta.device, meta.driver, e.n, e.dim, count, steps, pairs_n))
    for _, c in ipairs(configs) do
        if c.tile_note then io_stdout:write("  ", c.name, ": ", c.tile_note, "\n") end
    end
    io_stdout:write(string_format("  parity: every configuration's first %d sequences match the CPU mirror; "
        .. "every output matches the first of its contract bit for bit\n", check))
    io_stdout:write(string_format("%-34s %12s %12s %10s %22s %6s %s\n", "config", "median GPU s", "median wall", "it/s",
        "speed-up (min..max)", "wins", "speed-up from"))
    for _, r in ipairs(rows) do
        io_stdout:write(string_format("%-34s %12.4f %12.4f %10.1f %8.3fx (%.3f..%.3f) %6s %s\n", r.config,
            r.median_gpu_seconds, r.median_wall_seconds, r.iterations_per_second, r.speedup_median,
            r.speedup_min, r.speedup_max, r.wins and string_format("%d/%d", r.wins, pairs_n) or "-",
            r.speedup_from or "-"))
    end
    for i = 2, #configs do
        if configs[i].timed_by == "wall" then
            io_stdout:write("  configurations with another in-flight count than the first are compared by wall "
                .. "clock: GPU timestamps cannot see the gaps in flight removes\n")
            break
        end
    end
    h.write_stdout()  -- flushed: a write that failed is an error
end

return _M
