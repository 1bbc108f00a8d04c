-- kernel: the kernels as data, and a kernel made from its descriptor.
--
-- A kernel is one shipped `shaders/NAME.comp` (its variant axes, if any, in
-- `shaders/NAME.axes.json`) and one descriptor, `lua/divgpu/kernels/NAME.lua`
-- (a hyphen in NAME is an underscore there): its bindings, push fields and
-- specialization constants by name, the method it serves, and what that
-- method asks of it (a dispatch plan, shared memory, tiling needs, a state
-- layout). The registry finds every descriptor by the shipped kernels'
-- names, so adding a kernel touches its `.comp` and its descriptor only.
-- The descriptor is checked against the SPIR-V's reflection when the
-- pipeline is made (the bindings' block names and the push fields, by name
-- and in order), so a shader and its descriptor cannot drift apart.
--
--   local kernel = require "divgpu.kernel"
--   local d = kernel.descriptor("gram")              -- d.axes, d.state (its state layout)
--   local k = assert(kernel.new(ctx, d, { variant = kernel.variant(d, { layout = "columns" }),
--                                         constants = { workgroup_size = 64, ... } }))
--   local group = assert(k:bind{ embeddings = buf, ... })  -- every binding, by name
--   assert(k:dispatch(rec, group, { num_items = n, ... }, groups_x))
--
-- Misuse (a missing or unknown name, an unknown axis value) raises
-- error(msg, 2); what the device refuses returns nil, err.

local divgpu = require "divgpu"
local device = require "divgpu.device"
local failure = require "divgpu.failure"

local need, catch = failure.need, failure.catch
local error, pairs, ipairs, type, setmetatable, tostring, tonumber, require =
    error, pairs, ipairs, type, setmetatable, tostring, tonumber, require
local string_format, concat, sort = string.format, table.concat, table.sort

local _M = {}

local function module_of(name)
    return "divgpu.kernels." .. name:gsub("-", "_")
end

--- The named constants of a state layout, declared once in a shipped
--- include as `const uint PREFIX_NAME = Nu;` lines (the shader includes the
--- file; this reads its embedded copy): { NAME = N, ... }.
local function state_layout(spec, kernel_name)
    local source = divgpu.shaders.include(spec.include)
    if not source then error(string_format("kernel '%s': no shipped include '%s' for its state layout", kernel_name, spec.include), 0) end
    local layout, count = {}, 0
    for name, value in source:gmatch("const uint " .. (spec.prefix or "") .. "([%w_]+) = (%d+)u;") do
        layout[name], count = tonumber(value), count + 1
    end
    if count == 0 then error(string_format("kernel '%s': %s declares no state constants", kernel_name, spec.include), 0) end
    return layout
end

local descriptors = {}

