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
--                       job.method, job.workgroup_size, job.underflow_note
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

--- The method module `name`; raises (at the caller's caller, `level`
--- default 2) on a method no kernel names.
function _M.get(name, level)
    for _, m in ipairs(_M.names()) do
        if m == name then return require("divgpu.methods." .. name) end
    end
    error(string_format("unknown method '%s' (auto, %s)", tostring(name), concat(_M.names(), ", ")), (level or 1) + 1)
end

--- The request a run makes of a method: its shape and precision, and
--- whether it is plain (nothing but the direct method's reference shape in
--- the fp32 contract), which every method can compute.
function _M.request(shape, precision)
    local direct = require "divgpu.methods.direct"
    local plain = (shape == nil or shape == direct.default_shape()) and (precision == nil or precision == "fp32")
    return { shape = shape, precision = precision, plain = plain }
end

--- The method a run uses, and why. opts.method names one ("direct", "gram",
--- ...), or is "auto" (the default): the method of highest preference that
--- serves the request (opts.shape, opts.precision; a compiled shader, opts.spirv,
--- is the direct method's) and fits the device (opts.sequences, opts.memory_budget).
--- An unknown method raises.
function _M.choose(ctx, e, opts)
    local method = opts.method or "auto"
    if method ~= "auto" then
        _M.get(method, 2)
        return method, "asked for"
    end
    if opts.spirv or opts.shader_name then return "direct", "a direct-method shader was given" end
    local request = _M.request(opts.shape, opts.precision)
    local candidates = {}
    for _, name in ipairs(_M.names()) do candidates[#candidates + 1] = _M.get(name) end
    sort(candidates, function(a, b) return a.preference > b.preference end)
    -- Why each method of higher preference was passed over: the reason given.
    local reasons = {}
    for _, m in ipairs(candidates) do
        local ok, why = m.serves(request)
        if ok then
            ok, why = m.fits(ctx, e, { sequences = opts.sequences, memory_budget = opts.memory_budget })
            if ok then return m.name, #reasons > 0 and concat(reasons, "; ") or why end
        end
        reasons[#reasons + 1] = why
    end
    error("no method runs this request: " .. concat(reasons, "; "), 2)
end

return _M
