-- The tensor filter's two products paths on one device (an H200 campaign
-- item): the plain shader and the cooperative-matrix kernel must compute the
-- same integers, so the same approximations â of every pair (the plain
-- instrumented build's and the kernel's export variant's, f64 bit for bit),
-- the same tile minima (the plain path with tiles of the tiling's width)
-- and the same winners; the twin (A_3 without p_2 q_1) must differ.
-- Then each tiling's products alone, timed (useful int8 multiply-adds: 3
-- slice products a pair, D each), and whole runs of the paths, their outputs
-- against each other.
--   luajit bench/tensor_paths.lua TABLE STARTS LENGTH [TILINGS] [PLAIN_RUNS]
-- TABLE: a file, or synth:N:D. TILINGS: "wr,wc,fr,fc[,k[,stages]] ..."
-- (default: the shipped one). PLAIN_RUNS: whole runs of the plain path
-- (default 1; 0 on tables where it takes minutes). In the environment:
-- ROUNDS=n, n rounds of the timings (default 3); PRODUCTS_ONLY="1 2 ..",
-- each tiling's tensor-core loop timed also at those levels of
-- DIVGPU_COOPMAT_PRODUCTS_ONLY (tensor_coopmat.comp: without the combine,
-- then without global loads, ...), bench variants whose results are garbage
-- and never checked, to show what binds; VARIANTS="K=V[,K=V] ...", the first
-- tiling again with each item's defines of tensor_coopmat.comp (upper-case
-- keys; DIVGPU_COOPMAT_PERTURB=1 is a twin the checks must flag) or job
-- options (fused_sums=0), each checked and timed as a tiling of its own.
-- On a device without int8 cooperative matrices (lavapipe: the smoke test,
-- tests/peers_bench_smoke.sh) the plain path alone: one line saying the
-- cooperative-matrix paths are not on this device, step 1 of the plain build
-- against its instrumented build, its products timed, its whole runs, and
-- its output against the CPU mirror; exits non-zero if either differs.
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"
local tensor = require "divgpu.methods.tensor"

local spec, range, length = arg[1], arg[2], tonumber(arg[3])
assert(spec and range and length, "usage: tensor_paths.lua TABLE A:B LENGTH [TILINGS] [PLAIN_RUNS]")
local plain_runs = tonumber(arg[5] or "1")
local tilings = {}
for w in (arg[4] or ""):gmatch("%S+") do
    local wr, wc, fr, fc, k, stages = w:match("^(%d+),(%d+),(%d+),(%d+),?(%d*),?(%d*)$")
    assert(wr, "a tiling is wr,wc,fr,fc[,k[,stages]]: " .. w)
    tilings[#tilings + 1] = { wr = tonumber(wr), wc = tonumber(wc), fr = tonumber(fr), fc = tonumber(fc),
                              k = tonumber(k) or tensor.COOPMAT_TILING.k,
                              stages = tonumber(stages) or tensor.COOPMAT_TILING.stages }
