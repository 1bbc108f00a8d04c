-- The command line's smaller commands: verify, merge, synth, info,
-- convert-fp16 and plot (run and bench have modules of their own). Each
-- takes the parsed options, already checked (cli/options.lua).

local divgpu = require "divgpu"
local device = require "divgpu.device"
local failure = require "divgpu.failure"
local options = require "divgpu.cli.options"
local report = require "divgpu.cli.report"

local need, fail = failure.need, options.fail
local write_stdout = report.write_stdout
local string_format, min = string.format, math.min
local ipairs, tostring, tonumber, require = ipairs, tostring, tonumber, require

local _M = {}

--- `divgpu verify`: the cache's sequences recomputed by the CPU mirror, 64
--- at a time; the first difference is named.
function _M.verify(a)
    local cache = need(divgpu.files.read_cache(a.cache))
    local e = need(divgpu.load_embeddings(a.embeddings))
    if cache.embeddings_sha256 ~= e.sha256 or cache.num_items ~= e.n or cache.dim ~= e.dim then
        fail("%s was made from another table (sha256 %s, %dx%d) than %s (sha256 %s, %dx%d)",
            a.cache, cache.embeddings_sha256, cache.num_items, cache.dim, a.embeddings, e.sha256, e.n, e.dim)
    end
    if cache.contract == "fp16" then
        e = need(e:fp16_rounded())
    elseif cache.contract ~= "fp32" then
        fail("%s: unknown contract '%s'", a.cache, tostring(cache.contract))
    end
    local count = cache.count
    if count == 0 then fail("%s has no sequences: there is nothing to verify", a.cache) end
    if a.sequences then count = min(count, options.positive_integer(a.sequences, "--sequences")) end
    local L = cache.length
    local show, finish = report.progress(a.quiet)
    local t0 = divgpu.clock.now()
    local step = 64
    for first = 0, count - 1, step do
        local k = min(step, count - first)
        local starts = cache.starts:slice(first + 1, k)
        local expected = need(divgpu.mirror(e, starts, L))
        local d = divgpu.first_difference(cache.sequences:slice(first * L + 1, k * L), expected, L)
        if d then
            finish()
            fail("%s: sequence %d (start %d) differs at step %d: the cache has %d, the CPU mirror gives %d",
                a.cache, first + d.row, starts[d.row + 1], d.step, d.a, d.b)
        end
        show{ batch = 1, batches = 1, step = first + k, length = count, done = first + k, total = count,
              elapsed = divgpu.clock.now() - t0 }
    end
    finish()
    write_stdout(string_format("%s: %d of %d sequences (length %d, contract %s) match the CPU mirror\n",
        a.cache, count, cache.count, L, cache.contract))
end

--- `divgpu synth`: a clustered table, written as .npy or .json by its name
--- ("-" streams JSON).
function _M.synth(a)
    local e = need(divgpu.synth{ n = tonumber(a.n), dim = tonumber(a.dim), clusters = tonumber(a.clusters),
                                 seed = tonumber(a.seed) })
    need(e:write(a.out))
    if a.out ~= "-" then write_stdout(a.out, "\n") end
end

--- `divgpu merge`: the parts of a sharded run checked and merged (contract::shard).
function _M.merge(a)
    local m = need(divgpu.files.merge(a.out, a.parts))
    if not a.quiet then report.note("merged %d parts: %d sequences of length %d", m.parts, m.sequences, m.length) end
    if a.out ~= "-" then write_stdout(a.out, "\n") end
end

--- `divgpu convert-fp16`: embeddings_fp16.bin and its meta file beside the table.
function _M.convert_fp16(a)
    local bin, meta = need(divgpu.convert_fp16(a.embeddings))
    write_stdout(bin, "\n", meta, "\n")
end

local function measure_l2(a)
    local ctx = need(device.open{ device = options.device_option(a.device) })
    local opts = a.max_mib and { max_bytes = options.positive_integer(a.max_mib, "--max-mib") * 1048576 } or nil
    local knee, points = need(require("divgpu.l2_probe").measure(ctx, opts))
    local lines = { string_format("%s: read bandwidth by working-set size\n", ctx.info.name) }
    for _, p in ipairs(points) do
        lines[#lines + 1] = string_format("  %10.2f MiB  %9.1f GB/s\n", p.bytes / 1048576, p.gbps)
    end
    lines[#lines + 1] = string_format("measured L2 size (bandwidth knee): %d bytes (%.1f MiB)\n", knee, knee / 1048576)
    write_stdout(table.concat(lines))
end

--- `divgpu info`: every device and its features, or --measure-l2's sweep.
function _M.info(a)
    if a.measure_l2 then return measure_l2(a) end
    local devices = need(divgpu.devices{})
    if #devices == 0 then fail("no Vulkan devices found") end
    for _, d in ipairs(devices) do write_stdout(table.concat(report.device_lines(d), "\n"), "\n") end
end

--- `divgpu plot STATS... --out PNG`: each file read and checked (one line
--- naming the file and line on error), then one chart.
function _M.plot(a)
    local stats = require "divgpu.stats"
    local runs = {}
    for i, path in ipairs(a.stats) do
        local run = need(stats.read(path))
        if #run.chunks == 0 then fail("%s: no chunk records to draw", path) end
        runs[i] = run
    end
    need(require("divgpu.charts").runs(runs, { out = a.out, x = a.x, scale = a.scale, title = a.title,
                                               width = tonumber(a.width), height = a.height and tonumber(a.height) }))
    write_stdout(a.out, "\n")
end

return _M
