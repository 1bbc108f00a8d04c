-- cost: what `--method auto` weighs. An estimate of each method's seconds for
-- a job (N items of D dimensions, S sequences of length L) on a device whose
-- rates are known (the device profile's: divgpu.device_profile.rates, from
-- divgpu.rates: measured once per device and driver, or a table), and the choice of the cheapest that fits the device's memory.
-- Pure functions: the tests run them on simulated devices and budgets.
--
--   local cost = require "divgpu.cost"
--   local job = { n = N, dim = D, sequences = S, length = L }
--   local choice = cost.choose(job, device, require("divgpu.methods").modules())
--   choice.method (a method's name), choice.shape (direct's), choice.why, choice.estimates
--
-- The formulas are here, one a method; which method is weighed, and how,
-- is the method's (its estimate(job, device), divgpu.methods): this module
-- names no method's module and requires none.
--
-- device: { shapes = the direct shapes to weigh (default gemm and baseline),
--           rates = { f32_chain = FMA/s of the contract's chain, f64_fma = FMA/s,
--           copy = bytes/s, dispatch = seconds a dispatch costs, int8_mac = int8
--           multiply-adds/s (where known) }, gemm_rows = the sequences one tile
--           of the GEMM shape computes at once (default 1), memory = bytes the job may use,
--           fits = { method = true where it can run here }, why_not =
--           { method = why not }, name = "..." }

local max, min, huge = math.max, math.min, math.huge
local ipairs, sort, concat, string_format = ipairs, table.sort, table.concat, string.format

local _M = {}

-- What each method achieves of its device's rates, measured on the H200
-- (bench/RESULTS.md, 2026-12-01 and -02): G's build 14.6-18.0 of 33.4 f64
-- TFLOP/s of GPU time (131,072 and 65,536 items), 11.8 on the wall at 131,072;
-- the GEMM direct shape 49% of the chain rate (4.12e13 chain fmas in 2.61 s
-- of GPU time at 1,048,576 x 384, 1,024 sequences, by rows, 2026-12-03; 26%
-- before gemm.comp's vector loads and two stages), the baseline shape about
-- 5% (every workgroup streams the table alone); the
-- Gram step about 40 bytes of memory traffic a candidate-sequence-step
-- (2.38 s for 3,584 x 8,358 x 8,359 at 4.2 TB/s: latency, not bandwidth,
-- binds it, so it is charged as traffic at the measured rate).
-- The tensor filter's products (shaders/tensor_coopmat.comp, 128 x 128 tiles
-- staged in shared memory, two slices: three products a pair, the f64
-- combine included) 394 useful TOPS of the 1,279 measured from registers on
-- the H200 (2026-12-04, seed table, bench/results/2026-12-04_h200_75d38f4): 0.308.
_M.EFFICIENCY = { gram_build = 0.35, gemm = 0.49, baseline = 0.05, tensor = 0.308 }
-- Table values a second the host cuts into slices (src/contract/tensor.rs, on
-- every core), with the chain's certificate: 262,144 x 768 in 0.15 s and
-- 1,048,576 x 384 in 0.27 s on the H200's host of 16 cores (2026-12-03).
_M.HOST_SLICE_RATE = 1.3e9
_M.GRAM_BYTES_PER_CANDIDATE_STEP = 40
-- A CPU device (lavapipe: rates.type "cpu") achieves other fractions of its
-- rates: no shared memory faster than its caches, barriers that cost whole
-- loops, the contract's fma emulated. Measured on the 2-core development
-- machine (Xeon, lavapipe 15, 2026-12-05, the poems, load about 1) against
-- the rates rates.comp measured there (measurement 2: chain 2.67e9 fmas/s,
-- f64 3.34e10, copy 5.70e9 bytes/s): G's build 1.6-2.2 s for N = 2,103
-- (0.0134 of the f64 rate at 1.9 s; 2.42-2.84 s under a load of 3 earlier
-- that day); the gemm shape 2.55-3.25 s of GPU time for 8 x 39
-- sequence-steps in tiles of 16 sequences (0.061 of the chain rate for the
-- 16 rows paid, at 3.11 s), baseline 1.37-1.54 s (0.061 at 1.54 s). The
-- build's and the direct shapes' figures are set about 1.3x slower than the
-- idle runs, between the idle and the loaded machine, so either stays inside
-- 2x. The Gram step: 1.7 s for 32 x 399 and 2.16 s for 256 x 199
-- sequence-steps, 361 and 115 bytes a candidate-step at the measured copy
-- rate (the step's fixed work, barriers and the window's emulated chain,
-- dominates there, more so for few sequences); 175 bytes puts the whole
-- jobs' estimates at 0.81x and 1.5x of those runs (3.16 s for 3.90, 5.62 s
-- for 3.76). tests/estimates_test.sh checks the estimates within 2x of the
-- runs, with rates measured afresh.
_M.CPU_DEVICE = { efficiency = { gram_build = 0.011, gemm = 0.05, baseline = 0.047, tensor = 0.308 },
                  gram_bytes_per_candidate_step = 175 }

