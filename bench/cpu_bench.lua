-- The CPU method (divgpu.cpu) against the CPU mirror in alternating pairs
-- (docs/contract.md#measuring), wall clock and process CPU time, with the
-- bytes compared every run. G's build is counted in every CPU-method run.
--   luajit bench/cpu_bench.lua synth|poems PAIRS [RAW_FILE] [PEER]
-- PAIRS 0 runs the CPU method once; PEER "numpy" pairs it with
-- bench/cpu_numpy_peer.py instead of the mirror (the share of its sequences
-- identical to the CPU method's is logged).
-- synth: `divgpu synth` 4000 x 384 (16 clusters, seed 1), 512 evenly spaced
-- starts x 200 steps; poems: the shipped table, 128 evenly spaced starts in
-- full; poems_full: every start in full (make run's job).
package.cpath = "build/?.so;" .. package.cpath
local divgpu = require "divgpu"
local now = divgpu.clock.now

local mode, pairs_n, raw, peer = arg[1] or "synth", tonumber(arg[2] or "3"), arg[3], arg[4] or "mirror"
local PY = "/usr/bin/python3"
local e, count, length
if mode == "synth" then
    e, count, length = divgpu.synth{ n = 4000, dim = 384, clusters = 16, seed = 1 }, 512, 200
else
    e = assert(divgpu.load_embeddings("assets/embeddings/all-MiniLM-L6-v2/embeddings.json"))
    count, length = mode == "poems_full" and e.n or 128, e.n
end
local starts = {}
for i = 0, count - 1 do starts[#starts + 1] = math.floor(i * e.n / count) end

local out = raw and assert(io.open(raw, "a")) or io.stdout
local function log(line)
    out:write(line, "\n")
    out:flush()
    if raw then print(line) end
end

local reference, cpu_out

--- The share of the numpy peer's sequences identical to the CPU method's.
local function peer_identical(length)
    if not cpu_out then return "identical=?" end
    local same, total, i = 0, 0, 0
    for line in io.lines(("/tmp/cpubench/numpy_%s.txt"):format(mode)) do
        local ok, d = true, 0
        for x in line:gmatch("%d+") do
            if tonumber(x) ~= cpu_out[i * length + d + 1] then ok = false end
            d = d + 1
        end
        same, total, i = same + (ok and 1 or 0), total + 1, i + 1
    end
    return ("identical_to_cpu=%d/%d"):format(same, total)
end

local function timed(which)
    local t0, c0 = now(), os.clock()
    local w, info
    if which == "numpy" then
        local table_path = mode == "synth" and "/tmp/cpubench/synth4000.json" or "assets/embeddings/all-MiniLM-L6-v2/embeddings.json"
        local line = io.popen(("%s bench/cpu_numpy_peer.py %s %d %d /tmp/cpubench/numpy_%s.txt"):format(
            PY, table_path, count, length, mode)):read("*a")
        log(("%s numpy %s %s"):format(mode, (line:gsub("\n", "")), peer_identical(length)))
        local wall, cpu = line:match("wall=([%d.]+) cpu=([%d.]+)")
        return tonumber(wall), tonumber(cpu)
    elseif which == "mirror" then
        w = divgpu.mirror(e, starts, length)
    else
        divgpu.cpu.release()
        w, info = divgpu.cpu.run{ embeddings = e, starts = starts, length = length }
    end
    local wall, cpu = now() - t0, os.clock() - c0
    reference = reference or (which == "mirror" and w) or nil
    if which == "cpu" then cpu_out = w end
    local same = reference and divgpu.first_difference(w, reference, length) == nil
    log(("%s %s n=%d dim=%d starts=%d length=%d wall=%.3f cpu=%.3f identical=%s%s"):format(
        mode, which, e.n, e.dim, count, length, wall, cpu, tostring(same),
        info and (" plan=%s setup=%.3f singles=%d steps=%d rescored=%d"):format(
            info.plan, info.setup_seconds, info.singles, info.steps, info.rescored) or ""))
    return wall, cpu
end

log(("# %s, %s vs %s, commit %s, load %s"):format(os.date("!%Y-%m-%dT%H:%M:%SZ"), mode, peer,
    io.popen("git rev-parse --short HEAD"):read("*l"), io.popen("cat /proc/loadavg"):read("*l")))
if pairs_n == 0 or peer == "numpy" then timed("cpu") end  -- once alone, or as the warm-up
for p = 1, pairs_n do
    local order = p % 2 == 1 and { peer, "cpu" } or { "cpu", peer }
    local r = {}
    for _, which in ipairs(order) do r[which] = { timed(which) } end
    log(("%s pair %d: %s/cpu wall %.1fx, cpu-time %.1fx"):format(mode, p, peer, r[peer][1] / r.cpu[1], r[peer][2] / r.cpu[2]))
end