end
if #tilings == 0 then tilings[1] = tensor.COOPMAT_TILING end
for w in (os.getenv("VARIANTS") or ""):gmatch("%S+") do
    local t = { defines = {}, variant = w }
    for k, v in pairs(tilings[1]) do t[k] = v end
    for key, value in w:gmatch("([%w_]+)=(%w+)") do
        if key:match("^[%u%d_]+$") then t.defines[key] = tonumber(value) or value
        elseif key == "fused_sums" then t.fused_sums = value ~= "0"
        else error("a variant sets upper-case defines or fused_sums: " .. w) end
    end
    tilings[#tilings + 1] = t
end
local function name_of(t)
    return string.format("%d,%d,%d,%d,%d,%d%s", t.wr, t.wc, t.fr, t.fc, t.k, t.stages, t.variant and " " .. t.variant or "")
end
-- The job options of tiling t, with `extra` (more options) and `defines` (more defines) merged in.
local function coopmat_options(t, extra, defines)
    local o = { coopmat = true, coopmat_tiling = t, fused_sums = t.fused_sums, coopmat_defines = {} }
    for k, v in pairs(t.defines or {}) do o.coopmat_defines[k] = v end
    for k, v in pairs(defines or {}) do o.coopmat_defines[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
end
local levels = {}
for w in (os.getenv("PRODUCTS_ONLY") or ""):gmatch("%d+") do levels[#levels + 1] = tonumber(w) end
local LEVEL_NAMES = { " without the combine", " without the combine or global loads",
                      " from registers (fragments loaded once)", " without the combine, global loads or barriers" }

local e
do
    local n, d = spec:match("^synth:(%d+):(%d+)$")
    e = assert(n and divgpu.synth{ n = tonumber(n), dim = tonumber(d), clusters = 16, seed = 1 } or divgpu.load_embeddings(spec))
end
local a, b = range:match("^(%d+):(%d+)$")
a, b = tonumber(a), tonumber(b)
local starts = divgpu.array("u32", b - a)
for i = 1, b - a do starts[i] = a + i - 1 end
local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
local coopmat = tensor.has_coopmat(ctx)
if not coopmat then
    print(string.format('{"coopmat": "not on this device", "device": "%s", "why": "no int8 16 x 16 x 32 cooperative '
        .. 'matrices", "skipped": "the cooperative-matrix kernels, their checks against the plain path, the twin, '
        .. 'their products and runs"}', ctx.info.name))
    tilings, levels = {}, {}
end
local ring = 8
local step_macs = 3 * (b - a) * e.n * e.dim  -- three slice products a pair (tensor.md section 2)

-- Step 1 of a job; its batch (for its â, tile minima and winners).
local function step_one(job)
    local batch = assert(job:batch(starts, ring, 1))
    assert(batch:record(1, 1))
    assert(batch:submit())
    assert(batch:wait())
    return batch
end

-- The products alone, `repeats` times in one submission (of `variant`, a
-- bench kernel, where given): GPU seconds each.
local function products_seconds(batch, repeats, variant)
    local rec = assert(ctx:recorder())
    for _ = 1, repeats do assert(batch:record_products(rec, variant)) end
    assert(rec:submit())
    local gpu = assert(rec:wait())
    return gpu / repeats
end

local plain = assert(tensor.job(ctx, e, { coopmat = false }))
local bp = step_one(plain)

-- What a step-1 batch computed: every pair's â (where it stored them), the
-- tiles' minima and argmins, the winners.
local function outputs_of(batch, with_a)
    return { a = with_a and assert(batch.buffers.a_exact:read("f64")), minima = assert(batch.buffers.partials:read("f64")),
             argmins = assert(batch.buffers.partial_index:read("u32")), winners = batch:winners() }
end
local function differing(x, y)
    local n = 0
    for i = 1, #x do if x[i] ~= y[i] then n = n + 1 end end  -- f64: no NaN, no -0 (â of 0 is +0)
    return n
end
-- The plain instrumented build with tiles of `width` candidates, step 1, once a width.
local references = {}
local function reference(width)
    references[width] = references[width] or outputs_of(step_one(assert(tensor.job(ctx, e,
        { coopmat = false, workgroup_size = width, defines = { DIVGPU_TENSOR_CHECK = 1 } }))), true)
    return references[width]
end
local function against_plain(label, job, width)
    local bc = step_one(job)
    local p, c = reference(width), outputs_of(bc, job.export)
    local winners_differ = 0
    for i = 1, #starts do if p.winners[(i - 1) * ring + 2] ~= c.winners[(i - 1) * ring + 2] then winners_differ = winners_differ + 1 end end
    print(string.format('{"check": "step 1, plain against %s", "a_values": %s, "a_differ": %s, "minima_differ": %d, '
        .. '"argmins_differ": %d, "of_tiles": %d, "winners_differ": %d}', label, c.a and #p.a or "null",
        c.a and differing(p.a, c.a) or "null", differing(p.minima, c.minima), differing(p.argmins, c.argmins),
        #p.argmins, winners_differ))
    io.stdout:flush()
    return bc
end

-- The driver's figures for a kernel's pipeline ("name=value; ...": registers, spills where it says).
local function statistics(kernel)
    local parts = {}
    for _, st in ipairs(kernel.pipeline:statistics()) do parts[#parts + 1] = st.name .. "=" .. tostring(st.value) end
    return table.concat(parts, "; ")
end

local jobs, batches = {}, {}
for i, t in ipairs(tilings) do
    jobs[i] = assert(tensor.job(ctx, e, coopmat_options(t)))
    print(string.format('{"kernel": "coopmat %s", "statistics": "%s"}', name_of(t), statistics(jobs[i].coopmat)))
    local width = jobs[i].coopmat_tile.candidates
    batches[i] = against_plain("cooperative matrices " .. name_of(t), jobs[i], width)
    against_plain("cooperative matrices " .. name_of(t) .. ", every a",
        assert(tensor.job(ctx, e, coopmat_options(t, { coopmat_export = true }))), width)
end
-- The twin: the check above must see a wrong product.
if coopmat then against_plain("the twin (A_3 without p_2 q_1; must differ)", assert(tensor.job(ctx, e,
    { coopmat = true, coopmat_export = true, coopmat_defines = { DIVGPU_COOPMAT_PERTURB = 1 } })),
    tensor.COOPMAT_TILING.wc * tensor.COOPMAT_TILING.fc * 16) end
-- Without cooperative matrices: the plain build against its instrumented build (same tiles, same minima).
local plain_differ = 0
if not coopmat then
    local p, c = reference(plain.tile_width), outputs_of(bp, false)
    local winners_differ = 0
    for i = 1, #starts do if p.winners[(i - 1) * ring + 2] ~= c.winners[(i - 1) * ring + 2] then winners_differ = winners_differ + 1 end end
    plain_differ = differing(p.minima, c.minima) + differing(p.argmins, c.argmins) + winners_differ
    print(string.format('{"check": "step 1, plain against its instrumented build", "minima_differ": %d, '
        .. '"argmins_differ": %d, "of_tiles": %d, "winners_differ": %d}', differing(p.minima, c.minima),
        differing(p.argmins, c.argmins), #p.argmins, winners_differ))
end

-- The bench variants (levels): their kernels dispatched on the tiling's own
-- batch (the same buffers), so the same slices are multiplied. Each must be
-- what ran: its tile argmins (garbage) differ from the real kernel's.
local bare = {}
for i, t in ipairs(tilings) do
    bare[i] = {}
    local real = assert(batches[i].buffers.partial_index:read("u32"))
    for _, level in ipairs(levels) do
        bare[i][level] = assert(tensor.job(ctx, e,
            coopmat_options(t, nil, { DIVGPU_COOPMAT_PRODUCTS_ONLY = level }))).coopmat
        products_seconds(batches[i], 1, bare[i][level])
        local got = assert(batches[i].buffers.partial_index:read("u32"))
        local differ = 0
        for k = 1, #real do if got[k] ~= real[k] then differ = differ + 1 end end
        print(string.format('{"check": "level %d of %s ran (its tile argmins against the real kernel\'s)", '
            .. '"argmins": %d, "differ": %d}', level, name_of(t), #real, differ))
        assert(differ > 0, "the bench variant's dispatch ran the real kernel")
    end
    products_seconds(batches[i], 1)  -- the real kernel's minima back
end
local function products_of(i, level)
    return products_seconds(batches[i], 20, level and bare[i][level] or nil)
end

-- The products alone, each tiling in turn, ROUNDS rounds (default 3; and the
-- plain path once), after a second or so of the first tiling's products
-- whose times are dropped (in call 6 the clocks were still rising through
-- the first two rounds: bench/results/2026-12-04_h200_c96e052).
local plain_products = products_seconds(bp, 1)
print(string.format('{"products": "plain", "gpu_seconds": %.6f, "useful_int8_tops": %.2f}', plain_products,
    2 * step_macs / plain_products / 1e12))
if coopmat then products_seconds(batches[1], 2500) end
for round = 1, tonumber(os.getenv("ROUNDS") or "3") do
    for i, t in ipairs(tilings) do
        for v = 0, #levels do
            local level = levels[v]
            local s = products_of(i, level)
            print(string.format('{"products": "coopmat %s%s", "round": %d, "gpu_seconds": %.6f, "useful_int8_tops": %.2f}',
                name_of(t), level and LEVEL_NAMES[level] or "", round, s, 2 * step_macs / s / 1e12))
            io.stdout:flush()
        end
    end
end

-- Whole runs: the plain path (PLAIN_RUNS times) and the first tiling, then both outputs.
local results = {}
local runs = {}
for _ = 1, plain_runs do runs[#runs + 1] = { "plain", plain } end
if coopmat then
    runs[#runs + 1] = { "coopmat " .. name_of(tilings[1]), jobs[1] }
    runs[#runs + 1] = { "coopmat " .. name_of(tilings[1]), jobs[1] }
end
for _, path in ipairs(runs) do
    local out, stats = assert(driver.run{ ctx = ctx, job = path[2], embeddings = e, starts = starts, length = length })
    local macs = step_macs * (length - 1)
    print(string.format('{"path": "%s", "gpu_seconds": %.4f, "wall_seconds": %.4f, "useful_int8_macs": %.4g, '
        .. '"mean_window": %.3f, "windows_of_one": %.4f, "fallbacks": %d}', path[1], stats.gpu_seconds,
        stats.wall_seconds, macs, stats.tensor.window_total / stats.tensor.steps,
        stats.tensor.window_ones / stats.tensor.steps, stats.tensor.fallbacks or -1))
    io.stdout:flush()
    results[#results + 1] = out
end
for i = 2, #results do
    local d = divgpu.first_difference(results[1], results[i], length)
    print(string.format('{"outputs": "run 1 against run %d: %s"}', i,
        d and ("differ at row " .. d.row .. " step " .. d.step) or "identical"))
end
if not coopmat then  -- the plain path's output against the CPU mirror
    local d = results[1] and divgpu.first_difference(results[1], divgpu.mirror(e, starts, length), length)
    print(string.format('{"outputs": "plain against the CPU mirror: %s"}', not results[1] and "no run (PLAIN_RUNS 0)"
        or d and ("differ at row " .. d.row .. " step " .. d.step) or "identical"))
    os.exit((plain_differ == 0 and not d) and 0 or 1)
end
