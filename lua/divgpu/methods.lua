-- methods: the registry of methods. The methods are the names listed in
-- lua/divgpu/methods/registry.lua, one line each; the method NAME is the
-- module `divgpu.methods.NAME`. Everything about a method is its module's;
-- the plan (divgpu.plan), the driver, the cost model, the CLI's options,
-- report and stats, and the charts ask it through this interface:
--
--   name, preference    its name; auto picks the highest preference that serves and fits
--   doc                 one line on what it computes (run --help, docs)
--   device_kind         the kind of context it runs on: "vulkan" (default) or "cpu"
--   serves(request)     true, or nil and why: can it compute this request
--                       ({shape, precision, plain}: plain when it names only the
--                       reference shape and the fp32 contract)?
--   fits(ctx, e, opts)  true and why, or nil and why: can it run on this device and
--                       table ({sequences, memory_budget, precision})?
--   may_fit(ctx, e)     (methods below direct) what auto asks before weighing it;
--                       confirm(ctx, e): what it asks once it is the cheapest
--   estimate(job, device) -> a list of { label, seconds [, shape] }, or nil, why:
--                       its seconds by the cost model (divgpu.cost), where it is weighed
--   memory(job)         bytes of device memory the job needs (the budget's check)
--   options             { run option = job option }: what the driver hands its job
--   tuning              { tuning key = job option }: bench-only switches, given
--                       in driver.run's opts.tuning (never among the options)
--   default_layout      the layout its job takes when the run names none (or nil);
--                       layout_for(shape): the same where it depends on the shape
--   job(ctx, e, opts)   a job, or nil, err: job:max_batch(ring [, cap]),
--                       job:batch(starts, ring, in_flight) -> batch; job.method,
--                       job.workgroup_size, job.underflow_note, job.products_note,
--                       job.build_seconds, job.setup_note (where it has them)
--   batch               record(first, count, rec), submit(rec), wait(rec);
--                       winners_buffer; where it has them, stats() and chunk_stats(rec)
--   totals(), add_totals(t, stats, steps)   the figures a run sums (stats[name])
--   summary(totals)     one line of the run's summary on those figures (or nil)
--   chunk_record(figures)  the --stats fields of a chunk's figures; chunk_fields
--                       their names; chart_series(chunk): a panel's value (or nil)
--
-- Adding a method: docs/architecture.md#adding-a-method.
--
--   local methods = require "divgpu.methods"
--   for _, m in ipairs(methods.modules()) do print(m.name, m.doc) end
--   local job = assert(methods.get("gram").job(ctx, e, opts))

local registry = require "divgpu.methods.registry"

local error, ipairs, pairs, require, tostring, type = error, ipairs, pairs, require, tostring, type
local string_format, concat = string.format, table.concat

local _M = {}

-- The shape that leaves the direct method's shape to the cost model.
_M.AUTO_SHAPE = "auto"

--- Every method, by name, in the registry's order (the reference, direct, first).
function _M.names()
    local names = {}
    for i, name in ipairs(registry) do names[i] = name end
    return names
end

--- The method module `name`, or nil when the registry has no such method.
function _M.find(name)
    for _, m in ipairs(registry) do
        if m == name then return require("divgpu.methods." .. name) end
    end
end

--- The method module `name`; raises (at the caller, or `level` frames up)
--- on a method the registry does not list.
function _M.get(name, level)
    local m = _M.find(name)
    if m then return m end
    error(string_format("unknown method '%s' (auto, %s)", tostring(name), concat(_M.names(), ", ")), (level or 1) + 1)
end

--- Every method module, in the registry's order.
function _M.modules()
    local list = {}
    for i, name in ipairs(registry) do list[i] = require("divgpu.methods." .. name) end
    return list
end

--- The kind of context `ctx` is: "vulkan" (a device's userdata) or its own kind.
function _M.device_kind(ctx)
    if type(ctx) == "table" and ctx.kind then return ctx.kind end
    return "vulkan"
end

--- Whether method module `m` runs on context `ctx`'s kind.
function _M.runs_on(m, ctx)
    return (m.device_kind or "vulkan") == _M.device_kind(ctx)
end

--- Every bench-only tuning key, the method that takes it: { key = method name }.
function _M.tuning_keys()
    local keys = {}
    for _, m in ipairs(_M.modules()) do
        for key in pairs(m.tuning or {}) do keys[key] = m.name end
    end
    return keys
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

return _M