--- The descriptor of kernel `name` (its module's table, required once),
--- with `name`, `axes` (the shader's variant axes) and, where it declares
--- a `state_layout`, `state` (its constants); nil when the kernel has none.
function _M.descriptor(name)
    if descriptors[name] == nil then
        local module = module_of(name)
        if not package.searchpath(module, package.path) then
            descriptors[name] = false
        else
            local m = require(module)
            local d = setmetatable({ name = name, shader = m.shader or name, axes = divgpu.shaders.axes(name) },
                                   { __index = m })
            if d.state_layout then d.state = state_layout(d.state_layout, name) end
            descriptors[name] = d
        end
    end
    return descriptors[name] or nil
end

--- Every shipped kernel that has a descriptor, by name.
function _M.names()
    local names = {}
    for _, name in ipairs(divgpu.shaders.kernels()) do
        if _M.descriptor(name) then names[#names + 1] = name end
    end
    sort(names)
    return names
end

--- The descriptors that serve `method` (their `method` field), the method's
--- reference kernel (`reference = true`) first, then by name.
function _M.serving(method)
    local list = {}
    for _, name in ipairs(_M.names()) do
        local d = _M.descriptor(name)
        if d.method == method then list[#list + 1] = d end
    end
    sort(list, function(a, b)
        if (a.reference or false) ~= (b.reference or false) then return a.reference == true end
        return a.name < b.name
    end)
    return list
end

--- The values of axis `axis` of descriptor `d` (its default first), or nil
--- when the kernel has no such axis.
function _M.axis_values(d, axis)
    for _, a in ipairs(d.axes) do
        if a.name == axis then return a.values end
    end
end

--- The shipped variant of `d` with the axis values of `choice` ({ axis =
--- value }; a value of nil takes the default). An axis the kernel lacks,
--- or a value it does not have, raises at `level` (default 2: the caller).
function _M.variant(d, choice, level)
    local wanted = {}
    for axis, value in pairs(choice or {}) do
        local values = _M.axis_values(d, axis)
        local known = false
        for _, v in ipairs(values or {}) do known = known or v == value end
        if not known then
            error(string_format("kernel '%s': unknown %s '%s' (%s)", d.name, axis, tostring(value),
                values and concat(values, ", ") or "the kernel has no such axis"), (level or 2) + 1)
        end
        wanted[axis] = value
    end
    return divgpu.shaders.variant(d.shader, wanted)
end

local Kernel = {}
Kernel.__index = Kernel
local Pending = {}
Pending.__index = Pending

local function names_of(list)
    local set = {}
    for i, name in ipairs(list) do set[name] = i end
    return set
end

local function make(ctx, d, opts, spec, used, background)
    local variant = opts.variant or d.shader
    local spirv = opts.spirv or need(device.shader(ctx, variant, opts.defines))
    -- The device's and the job's switches (device.specialization): those
    -- device.shader chose for this module, else the device's own.
    for id, value in pairs(device.specialization_of(spirv) or device.specialization(ctx)) do
        if spec[id] == nil then spec[id] = value end
    end
    if _M.trace then _M.trace(spirv, opts.name or variant) end
    -- The descriptor's bindings and push fields, by name and in order, and
    -- the constants set, are checked against the SPIR-V when the pipeline is
    -- made: a shader and its descriptor cannot drift apart.
    local request = { spirv = spirv, name = opts.name or variant, specialization = spec,
                      interface = { bindings = d.bindings, push = d.push, constants = used } }
    local k = { ctx = ctx, descriptor = d, variant = variant, binding_index = names_of(d.bindings),
                push_index = names_of(d.push) }
    if background then
        return setmetatable({ kernel = setmetatable(k, Kernel), pending = need(ctx:begin_pipeline(request)) }, Pending)
    end
    k.pipeline = need(ctx:pipeline(request))
    return setmetatable(k, Kernel)
end

--- The specialization constants of opts.constants by id, and the names used.
local function constants_of(d, opts, level)
    local spec, used = {}, {}
    for name, value in pairs(opts.constants or {}) do
        local id = d.constants and d.constants[name]
        if id == nil then
            error(string_format("kernel '%s': no specialization constant '%s'", d.shader, tostring(name)), level + 1)
        end
        spec[id], used[name] = value, id
    end
    return spec, used
end

--- kernel.trace: nil, or a function(spirv, name) called with every module a
--- kernel's pipeline is made from (tests/shipped_spirv_spec.lua).
_M.trace = nil

--- kernel.new(ctx, descriptor, opts) -> kernel, or nil, err. opts:
---   variant    shipped variant name (default descriptor.shader)
---   defines    extra defines (device.shader: switches become specialization
---              constants, named patches and other defines a run-time compile)
---   spirv      a compiled shader to use instead (experiments, twins)
---   constants  { name = u32 } for the descriptor's specialization constants
---   name       the pipeline's name in messages (default: the variant's)
--- A descriptor that is not the shader's raises, as ctx:pipeline does.
function _M.new(ctx, d, opts)
    opts = opts or {}
    if type(d) ~= "table" or type(d.shader) ~= "string" then error("kernel.new: descriptor must be a kernel descriptor", 2) end
    local spec, used = constants_of(d, opts, 2)
    return catch(make, ctx, d, opts, spec, used)
end

--- kernel.begin(ctx, descriptor, opts) -> pending, or nil, err: kernel.new's
--- kernel with its pipeline made on a thread of its own (ctx:begin_pipeline;
--- a run-time compile of `defines` still happens here), so the driver's
--- compile overlaps the caller's set-up; pending:wait() -> the kernel, or
--- nil, err.
function _M.begin(ctx, d, opts)
    opts = opts or {}
    if type(d) ~= "table" or type(d.shader) ~= "string" then error("kernel.begin: descriptor must be a kernel descriptor", 2) end
    local spec, used = constants_of(d, opts, 2)
    return catch(make, ctx, d, opts, spec, used, true)
end

local function finish(pending)
    local k = pending.kernel
    if not k.pipeline then k.pipeline, pending.seconds = need(pending.pending:wait()) end
    return k
end

--- pending:wait() -> the kernel, or nil, err (what the pipeline's thread
--- met); pending.seconds then holds how long the driver took.
function Pending:wait()
    return catch(finish, self)
end

--- k:bind{ name = buffer, ... } [, referenced buffers] -> bind group, or nil, err.
function Kernel:bind(named, referenced)
    local list = {}
    for name, buffer in pairs(named) do
        local i = self.binding_index[name]
        if not i then error(string_format("kernel '%s': no binding named '%s'", self.variant, tostring(name)), 2) end
        list[i] = buffer
    end
    for i, name in ipairs(self.descriptor.bindings) do
        if list[i] == nil then error(string_format("kernel '%s': binding '%s' is missing", self.variant, name), 2) end
    end
    return self.ctx:bind(self.pipeline, list, referenced)
end

--- The push words of `fields` in the descriptor's order.
function Kernel:push(fields)
    local words = {}
    for name, value in pairs(fields) do
        local i = self.push_index[name]
        if not i then error(string_format("kernel '%s': no push field named '%s'", self.variant, tostring(name)), 3) end
        words[i] = value
    end
    for i, name in ipairs(self.descriptor.push) do
        if type(words[i]) ~= "number" then
            error(string_format("kernel '%s': push field '%s' is missing", self.variant, name), 3)
        end
    end
    return words
end

--- Records one dispatch of groups_x [, groups_y] workgroups on `rec`: true, or nil, err.
function Kernel:dispatch(rec, group, fields, groups_x, groups_y)
    return rec:dispatch(group, self:push(fields), groups_x, groups_y)
end

return _M
