-- `divgpu bench`: A/B of two or more configurations of `run` on one table,
-- the way SPEC section 7 measures: parity first (a configuration whose output
-- differs from the first one's under the same contract is refused, not
-- timed), a warm-up, then alternating pairs; per configuration the median
-- per-pair ratio of GPU time to the first configuration's, the pairs it won,
-- and iterations per second over the first --steps steps.
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

local floor, min, max = math.floor, math.min, math.max
local string_format, table_concat, table_sort = string.format, table.concat, table.sort
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
    b:option("--pairs", "Alternating pairs after the warm-up.", "8")
    b:option("--batch", "Sequences per batch (default: from the device).")
    b:option("--device", "Device index or name substring.")
    b:option("--l2-bytes", "L2 size in bytes for configurations without a tile (default: known-device table).")
    b:option("--parity-sequences", "Sequences of the first configuration checked against the CPU mirror.", "16")
    b:flag("--json", "Print the results as JSON.")
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
    local c = { name = text, method = method, shape = h.check_choice(parts[1], h.SHAPE_NAMES, "configuration shape"),
                precision = "fp32", in_flight = 2, layout = "rows" }
    for i = 2, #parts do
        local p = parts[i]
        if p:match("^k%d+$") then c.in_flight = tonumber(p:sub(2))
        elseif p:match("^t%d+$") then c.tile = tonumber(p:sub(2))
        elseif p == "columns" or p == "rows" then c.layout = p
        else c.precision = h.check_choice(p, h.PRECISION_NAMES, "configuration precision") end
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

local function json_value(v)
    if type(v) == "table" then
        if #v > 0 or next(v) == nil then
            local out = {}
            for i, x in ipairs(v) do out[i] = json_value(x) end
            return "[" .. table_concat(out, ",") .. "]"
        end
        local keys = {}
        for k in pairs(v) do keys[#keys + 1] = k end
        table_sort(keys)
        local out = {}
        for _, k in ipairs(keys) do out[#out + 1] = string_format("%q:%s", k, json_value(v[k])) end
        return "{" .. table_concat(out, ",") .. "}"
    elseif type(v) == "string" then
        return string_format("%q", v)
    elseif v == nil then
        return "null"
    end
    return tostring(v)
end

function _M.command(a, h)
    local steps = h.positive_integer(a.steps, "--steps")
    local pairs_n = h.positive_integer(a.pairs, "--pairs")
    local e
    if a.synth then
        local n, d, k = a.synth:match("^(%d+),(%d+),?(%d*)$")
        if not n then h.fail("--synth '%s': expected N,D[,CLUSTERS]", a.synth) end
        e = divgpu.synth{ n = tonumber(n), dim = tonumber(d), clusters = tonumber(k) or 16, seed = 1 }
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
    local function run(c)
        local result, stats = driver.run{ ctx = ctx, embeddings = c.table, starts = starts, length = length,
                                          job = c.job, in_flight = c.in_flight, batch = batch }
        return result, stats
    end

    -- Parity before speed (also the warm-up): the first configuration of each
    -- contract is checked against the CPU mirror on a few sequences, every
    -- other one against it, bit for bit.
    local reference = {}
    local check = min(count, h.positive_integer(a.parity_sequences, "--parity-sequences"))
    for _, c in ipairs(configs) do
        local out = run(c)
        local ref = reference[c.contract]
        if not ref then
            local few = divgpu.array("u32", check)
            local head = divgpu.array("u32", check * length)
            for i = 1, check do few[i] = starts[i] end
            for i = 1, check * length do head[i] = out[i] end
            local d = divgpu.first_difference(head, divgpu.mirror(c.table, few, length), length)
            if d then h.fail("%s differs from the CPU mirror (sequence %d, step %d): not measured", c.name, d.row, d.step) end
            reference[c.contract] = { out = out, name = c.name }
        else
            local d = divgpu.first_difference(out, ref.out, length)
            if d then
                h.fail("%s is not bit-identical to %s (sequence %d, step %d): a bug, not a benchmark entry",
                    c.name, ref.name, d.row, d.step)
            end
        end
        c.gpu, c.wall, c.ratio, c.wins = {}, {}, {}, 0
    end

    for p = 1, pairs_n do
        -- Alternate the order within each pair so drift does not favour one side.
        local order = {}
        for i = 1, #configs do order[i] = (p % 2 == 1) and i or (#configs + 1 - i) end
        for _, i in ipairs(order) do
            local c = configs[i]
            local _, stats = run(c)
            c.gpu[p], c.wall[p] = stats.gpu_seconds, stats.wall_seconds
        end
        local first = configs[1]
        for i = 2, #configs do
            local c = configs[i]
            c.ratio[p] = first.gpu[p] / c.gpu[p]  -- speed-up over the first
            if c.gpu[p] < first.gpu[p] then c.wins = c.wins + 1 end
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
        }
    end
    local meta = { device = ctx.info.name, driver = ctx.info.driver .. " " .. ctx.info.driver_info,
                   fma = vk.fma_mode(ctx), items = e.n, dim = e.dim, sequences = count, steps = steps,
                   pairs = pairs_n }
    if a.json then
        io_stdout:write(json_value{ meta = meta, results = rows }, "\n")
        return
    end
    io_stdout:write(string_format("%s (%s), %d items x %d dims, %d sequences, first %d steps, %d pairs\n",
        meta.device, meta.driver, e.n, e.dim, count, steps, pairs_n))
    for _, c in ipairs(configs) do
        if c.tile_note then io_stdout:write("  ", c.name, ": ", c.tile_note, "\n") end
    end
    io_stdout:write(string_format("%-34s %12s %12s %10s %22s %6s\n", "config", "median GPU s", "median wall", "it/s",
        "speed-up (min..max)", "wins"))
    for _, r in ipairs(rows) do
        io_stdout:write(string_format("%-34s %12.4f %12.4f %10.1f %8.3fx (%.3f..%.3f) %6s\n", r.config,
            r.median_gpu_seconds, r.median_wall_seconds, r.iterations_per_second, r.speedup_median,
            r.speedup_min, r.speedup_max, r.wins and string_format("%d/%d", r.wins, pairs_n) or "-"))
    end
end

return _M
