-- methods: the registry of methods. A method is the module
-- `lua/divgpu/methods/NAME.lua`, and the registry knows one by its kernels:
-- every method some kernel descriptor names (`method = "NAME"`). Each
-- implements one interface, which the driver, the CLI and bench use alike:
--
--   name, preference    its name; auto picks the highest preference that serves and fits
--   serves(request)     true, or nil and why: can it compute this request
--                       ({shape, precision, plain}: plain when it names only the
--                       reference shape and the fp32 contract)?
--   fits(ctx, e, opts)  true and why, or nil and why: can it run on this device and
--                       table ({sequences, memory_budget})?
--   job(ctx, e, opts)   a job, or nil, err; job:max_batch(ring [, cap]),
--                       job:batch(starts, ring, in_flight) -> batch, or nil, err;
--                       job.method, job.workgroup_size, job.underflow_note,
--                       job.products_note (where the method says how it computes)
--                       (and job.build_seconds where the job builds something)
--   batch               record(first, count, rec), submit(rec), wait(rec): true / GPU
--                       seconds, or nil, err; winners_buffer (the ring the driver reads);
--                       where it has them, stats() and chunk_stats(rec)
--   options             { run option = job option }: what the driver hands its job
--   totals(), add_totals(t, stats, steps)   where the method has figures the run sums
--
-- Adding a method is one file here plus its kernel (a `.comp` and its
-- descriptor): docs/architecture.md#adding-a-method.
--
--   local methods = require "divgpu.methods"
--   local name, why = methods.choose(ctx, e, { method = "auto", sequences = 100 })
--   local job = assert(methods.get(name).job(ctx, e, opts))

local kernel = require "divgpu.kernel"

local error, ipairs, require, tostring = error, ipairs, require, tostring
local string_format, concat, sort = string.format, table.concat, table.sort

local _M = {}

--- Every method, by name (the reference, direct, first).
function _M.names()
    local seen, names = {}, {}
    for _, name in ipairs(kernel.names()) do
        local m = kernel.descriptor(name).method
        if m and not seen[m] then seen[m], names[#names + 1] = true, m end
    end
    sort(names, function(a, b) return (a == "direct") ~= (b == "direct") and a == "direct" or a < b end)
    return names
end

--- The method module `name`; raises (at the caller, or `level` frames up)
--- on a method no kernel names.
function _M.get(name, level)
    for _, m in ipairs(_M.names()) do
        if m == name then return require("divgpu.methods." .. name) end
    end
    error(string_format("unknown method '%s' (auto, %s)", tostring(name), concat(_M.names(), ", ")), (level or 1) + 1)
end

--- The request a run makes of a method: its shape and precision, whether
--- it is plain (nothing but the direct method's reference shape, or "auto",
--- in the fp32 contract), which every method can compute, and whether it
--- leaves the direct method's shape to the cost model (shape "auto"; no
--- shape is the reference, as it always was).
function _M.request(shape, precision)
    local direct = require "divgpu.methods.direct"
    local open = shape == _M.AUTO_SHAPE
    local plain = (shape == nil or open or shape == direct.default_shape()) and (precision == nil or precision == "fp32")
    return { shape = not open and shape or nil, precision = precision, plain = plain, shape_open = open }
end

-- The shape that leaves the direct method's shape to the cost model.
_M.AUTO_SHAPE = "auto"

local function seconds_text(s)
    if s < 1e-3 then return string_format("%.2g ms", s * 1e3) end
    if s < 10 then return string_format("%.3g s", s) end
    return string_format("%.0f s", s)
end

