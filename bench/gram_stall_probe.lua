-- Where a gram job stops making progress: runs one job on the synthetic table
-- of gram_parity.lua's third check (1,000 x 384, 16 clusters, seed 7), a line
-- per finished chunk (its steps and the seconds since the start), then the
-- comparison with the CPU mirror. On the H200 that check did not end within
-- 240 s (2026-12-02, f116a95) while it ends in seconds on lavapipe; the
-- campaign runs this under `timeout`, so the last line says how far it got.
--   luajit bench/gram_stall_probe.lua [key=value ...]
--   n=1000 dim=384 starts=64 length=N: the table and the job (defaults shown);
--   wg, capacity, reg, in_flight: as driver.run's options (default: the method's own;
--   the campaign's `stall` mode passes wg=512, where it stalled)
--   floor=1: the floor variant (timing only: its output need not equal the mirror's)
--   uniform=1: DIVGPU_GRAM_UNIFORM, the same barriers in every step (gram.comp)
--   warp=1: DIVGPU_GRAM_WARP_UNIFORM, the branches around the window's barriers on subgroup-uniform values
--   runtime=1: the shipped source compiled here with an unused define (against the embedded SPIR-V)
--   seed=S clusters=C: the synthetic table's (default 7 and 16); check=0: no comparison with the mirror
--   (a checksum of the output instead, to compare variants)
--   after=1: first run gram_parity.lua's first two checks' jobs in the same context, as the check does
io.stdout:setvbuf("line")
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"

local o = {}
for k = 1, #arg do
    local key, value = arg[k]:match("^([%w_]+)=(%d+)$")
    if not key then error("gram_stall_probe.lua: arguments are key=number, got '" .. arg[k] .. "'", 0) end
    o[key] = tonumber(value)
end
local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
if o.after == 1 then
    local poems = assert(divgpu.load_embeddings("assets/embeddings/all-MiniLM-L6-v2/embeddings.json"))
    local every = {}
    for s = 0, poems.n - 1 do every[#every + 1] = s end
    local t = divgpu.clock.now()
    assert(driver.run{ ctx = ctx, embeddings = poems, starts = divgpu.array("u32", every), length = 100, method = "gram" })
    assert(driver.run{ ctx = ctx, embeddings = poems, starts = divgpu.array("u32", { 0, 7, poems.n - 1 }), length = poems.n,
                       method = "gram" })
    print(string.format("the first two checks' jobs ran in %.3f s", divgpu.clock.now() - t))
end
local n = o.n or 1000
local e = assert(divgpu.synth{ n = n, dim = o.dim or 384, clusters = o.clusters or 16, seed = o.seed or 7 })
local list = {}
for s = 0, (o.starts or 64) - 1 do list[#list + 1] = s end
local starts, length = divgpu.array("u32", list), o.length or n
local t0 = divgpu.clock.now()
print(string.format("device %s; %d x %d, %d starts, length %d, %s", ctx.info.name, n, e.dim, #list, length,
    table.concat(arg, " ")))
local out, stats = assert(driver.run{
    ctx = ctx, embeddings = e, starts = starts, length = length, method = "gram",
    workgroup_size = o.wg, window_capacity = o.capacity, reg_slots = o.reg, in_flight = o.in_flight,
    gram_defines = (o.floor == 1 and { DIVGPU_GRAM_FLOOR = 1 }) or (o.uniform == 1 and { DIVGPU_GRAM_UNIFORM = 1 })
        or (o.warp == 1 and { DIVGPU_GRAM_WARP_UNIFORM = 1 }) or (o.runtime == 1 and { DIVGPU_GRAM_UNUSED = 1 }) or nil,
    on_chunk = function(c)
        print(string.format("chunk: steps %d..%d, %.6f s GPU, %.3f s since the start", c.first_step,
            c.first_step + c.steps - 1, c.gpu_seconds or -1, divgpu.clock.now() - t0))
    end,
})
print(string.format("ran in %.3f s, %.4f s GPU", divgpu.clock.now() - t0, stats.gpu_seconds or -1))
local g = stats.gram
print(string.format("mean window %.3f, %d fallbacks, largest %d", g.window_total / g.steps, g.fallbacks, g.window_max))
if o.check == 0 then
    local sum = 0
    for i = 1, #out do sum = (sum * 31 + out[i]) % 4294967291 end
    print(string.format("checksum %d of %d values", sum, #out))
else
    local d = divgpu.first_difference(out, divgpu.mirror(e, starts, length), length)
    print(d and string.format("DIFFERS from the mirror: row %d step %d", d.row, d.step) or "identical to the mirror")
end
