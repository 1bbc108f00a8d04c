-- Pictures of a run: the per-chunk figures of driver.run's on_chunk (the gram
-- filter's exactly, from counter snapshots), `run --stats` files, and the
-- PNG charts of `divgpu plot` and `bench --plot` checked by their pixels.
-- Each check has a twin that must fail it.
local divgpu = require "divgpu"
local testing = require "divgpu.testing"
local driver = require "divgpu.driver"
local stats = require "divgpu.stats"
local charts = require "divgpu.charts"
local json = require "dkjson"
local h = require "tests.helpers"

-- Smallest pixel count that makes a colour a drawn line (a 2 px line across
-- a panel of a few hundred pixels has well over a thousand).
local LINE_PIXELS = 300

--- Runs bin/divgpu with arguments; returns exit status, stderr.
local function divgpu_cli(args, dir)
    local cmd = "bin/divgpu " .. args .. " >/dev/null 2>" .. dir .. "/stderr"
    local ok, _, code = os.execute(cmd)
    local f = io.open(dir .. "/stderr")
    local err = f:read("*a")
    f:close()
    local rc = type(ok) == "number" and ok / 256 or (ok and 0 or code)
    return rc, err
end

local function read_lines(path)
    local lines = {}
    for line in io.lines(path) do lines[#lines + 1] = line end
    return lines
end

local function write_lines(path, lines)
    local f = assert(io.open(path, "w"))
    f:write(table.concat(lines, "\n"), "\n")
    f:close()
end

--- The stats check, on the raw lines (independent of divgpu.stats.read):
--- a header first, every chunk of each (device, batch) following the one
--- before it, each batch's steps adding up to length - 1, the expected
--- number of batches, and for gram each chunk's histogram summing to its
--- sequence-steps. Returns nil, or what is wrong.
local function stats_problem(path, want)
    local lines = read_lines(path)
    local header = json.decode(lines[1])
    if type(header) ~= "table" or header.record ~= "header" or header.format ~= "divgpu-run-stats" then
        return "no header record"
    end
    if header.length ~= want.length or header.sequences ~= want.sequences or header.method ~= want.method then
        return string.format("header says %s sequences x %s, method %s", tostring(header.sequences),
            tostring(header.length), tostring(header.method))
    end
    local steps, next_step, batches, chunks, rows = {}, {}, 0, 0, {}
    local last
    for i = 2, #lines do
        local r = json.decode(lines[i])
        if r.record == "chunk" then
            chunks = chunks + 1
            local key = r.device .. ":" .. r.batch
            if not steps[key] then batches, steps[key], rows[key] = batches + 1, 0, r.sequences end
            if r.first_step ~= (next_step[key] or 1) then
                return string.format("line %d: batch %s starts at step %d after step %d", i, key, r.first_step,
                    (next_step[key] or 1) - 1)
            end
            next_step[key] = r.first_step + r.steps
            steps[key] = steps[key] + r.steps
            if math.abs(r.steps_per_second - r.steps * r.sequences / r.gpu_seconds) > 1e-6 * r.steps_per_second then
                return string.format("line %d: steps_per_second is not steps x sequences / gpu_seconds", i)
            end
            if want.method == "gram" then
                local sum = 0
                for _, c in ipairs(r.gram.window_histogram) do sum = sum + c end
                if sum ~= r.steps * r.sequences or r.gram.sequence_steps ~= sum then
                    return string.format("line %d: the window histogram counts %d of %d sequence-steps", i, sum,
                        r.steps * r.sequences)
                end
            end
        end
        last = r
    end
    local total_rows = 0
    for key, n in pairs(steps) do
        if n ~= want.length - 1 then return string.format("batch %s has %d steps, not %d", key, n, want.length - 1) end
        total_rows = total_rows + rows[key]
    end
    if batches ~= want.batches then return string.format("%d batches, not %d", batches, want.batches) end
    if total_rows ~= want.sequences then return string.format("the batches hold %d sequences, not %d", total_rows, want.sequences) end
    if last.record ~= "end" or last.chunks ~= chunks then return "no end record counting the chunks" end
end

--- Width and height from the PNG's IHDR chunk (read here, not by divgpu).
local function png_size(path)
    local f = assert(io.open(path, "rb"))
    local head = f:read(24)
    f:close()
    assert(head and #head == 24 and head:sub(1, 8) == "\137PNG\r\n\26\n" and head:sub(13, 16) == "IHDR", path .. " is not a PNG")
    local function be32(i) local a, b, c, d = head:byte(i, i + 3) return ((a * 256 + b) * 256 + c) * 256 + d end
    return be32(17), be32(21)
end

--- How many palette colours are drawn as lines in every one of `rects`.
local function lines_drawn(path, rects)
    local drawn
    for _, rect in ipairs(rects) do
        local s = testing.png_stats(path, { rect = rect, colors = divgpu.plot.palette })
        local n = 0
        for _, count in ipairs(s.counts) do if count >= LINE_PIXELS then n = n + 1 end end
        drawn = math.min(drawn or n, n)
    end
    return drawn
end

--- Non-blank: the plotting area holds background, grid, axes and lines.
local function non_blank(path, rect)
    return testing.png_stats(path, { rect = rect }).distinct >= 4
end

describe("pictures of a run", function()
    local dir, e_path
    local runs = {}  -- method -> { path, want }

    setup(function()
        dir = h.tmpdir()
        e_path = dir .. "/e.json"
        divgpu.synth{ n = 300, dim = 32, clusters = 6, seed = 7, noise = 1e-4 }:write_json(e_path)
        -- 24 sequences in 3 batches of 8, 120 steps, small chunks: many chunk records.
        for _, method in ipairs{ "gram", "direct" } do
            local path = dir .. "/" .. method .. ".jsonl"
            local rc, err = divgpu_cli(string.format("run --embeddings %s --out %s/%s.json --starts 0:24 --length 120 "
                .. "--batch 8 --target-ms 5 --method %s --stats %s --quiet", e_path, dir, method, method, path), dir)
            assert(rc == 0 and not err:find("validation"), "run --stats failed: " .. err)
            runs[method] = { path = path, want = { length = 120, sequences = 24, batches = 3, method = method } }
        end
    end)

    teardown(function() os.execute("rm -rf " .. dir) end)

    it("gram: the chunks' window figures add up exactly to the batch totals (counter snapshots)", function()
        local e = divgpu.synth{ n = 300, dim = 64, clusters = 8, seed = 3, noise = 1e-5 }  -- windows of dozens
        local chunks = {}
        local _, s = driver.run{ ctx = h.ctx(), embeddings = e, starts = h.range(0, 40), length = 300, method = "gram",
                                 batch = 16, target_seconds = 0.005, in_flight = 2,
                                 on_chunk = function(c) chunks[#chunks + 1] = c end }
        assert.is_true(#chunks > 10)
        local sum = { window_total = 0, window_ones = 0, fallbacks = 0, steps = 0 }
        local hist = {}
        for k = 1, #s.gram.window_histogram do hist[k] = 0 end
        local max_seen = 0
        for _, c in ipairs(chunks) do
            local g = c.gram
            assert.are.equal(c.steps * c.sequences, g.sequence_steps)
            sum.window_total = sum.window_total + g.window_total
            sum.window_ones = sum.window_ones + g.window_ones
            sum.fallbacks = sum.fallbacks + g.fallbacks
            sum.steps = sum.steps + g.sequence_steps
            for k, n in ipairs(g.window_histogram) do hist[k] = hist[k] + n end
            max_seen = math.max(max_seen, g.window_max_batch)
        end
        assert.are.same({ s.gram.window_total, s.gram.window_ones, s.gram.fallbacks, s.gram.steps },
            { sum.window_total, sum.window_ones, sum.fallbacks, sum.steps })
        assert.are.same(s.gram.window_histogram, hist)
        assert.are.equal(s.gram.window_max, max_seen)
        assert.is_true(s.gram.window_max > 16, "the table should give windows of dozens")
        h.assert_no_validation_messages()
    end)

    it("rec:copy copies a device buffer into a host buffer; a range past either end or a host source is refused", function()
        local ctx = h.ctx()
        local src = ctx:upload(divgpu.array("u32", { 5, 6, 7, 8 }), "copy source")
        local dst = ctx:buffer(16, "copy snapshot", "host")
        local rec = ctx:recorder()
        rec:copy(src, dst, 4, 0, 12)
        rec:submit()
        rec:wait()
        assert.are.same({ 6, 7, 8 }, dst:read("u32", 3):to_table())
        local ok, err = pcall(rec.copy, rec, src, dst, 8, 0, 12)
        assert.is_false(ok)
        assert.matches("copy of 12 bytes at offset 8 does not fit buffer 'copy source' of 16 bytes", tostring(err))
        ok, err = pcall(rec.copy, rec, dst, src)
        assert.is_false(ok)
        assert.matches("a host%-visible buffer cannot be a copy source", tostring(err))
        h.assert_no_validation_messages()
    end)

    it("gram: a chunk left unread makes the next chunk_stats raise (twin of the exact sums)", function()
        local e = divgpu.synth{ n = 200, dim = 16, clusters = 4, seed = 1 }
        local gram = require "divgpu.methods.gram"
        local job = gram.job(h.ctx(), e, {})
        local batch = job:batch(h.range(0, 4), 8, 2)
        batch:record(1, 2, batch.recorders[1])
        batch:submit(batch.recorders[1])
        batch:record(3, 2, batch.recorders[2])
        batch:submit(batch.recorders[2])
        batch:wait(batch.recorders[1])
        batch:wait(batch.recorders[2])
        local skipped, why = pcall(batch.chunk_stats, batch, batch.recorders[2])
        assert.is_false(skipped)
        assert.matches("chunks must be read in order: this chunk starts at step 3", tostring(why))
        assert.are.equal(8, batch:chunk_stats(batch.recorders[1]).sequence_steps)
        assert.are.equal(8, batch:chunk_stats(batch.recorders[2]).sequence_steps)
        h.assert_no_validation_messages()
    end)

    it("run --stats: a header, and every batch's chunks add up to length - 1 steps", function()
        for _, method in ipairs{ "gram", "direct" } do
            local r = runs[method]
            assert.is_nil(stats_problem(r.path, r.want))
            local run = assert(stats.read(r.path))
            assert.are.equal(h.ctx().info.name, run.header.devices[1])
            assert.are.equal(e_path, run.header.table)
            assert.are.equal(3, #run.batches[1])
            assert.are.same({ 119, 119, 119 }, run.batches[1])
            assert.is_nil(run["end"].stopped)
        end
    end)

    it("twin: a stats file with a chunk missing fails the check and the reader", function()
        local lines = read_lines(runs.gram.path)
        table.remove(lines, 4)  -- a chunk in the middle of batch 1
        local cut = dir .. "/cut.jsonl"
        write_lines(cut, lines)
        assert.is_not_nil(stats_problem(cut, runs.gram.want))
        local run, err = stats.read(cut)
        assert.is_nil(run)
        assert.matches("^" .. cut:gsub("%p", "%%%0") .. ":4: device 1 batch 1: this chunk starts at step", err)
    end)

    it("plot: two stats files give a PNG of the asked size, not blank, with two lines per panel", function()
        local list = { assert(stats.read(runs.gram.path)), assert(stats.read(runs.direct.path)) }
        local out = dir .. "/run.png"
        local rects = charts.runs(list, { out = out, width = 900, height = 760 })
        assert.are.equal(3, #rects)  -- rate, cost, and the gram window panel
        local w, hgt = png_size(out)
        assert.are.same({ 900, 760 }, { w, hgt })
        assert.is_true(non_blank(out, rects[1]))
        assert.are.equal(2, lines_drawn(out, { rects[1], rects[2] }))
        assert.are.equal(1, lines_drawn(out, { rects[3] }))  -- only the gram run has windows
    end)

    it("twins: one stats file draws one line; a blank PNG fails the non-blank check", function()
        local out = dir .. "/one.png"
        local rects = charts.runs({ assert(stats.read(runs.direct.path)) }, { out = out, width = 800, height = 600 })
        assert.are.equal(2, #rects)
        assert.are.equal(1, lines_drawn(out, rects))
        local blank = dir .. "/blank.png"
        assert(os.execute(string.format([[python3 -c 'import struct, zlib, sys
w, h = 800, 600
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
raw = b"".join(b"\0" + b"\xff" * (3 * w) for _ in range(h))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))' %s]], blank)) == 0)
        assert.are.same({ 800, 600 }, { png_size(blank) })
        assert.is_false(non_blank(blank, rects[1]))
        assert.are.equal(0, lines_drawn(blank, rects))
    end)

    it("bench --plot's chart: each configuration's times, and the speed-ups of all but the first", function()
        local out = dir .. "/pairs.png"
        local configs = {
            { name = "a", gpu = { 1.0, 1.1, 0.9 }, wall = { 1.2, 1.3, 1.1 }, ratio = {}, timed_by = "gpu" },
            { name = "b", gpu = { 0.5, 0.6, 0.4 }, wall = { 0.7, 0.8, 0.6 }, ratio = { 2.0, 1.8, 2.2 }, timed_by = "gpu" },
            { name = "c", gpu = { 0.8, 0.7, 0.9 }, wall = { 1.0, 0.9, 1.1 }, ratio = { 1.5, 1.9, 1.0 }, timed_by = "wall" },
        }
        local meta = { device = "d", items = 10, dim = 2, sequences = 4, steps = 5 }
        local rects = charts.pairs(configs, meta, { out = out, width = 800, height = 600 })
        assert.are.equal(3, lines_drawn(out, { rects[1] }))
        assert.are.equal(2, lines_drawn(out, { rects[2] }))
    end)
end)