--- The efficiencies and the Gram step's bytes for a device's rates.
local function achieved(rates)
    if rates.device_type == "cpu" then
        return _M.CPU_DEVICE.efficiency, _M.CPU_DEVICE.gram_bytes_per_candidate_step
    end
    return _M.EFFICIENCY, _M.GRAM_BYTES_PER_CANDIDATE_STEP
end

--- Seconds of the Gram method's set-up: G's build (one triangle of N^2 D
--- fmas, f64) and writing G (N^2 f32).
function _M.gram_build_seconds(job, rates)
    local n, dim = job.n, job.dim
    return n * (n + 1) / 2 * dim / (rates.f64_fma * achieved(rates).gram_build) + n * n * 4 / rates.copy
end

--- Seconds of the Gram method: G's build and write, and the steps.
function _M.gram_seconds(job, rates)
    local _, step_bytes = achieved(rates)
    local steps = job.sequences * (job.length - 1) * job.n * step_bytes / rates.copy
    return _M.gram_build_seconds(job, rates) + steps + (job.length - 1) * rates.dispatch
end

-- The set-up a method's estimate holds, by method name, where it is long
-- enough to be shown with its progress (the run's set-up line).
_M.SETUP_SECONDS = { gram = _M.gram_build_seconds }

--- Seconds of the direct method in a shape ("gemm" or "baseline"): every
--- pair's chain, every step. A GEMM tile computes `gemm_rows` sequences
--- whether or not the batch fills it (the empty rows' chains are paid too).
function _M.direct_seconds(job, rates, shape, gemm_rows)
    local rows = job.sequences
    if shape == "gemm" then
        local tile = gemm_rows or 1
        rows = math.ceil(rows / tile) * tile
    end
    local fmas = rows * (job.length - 1) * job.n * job.dim
    local dispatches = (job.length - 1) * (shape == "gemm" and 2 or 1)
    return fmas / (rates.f32_chain * achieved(rates)[shape]) + dispatches * rates.dispatch
end

--- Seconds of the tensor filter: three int8 slice products a pair and
--- dimension (shaders/tensor.md section 2) at the tensor cores' int8
--- multiply-add rate (the combine into tile minima included), three
--- dispatches a step, and the table's slices cut on the host.
function _M.tensor_seconds(job, rates)
    local pairs_steps = job.sequences * (job.length - 1) * job.n
    return 3 * pairs_steps * job.dim / (rates.int8_mac * _M.EFFICIENCY.tensor)
        + 3 * (job.length - 1) * rates.dispatch + job.n * job.dim / _M.HOST_SLICE_RATE
end

--- Bytes of device memory G and a batch of the Gram method's state need.
function _M.gram_bytes(job, batch)
    return job.n * job.n * 4 + 2 * job.n * job.dim * 4 + batch * (job.n * 8 + job.dim * 8)
end

--- A span of seconds as the reasons print it.
function _M.seconds_text(s)
    if s < 1e-3 then return string_format("%.2g ms", s * 1e3) end
    if s < 10 then return string_format("%.3g s", s) end
    return string_format("%.0f s", s)
end

--- Every estimate of the methods `modules` (the registry's modules, each
--- with estimate(job, device)): a list of { key, label, seconds, shape,
--- method }, and the reasons of those that gave none, by method name.
local function entries(job, device, modules)
    local list, refused = {}, {}
    for _, m in ipairs(modules) do
        local mine, why = m.estimate(job, device)
        for _, x in ipairs(mine or {}) do
            list[#list + 1] = { key = x.key or m.name, label = x.label or m.name, seconds = x.seconds,
                                shape = x.shape, method = m.name, preference = m.preference or 0 }
        end
        if not mine and why then refused[#refused + 1] = "no " .. m.name .. ": " .. why end
    end
    -- Printed by preference (gram, the direct shapes, the tensor filter), each method in its own order.
    for i, x in ipairs(list) do x.order = i end
    sort(list, function(a, b)
        if a.preference ~= b.preference then return a.preference > b.preference end
        return a.order < b.order
    end)
    return list, refused
end

--- The cheapest estimate of the methods `modules` (each the registry's
--- module: its estimate(job, device) gives its seconds, or nil and why) for
--- `job` on `device`: { method, shape, why, estimates = { key = seconds } }.
--- device: { rates, memory (bytes the job may use), name, fits = { method =
--- true where it can run here }, why_not = { method = why not }, and what
--- the methods' estimates read (shapes, gemm_rows) }.
function _M.choose(job, device, modules)
    local list, refused = entries(job, device, modules)
    local estimates, best, parts = {}, nil, {}
    for _, x in ipairs(list) do
        estimates[x.key] = x.seconds
        if not best or x.seconds < best.seconds then best = x end
        parts[#parts + 1] = x.label .. " " .. _M.seconds_text(x.seconds)
    end
    local why = "estimated " .. concat(parts, ", ") .. " (rates from " .. (device.rates.source or "a table") .. ")"
    if #refused > 0 then why = why .. "; " .. concat(refused, "; ") end
    return { method = best.method, shape = best.shape, why = why, estimates = estimates }
end

return _M