--- Auto by cost (divgpu.cost, the device's rates from divgpu.rates): the
--- cheapest of gram (where it fits), the tensor filter (where `weigh_tensor`
--- and the device has tensor cores whose rate is known) and the direct
--- method in `shapes`, for a job of `length` steps. The tensor filter's
--- certificate (the chain's no-overflow bound) is asked only once it is the
--- cheapest. Returns the method, its shape (direct's) and why.
local function cheapest(ctx, e, opts, gram_fits, gram_why, weigh_gram, shapes, weigh_tensor)
    local cost, rates = require "divgpu.cost", require("divgpu.rates").of(ctx)
    if not require("divgpu.device").table_fits(ctx, e, 4) then
        -- Past one storage buffer only the shapes that keep the table in blocks run.
        local direct, kept = require "divgpu.methods.direct", {}
        for _, s in ipairs(shapes) do
            if direct.descriptor(s).takes_table_in_blocks then kept[#kept + 1] = s end
        end
        if #kept > 0 then shapes = kept end
    end
    local tensor = require "divgpu.methods.tensor"
    local tensor_ok, tensor_why = false, nil
    if weigh_tensor then tensor_ok, tensor_why = tensor.may_fit(ctx, e) end
    local job = { n = e.n, dim = e.dim, sequences = opts.sequences or 1, length = opts.length }
    local device = { rates = rates, memory = math.huge, gram_ok = gram_fits, why_not = gram_why, tensor_ok = tensor_ok,
                     name = ctx.info.name, shapes = shapes,
                     gemm_rows = require("divgpu.methods.direct_gemm").tile_rows(ctx.info) }
    local choice = cost.choose(job, device)
    if choice.method == "tensor" then
        local ok, why = e:gram_admissible()  -- the tensor filter's certificate, as tensor.fits asks
        if not ok then
            device.tensor_ok, tensor_why = false, why
            choice = cost.choose(job, device)
        end
    end
    local parts = {}
    for _, k in ipairs{ "gram", "tensor", "gemm", "baseline" } do
        local s = choice.estimates[k]
        if s then parts[#parts + 1] = ((k == "gram" or k == "tensor") and k .. " " or "direct " .. k .. " ") .. seconds_text(s) end
    end
    local why = string_format("estimated %s (rates from %s)", concat(parts, ", "), rates.source or "a table")
    if weigh_tensor and not device.tensor_ok then why = why .. "; no tensor: " .. tostring(tensor_why) end
    if weigh_gram and not gram_fits then why = why .. "; no gram: " .. tostring(gram_why) end
    return choice.method, choice.shape, why
end

--- The direct method's shape for a request that leaves it open: by cost
--- where the job's length is known, else the reference.
function _M.direct_shape(ctx, e, opts)
    local direct = require "divgpu.methods.direct"
    if not opts.length then return direct.default_shape(), "the reference shape" end
    local _, shape, why = cheapest(ctx, e, opts, false, nil, false, { "gemm", "baseline" })
    return shape, why
end

--- The method a run uses, why, and the direct method's shape where the
--- request left it open (shape "auto"). opts.method names one ("direct",
--- "gram", ...), or is "auto" (the default): the cheapest by cost of the
--- methods that serve the request (opts.shape, opts.precision; a compiled
--- shader, opts.spirv, is the direct method's) and fit the device
--- (opts.sequences, opts.memory_budget) where the job's opts.length is given
--- and the request is plain; else the one of highest preference. An unknown
--- method raises.
function _M.choose(ctx, e, opts)
    local method = opts.method or "auto"
    local request = _M.request(opts.shape, opts.precision)
    local direct = require "divgpu.methods.direct"
    if (method == "auto" or method == "direct") and (opts.spirv or opts.shader_name) then
        -- A compiled shader is a direct shape's: the one named, else the reference.
        return "direct", "a direct-method shader was given", request.shape_open and direct.default_shape() or nil
    end
    if method ~= "auto" then
        local ok, why = _M.get(method, 2).serves(request)
        if not ok then error(string_format("method %s: %s", method, why), 2) end
        if method == "direct" and request.shape_open then
            -- Only the plain fp32 job has the GEMM shape to weigh.
            local shape, why = direct.default_shape(), "the reference shape, for precision "
                .. tostring(opts.precision)
            if request.plain then shape, why = _M.direct_shape(ctx, e, opts) end
            return method, "asked for; shape " .. shape .. ": " .. why, shape
        end
        return method, "asked for"
    end
    local candidates = {}
    for _, name in ipairs(_M.names()) do candidates[#candidates + 1] = _M.get(name) end
    sort(candidates, function(a, b) return a.preference > b.preference end)
    -- The first that serves and fits, with why the ones before it were
    -- passed over; and which fit at all (what the cost model may weigh).
    local first, first_why, fits, passed_over, served = nil, nil, {}, {}, false
    for _, m in ipairs(candidates) do
        local ok, why = m.serves(request)
        if ok then
            served = true
            ok, why = m.fits(ctx, e, { sequences = opts.sequences, memory_budget = opts.memory_budget,
                                       precision = opts.precision })
        end
        if ok then
            fits[m.name] = true
            if not first then first, first_why = m.name, #passed_over > 0 and concat(passed_over, "; ") or why end
        else
            passed_over[#passed_over + 1], passed_over[m.name] = why, why
        end
        -- Auto picks nothing below the direct method, which serves every request:
        -- what ranks below it is not even asked whether it fits (the tensor
        -- filter's slices of the whole table would be made for nothing).
        if m.name == "direct" then break end
    end
    if not first then
        -- One reason often stops several methods (a table too large for any): each said once.
        local reasons, seen = {}, {}
        for _, why in ipairs(passed_over) do
            if not seen[why] then seen[why], reasons[#reasons + 1] = true, why end
        end
        -- A request some method serves, on a device none fits, is a failure, not misuse.
        if served then return nil, "no method fits this device: " .. concat(reasons, "; ") end
        error("no method runs this request: " .. concat(reasons, "; "), 2)
    end
    if opts.length and request.plain and fits.direct then
        local shapes = request.shape_open and { "gemm", "baseline" } or { direct.default_shape() }
        local chosen, shape, why = cheapest(ctx, e, opts, fits.gram == true, passed_over.gram, true, shapes,
            request.shape_open)
        return chosen, why, request.shape_open and shape or nil
    end
    return first, first_why, first == "direct" and request.shape_open and direct.default_shape() or nil
end

return _M
