-- kernel: a compute kernel from its descriptor (one shipped `.comp` + one Lua
-- table in lua/divgpu/kernels/), in the manner of ggml's Vulkan backend:
-- bindings by name, push-constant fields by name, specialization constants
-- by name. The descriptor is checked against the SPIR-V's reflection when the
-- pipeline is made (the bindings' block names and the push fields, by name
-- and in order), so a shader and its descriptor cannot drift apart.
--
--   local kernel = require "divgpu.kernel"
--   local k = kernel.new(ctx, require "divgpu.kernels.gram", { variant = "gram-columns",
--                        defines = { ... }, constants = { workgroup_size = 64, ... } })
--   local group = k:bind{ embeddings = buf, ... }          -- every binding, by name
--   k:dispatch(rec, group, { num_items = n, ... }, groups_x)
--
-- Misuse (a missing or unknown name, a non-u32 value) raises error(msg, 2).

local error, pairs, ipairs, type, setmetatable, tostring = error, pairs, ipairs, type, setmetatable, tostring
local string_format = string.format

local _M = {}

local Kernel = {}
Kernel.__index = Kernel

local function names_of(list)
    local set = {}
    for i, name in ipairs(list) do set[name] = i end
    return set
end

--- kernel.new(ctx, descriptor, opts) -> kernel. opts:
---   variant    shipped variant name (default descriptor.shader)
---   defines    extra defines: the variant is then compiled at run time
---   spirv      a compiled shader to use instead (experiments, twins)
---   constants  { name = u32 } for the descriptor's specialization constants
function _M.new(ctx, d, opts)
    opts = opts or {}
    local vk = require "divgpu.vk_compute"  -- at call time: vk_compute builds its kernels with this module
    local variant = opts.variant or d.shader
    local spirv = opts.spirv or vk.shader(ctx, variant, opts.defines)
    local spec, used = {}, {}
    for name, value in pairs(opts.constants or {}) do
        local id = d.constants and d.constants[name]
        if id == nil then
            error(string_format("kernel '%s': no specialization constant '%s'", d.shader, tostring(name)), 2)
        end
        spec[id], used[name] = value, id
    end
    -- The descriptor's bindings and push fields, by name and in order, and
    -- the constants set, are checked against the SPIR-V when the pipeline is
    -- made: a shader and its descriptor cannot drift apart.
    local pipeline = ctx:pipeline{ spirv = spirv, name = opts.name or variant, specialization = spec,
                                   interface = { bindings = d.bindings, push = d.push, constants = used } }
    return setmetatable({ ctx = ctx, descriptor = d, pipeline = pipeline, variant = variant,
                          binding_index = names_of(d.bindings), push_index = names_of(d.push) }, Kernel)
end

--- k:bind{ name = buffer, ... } [, referenced buffers] -> bind group.
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

--- Records one dispatch of groups_x [, groups_y] workgroups on `rec`.
function Kernel:dispatch(rec, group, fields, groups_x, groups_y)
    rec:dispatch(group, self:push(fields), groups_x, groups_y)
end

return _M
