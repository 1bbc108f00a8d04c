-- cost: what `--method auto` weighs. An estimate of each method's seconds for
-- a job (N items of D dimensions, S sequences of length L) on a device whose
-- rates are known (divgpu.rates: measured once per device and driver, or a
-- table), and the choice of the cheapest that fits the device's memory.
-- Pure functions: the tests run them on simulated devices and budgets.
--
--   local cost = require "divgpu.cost"
--   local choice = cost.choose({ n =, dim =, sequences =, length = }, device)
--   choice.method ("gram" | "tensor" | "direct"), choice.shape (direct's), choice.why, choice.estimates
--
-- device: { shapes = the direct shapes to weigh (default gemm and baseline),
--           rates = { f32_chain = FMA/s of the contract's chain, f64_fma = FMA/s,
--           copy = bytes/s, dispatch = seconds a dispatch costs, int8_mac = int8
--           multiply-adds/s (where known) }, gemm_rows = the sequences one tile
--           of the GEMM shape computes at once (default 1), memory = bytes the job may use,
--           gram_ok = true | false, why_not = "..." (when not), tensor_ok = true
--           when the tensor filter can run, name = "..." }

local max, min, huge = math.max, math.min, math.huge
local string_format = string.format

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

--- Seconds of the Gram method: G's build (one triangle of N^2 D fmas, f64),
--- writing G (N^2 f32), and the steps.
function _M.gram_seconds(job, rates)
    local n, dim = job.n, job.dim
    local build = n * (n + 1) / 2 * dim / (rates.f64_fma * _M.EFFICIENCY.gram_build)
    local write = n * n * 4 / rates.copy
    local steps = job.sequences * (job.length - 1) * n * _M.GRAM_BYTES_PER_CANDIDATE_STEP / rates.copy
    return build + write + steps + (job.length - 1) * rates.dispatch
end

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
    return fmas / (rates.f32_chain * _M.EFFICIENCY[shape]) + dispatches * rates.dispatch
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

local function seconds_text(s)
    if s < 1e-3 then return string_format("%.2g ms", s * 1e3) end
    if s < 10 then return string_format("%.3g s", s) end
    return string_format("%.0f s", s)
end

--- The cheapest method for `job` on `device`: { method, shape, why, estimates = {gram =, gemm =, baseline =} }.
--- Gram only where the device can run it and G and a batch's state fit 90% of its memory.
function _M.choose(job, device)
    local rates = device.rates
    local estimates, best, best_s = {}, nil, huge
    for _, shape in ipairs(device.shapes or { "gemm", "baseline" }) do
        estimates[shape] = _M.direct_seconds(job, rates, shape, device.gemm_rows)
        if estimates[shape] < best_s then best, best_s = shape, estimates[shape] end
    end
    local batch = min(job.sequences, 64)
    local gram_why
    if not device.gram_ok then
        gram_why = device.why_not or "the device cannot run the Gram method"
    elseif _M.gram_bytes(job, batch) > 0.9 * device.memory then
        gram_why = string_format("G (%d x %d f32) and the state need %.1f MiB, more than 90%% of %.1f MiB",
            job.n, job.n, _M.gram_bytes(job, batch) / 1048576, device.memory / 1048576)
    else
        estimates.gram = _M.gram_seconds(job, rates)
    end
    if device.tensor_ok and rates.int8_mac then estimates.tensor = _M.tensor_seconds(job, rates) end
    if estimates.gram and estimates.gram < best_s then best, best_s = "gram", estimates.gram end
    if estimates.tensor and estimates.tensor < best_s then best, best_s = "tensor", estimates.tensor end
    local parts = {}
    for _, k in ipairs{ "gram", "tensor", "gemm", "baseline" } do
        if estimates[k] then parts[#parts + 1] = k .. " " .. seconds_text(estimates[k]) end
    end
    local why = "estimated " .. table.concat(parts, ", ") .. " on " .. (device.name or "this device")
        .. " (rates from " .. (rates.source or "a table") .. ")"
    if gram_why then why = why .. "; no gram: " .. gram_why end
    local method = (best == "gram" or best == "tensor") and best or "direct"
    return { method = method, shape = method == "direct" and best or nil, why = why, estimates = estimates }
end

return _M
