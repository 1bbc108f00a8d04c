-- One divgpu job run again and again in one process, for whole-run A/B pairs
-- against a peer (bench/whole_run_pairs.py drives it):
--
--   luajit bench/serve_run.lua EMBEDDINGS STARTS LENGTH METHOD OUT_PREFIX [SHAPE]
--   (DIVGPU_WORKGROUP=T: threads per sequence, as run --workgroup-size; SHAPE:
--   the direct method's, "auto" for the cost model's, default the reference)
--
-- Loads the table and opens the device once, prints "ready", then for every
-- line "run" on stdin runs the whole job (driver.run: job creation, G's build
-- for gram, every batch, the read-back) and prints one JSON line
-- {"seconds": wall, "gpu_seconds": ..., "out": cache path}. Each run's cache is
-- written to OUT_PREFIX.K.json after the timed part, so the driver can check
-- every run gave the same bytes. Loading and the device's start-up are not
-- timed, as the PyTorch peer's `--serve` mode does not time its own.

local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"

local path, starts_spec, length, method, prefix, shape = arg[1], arg[2], tonumber(arg[3]), arg[4], arg[5], arg[6]
if not (path and starts_spec and length and method and prefix) then
    io.stderr:write("usage: luajit bench/serve_run.lua EMBEDDINGS A:B LENGTH METHOD OUT_PREFIX\n")
    os.exit(2)
end
local a, b = starts_spec:match("^(%d+):(%d+)$")
a, b = tonumber(a), tonumber(b)
if not a then io.stderr:write("serve_run: STARTS must be A:B\n"); os.exit(2) end

local e = assert(divgpu.load_embeddings(path))
local starts = divgpu.array("u32", b - a)
for i = 1, b - a do starts[i] = a + i - 1 end
local ctx = assert(vk.open{})
io.stdout:write("ready\n"); io.stdout:flush()

local k = 0
for line in io.lines() do
    if line ~= "run" then io.stderr:write("serve_run: unknown command '", line, "'\n"); os.exit(2) end
    k = k + 1
    local result, stats = assert(driver.run{ ctx = ctx, embeddings = e, starts = starts, length = length,
                                      method = method, shape = shape,
                                      workgroup_size = tonumber(os.getenv("DIVGPU_WORKGROUP")) })
    local out = string.format("%s.%d.json", prefix, k)
    assert(divgpu.files.write_cache(out, { contract = "fp32", table = e, length = length, sequences = result }))
    io.stdout:write(string.format('{"seconds": %.6f, "gpu_seconds": %.6f, "method": "%s", "shape": "%s", "out": "%s"}\n',
        stats.wall_seconds, stats.gpu_seconds, stats.method, tostring(stats.shape), out))
    io.stdout:flush()
end
