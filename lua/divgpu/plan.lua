-- plan: the one place a run is decided. plan.make asks the method registry
-- (divgpu.methods) once which method serves the request and fits every
-- device, weighs the candidates by the cost model (divgpu.cost) where the
-- job's length is known, and settles the direct method's shape, the tile
-- and the layout, each with why. driver.run takes the plan; the CLI prints
-- it (run --plan-only, and the run's first lines).
--
--   local plan = require "divgpu.plan"
--   local p = assert(plan.make({ ctx }, e, { method = "auto", shape = "auto", length = L, sequences = S }))
--   p.method, p.shape, p.precision, p.tile, p.layout   -- what runs
--   p.why.method, p.why.tile, p.why.layout              -- why, each once
--   print(plan.text(p))                                  -- the lines the CLI prints
--   driver.run{ contexts = { ctx }, embeddings = e, starts = starts, length = L, plan = p }
--
-- asked: method ("auto" default, or a registry name), shape (a direct shape,
-- "auto", or nil: the reference), precision, length and sequences (what the
-- cost model weighs and fits asks), memory_budget (bytes auto may plan for),
-- spirv or shader_name (a direct shader), layout, tile_size (a number,
-- "auto" or nil: auto), l2_bytes, measure_l2 (where the tile's L2 comes from).
-- Misuse (a method the registry lacks, one that cannot compute the request)
-- raises; what the devices cannot run is nil, err.

local failure = require "divgpu.failure"
local methods = require "divgpu.methods"
local cost = require "divgpu.cost"
local device_profile = require "divgpu.device_profile"
local tiles = require "divgpu.tiles"

local fail, catch = failure.fail, failure.catch
local ipairs, pairs, tostring, type, error, require = ipairs, pairs, tostring, type, error, require
local string_format, concat, sort, ceil, min, max = string.format, table.concat, table.sort, math.ceil, math.min, math.max

local _M = {}

-- The modules that run on ctx, by preference (highest first).
local function by_preference(ctx)
    local list = {}
    for _, m in ipairs(methods.modules()) do
        if methods.runs_on(m, ctx) then list[#list + 1] = m end
    end
    sort(list, function(a, b) return a.preference > b.preference end)
    return list
end

-- Each reason once, in order.
local function distinct(reasons)
    local out, seen = {}, {}
    for _, why in ipairs(reasons) do
        if not seen[why] then seen[why], out[#out + 1] = true, why end
    end
    return out
end

--- Auto's first pass: the methods by preference, down to direct (which
--- serves every request: what ranks below it is weighed, not asked whether
--- it fits). Returns the first that serves and fits, why, which fit, and
--- why each other did not; raises where none serves the request.
local function first_fit(ctx, e, asked, request)
    local first, first_why, fitted, passed, served = nil, nil, {}, {}, false
    for _, m in ipairs(by_preference(ctx)) do
        local ok, why = m.serves(request)
        if ok then
            served = true
            ok, why = m.fits(ctx, e, { sequences = asked.sequences, memory_budget = asked.memory_budget,
                                       precision = asked.precision })
        end
        if ok then
            fitted[m.name] = true
            if not first then first, first_why = m.name, #passed > 0 and concat(passed, "; ") or why end
        else
            passed[#passed + 1], passed[m.name] = why, why
        end
        if m.name == "direct" then break end
    end
    if not first then
        local reasons = concat(distinct(passed), "; ")
        if served then fail("no method fits this device: " .. reasons) end
        error("no method runs this request: " .. reasons, 0)
    end
    return first, first_why, fitted, passed
end

-- What auto weighs beside the methods that fit: a method below direct that
-- serves the request and may fit (where the request leaves the shape open).
local function weighable(ctx, e, m, request)
    if m.preference >= methods.get("direct").preference or not request.shape_open or not m.may_fit then return false end
    if not m.serves(request) then return false end
    local ok, why = m.may_fit(ctx, e)
    return ok and true or false, why
end

--- The cheapest by cost of `names` (true for each weighed method: those
--- that fit, and those below direct that may) for the job; a method with
--- confirm() is asked it once it is the cheapest. Returns the cost's choice.
local function cheapest(ctx, e, asked, weighed, why_not, shapes)
    local device = { rates = device_profile.rates(ctx), memory = math.huge, name = ctx.info.name,
                     info = ctx.info, shapes = shapes, fits = weighed, why_not = why_not }
    local job = { n = e.n, dim = e.dim, sequences = asked.sequences or 1, length = asked.length,
                  precision = asked.precision }
    local modules = {}
    for _, m in ipairs(methods.modules()) do
        if weighed[m.name] ~= nil and m.estimate then modules[#modules + 1] = m end
    end
    local choice = cost.choose(job, device, modules)
    local m = methods.get(choice.method)
    if m.confirm then
        local ok, why = m.confirm(ctx, e)
        if not ok then
            weighed[m.name], why_not[m.name] = false, why
            choice = cost.choose(job, device, modules)
        end
    end
    return choice
end

-- The direct shapes auto weighs: those it may open, those that keep a table
-- past one storage buffer in blocks where it is (only they run).
local function direct_shapes(ctx, e, request)
    local direct = methods.get("direct")
    if not request.shape_open then return { direct.default_shape() } end
    local shapes = direct.WEIGHED_SHAPES
    if require("divgpu.device").table_fits(ctx, e, 4) then return shapes end
    local kept = {}
    for _, s in ipairs(shapes) do
        if direct.descriptor(s).takes_table_in_blocks then kept[#kept + 1] = s end
    end
    return #kept > 0 and kept or shapes
end

--- The direct method's shape where the request leaves it open: by cost
--- where the job's length is known and the request plain, else the reference.
local function open_shape(ctx, e, asked, request)
    local direct = methods.get("direct")
    if not (asked.length and request.plain) then
        return direct.default_shape(), "the reference shape" ..
            (request.plain and "" or ", for precision " .. tostring(asked.precision))
    end
    local choice = cheapest(ctx, e, asked, { direct = true }, {}, direct_shapes(ctx, e, request))
    return choice.shape, choice.why
end

--- A method asked for by name: it must serve the request (misuse raises)
--- and fit the device (its fits' why is the reason).
local function asked_method(ctx, e, asked, request)
    local m = methods.get(asked.method, 3)
    local ok, why = m.serves(request)
    if not ok then error(string_format("method %s: %s", m.name, why), 0) end
    if not methods.runs_on(m, ctx) then
        fail(string_format("method %s runs on a context of kind '%s', not '%s'", m.name, m.device_kind or "vulkan",
            methods.device_kind(ctx)))
    end
    ok, why = m.fits(ctx, e, { sequences = asked.sequences, memory_budget = math.huge, precision = asked.precision })
    if not ok then fail(string_format("method %s: %s", m.name, why)) end
    if m.name == "direct" and request.shape_open then
        local shape, shape_why = open_shape(ctx, e, asked, request)
        return m.name, string_format("asked for (%s); shape %s: %s", why, shape, shape_why), shape
    end
    return m.name, "asked for (" .. why .. ")"
end

--- The method, why, and the direct method's shape where the request left it open.
local function choose_method(ctx, e, asked)
    local request = methods.request(asked.shape, asked.precision)
    local method = asked.method or "auto"
    if (method == "auto" or method == "direct") and (asked.spirv or asked.shader_name) then
        local direct = methods.get("direct")
        return "direct", "a direct-method shader was given", request.shape_open and direct.default_shape() or nil
    end
    if method ~= "auto" then return asked_method(ctx, e, asked, request) end
    local first, first_why, fitted, passed = first_fit(ctx, e, asked, request)
    if not (asked.length and request.plain and fitted.direct) then
        return first, first_why, first == "direct" and request.shape_open and methods.get("direct").default_shape() or nil
    end
    local weighed, why_not = {}, {}
    for _, m in ipairs(by_preference(ctx)) do
        if fitted[m.name] then weighed[m.name] = true
        elseif passed[m.name] then weighed[m.name], why_not[m.name] = false, passed[m.name]
        else weighed[m.name], why_not[m.name] = weighable(ctx, e, m, request) end
    end
    local choice = cheapest(ctx, e, asked, weighed, why_not, direct_shapes(ctx, e, request))
    return choice.method, choice.why, request.shape_open and choice.shape or nil, choice.estimates
end

--- Every other device must fit the method the first chose, with its share
--- of the sequences (the bytes would be the same either way; one method
--- keeps the summary and stats plain).
local function check_others(contexts, e, asked, method)
    local m = methods.get(method)
    local share = ceil((asked.sequences or 1) / #contexts)
    for i = 2, #contexts do
        local ok, why = m.fits(contexts[i], e, { sequences = share, memory_budget = asked.memory_budget,
                                                 precision = asked.precision })
        if not ok then
            fail(string_format("device %d (%s) cannot run the %s method the first one chose (%s): leave it out, "
                .. "or ask for the direct method", i, contexts[i].info.name, method, why))
        end
    end
end

--- The tile of a tiled direct shape: the one asked for, else from the L2 size.
local function choose_tile(ctx, e, p, asked)
    local d = methods.get("direct").descriptor(p.shape)
    if not (d and d.needs_tile) then return nil end
    if type(asked.tile_size) == "number" then
        return asked.tile_size, string_format("tile size %d candidates (given)", asked.tile_size)
    end
    local l2, source = device_profile.l2(ctx, asked)
    if not l2 then fail(source) end
    local bpv = tiles.BYTES_PER_VALUE[p.precision]
    local t = tiles.tile_size(l2, e.dim, bpv)
    return t, string_format("tile size %d candidates = floor(%d B L2 x 0.85 / (%d dims x %d B)); L2 from the %s",
        t, l2, e.dim, bpv, source)
end

--- Where the caller offers the host (asked.host: the CLI, when no device
--- was named), every device is a CPU one (lavapipe) and auto weighed the
--- job by cost, the host's own method (cpu, in the registry) is weighed
--- too: the same cores without Vulkan between them. Returns the host's
--- context when it is the cheaper, with why.
-- What the run may ask that only a Vulkan method's kernel takes: given,
-- the host is not offered (the CPU method would ignore it).
local VULKAN_ONLY = { "spirv", "shader_name", "workgroup_size", "layout", "tile_size", "l2_bytes", "measure_l2" }

local function host_instead(contexts, e, asked, p)
    local cpu = methods.find("cpu")
    if not (asked.host and cpu) or (asked.method or "auto") ~= "auto" or not (p.estimates and asked.length) then
        return nil
    end
    if not methods.request(asked.shape, asked.precision).plain then return nil end
    -- A Vulkan kernel's own options keep the job on the device that runs it.
    for _, k in ipairs(VULKAN_ONLY) do
        if asked[k] then return nil end
    end
    for _, c in ipairs(contexts) do
        if methods.device_kind(c) ~= "vulkan" or c.info.type ~= "cpu" then return nil end
    end
    local best, best_key = math.huge, nil
    for key, seconds in pairs(p.estimates) do
        if seconds < best then best, best_key = seconds, key end
    end
    local host = cpu.host_context()
    local mine = cpu.seconds(host, e.n, e.dim, asked.sequences or 1, asked.length)
    if mine >= best then return nil end
    return host, string_format("the only devices are CPU ones; estimated cpu %s on the host's cores (%s), "
        .. "%s %s on %s", cost.seconds_text(mine), cpu.rates(host).source, tostring(best_key), cost.seconds_text(best),
        contexts[1].info.name)
end

local function make(contexts, e, asked)
    local ctx = contexts[1]
    local p = { why = {}, devices = #contexts, precision = asked.precision or "fp32", asked = asked.method or "auto",
                shape_chosen = asked.shape == methods.AUTO_SHAPE }
    p.method, p.why.method, p.shape, p.estimates = choose_method(ctx, e, asked)
    local host, why = host_instead(contexts, e, asked, p)
    if host then
        p.method, p.why.method, p.shape, p.precision, p.contexts, p.devices = "cpu", why, nil, nil, { host }, 1
        return p
    end
    check_others(contexts, e, asked, p.method)
    if p.method == "direct" then p.shape = p.shape or asked.shape end
    if p.shape == nil or p.shape == methods.AUTO_SHAPE then p.shape = methods.get("direct").default_shape() end
    local m = methods.get(p.method)
    p.layout, p.why.layout = asked.layout, "given"
    -- A compiled shader has its layout: the job's default, as it was built.
    local default = m.layout_for and m.layout_for(p.shape) or m.default_layout
    if not p.layout and default and not (asked.spirv or asked.shader_name) then
        p.layout, p.why.layout = default, "the " .. m.name .. " method's default"
    end
    if p.method == "direct" then p.tile, p.why.tile = choose_tile(ctx, e, p, asked) end
    if p.method ~= "direct" then p.precision, p.shape = nil, nil end
    return p
end

--- plan.make(contexts, e, asked) -> plan, or nil, err (see the top).
--- contexts: a list of contexts (or one context); every device must fit
--- the plan's method.
function _M.make(contexts, e, asked)
    if type(contexts) ~= "table" or methods.device_kind(contexts) ~= "vulkan" then contexts = { contexts } end
    if type(asked) ~= "table" then error("plan.make: asked must be a table", 2) end
    if asked.method ~= nil and asked.method ~= "auto" then methods.get(asked.method, 2) end
    return catch(make, contexts, e, asked)
end

--- The plan as the lines the CLI prints: the method (and shape) with why,
--- the tile with why, the layout with why.
function _M.lines(p)
    local named = p.shape_chosen and p.shape and string_format("%s, shape %s", p.method, p.shape) or p.method
    local lines = { string_format("method %s (%s: %s)", named, p.asked, p.why.method) }
    if p.tile then lines[#lines + 1] = p.why.tile end
    if p.layout then lines[#lines + 1] = string_format("layout %s: %s", p.layout, p.why.layout) end
    return lines
end

return _M
