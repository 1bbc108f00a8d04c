-- No import circle among the Lua modules: every `require "divgpu.X"` in
-- lua/divgpu/ (the CLI and the kernel descriptors included, lazy requires
-- inside functions too) is an edge, and so are divgpu.methods' require of
-- each module its registry lists and divgpu.kernel's of each descriptor;
-- the graph must have no cycle. The twin:
-- one edge added back (the cost model requiring the plan) must be found,
-- naming the circle.

local function lines_of(command)
    local p = assert(io.popen(command))
    local out = {}
    for line in p:lines() do out[#out + 1] = line end
    p:close()
    return out
end

local function read(path)
    local f = assert(io.open(path, "rb"))
    local text = f:read("*a")
    f:close()
    return text
end

--- { module = { required module, ... } } for every module under lua/divgpu/.
local function graph()
    local g = {}
    for _, file in ipairs(lines_of("cd lua && find divgpu -name '*.lua' | sort")) do
        local name = file:gsub("%.lua$", ""):gsub("/", ".")
        local edges = {}
        for line in (read("lua/" .. file) .. "\n"):gmatch("([^\n]*)\n") do
            -- Comments (the modules' usage lines) are no imports.
            local code = line:gsub("%-%-.*$", "")
            for dep in code:gmatch("require%s*%(?%s*[\"'](divgpu[%w_%.]*)[\"']") do
                if dep ~= "divgpu" then edges[#edges + 1] = dep end
            end
        end
        g[name] = edges
    end
    for _, m in ipairs(require "divgpu.methods.registry") do
        table.insert(g["divgpu.methods"], "divgpu.methods." .. m)
    end
    -- divgpu.kernel loads every descriptor in lua/divgpu/kernels/.
    for name in pairs(g) do
        if name:match("^divgpu%.kernels%.") then table.insert(g["divgpu.kernel"], name) end
    end
    return g
end

--- The first cycle found, as "a -> b -> a", or nil.
local function cycle(g)
    local state, stack = {}, {}
    local function visit(n)
        state[n] = "open"
        stack[#stack + 1] = n
        for _, d in ipairs(g[n] or {}) do
            if state[d] == "open" then
                local from
                for i, s in ipairs(stack) do if s == d then from = i end end
                return table.concat(stack, " -> ", from) .. " -> " .. d
            end
            if not state[d] then
                local found = visit(d)
                if found then return found end
            end
        end
        stack[#stack] = nil
        state[n] = "done"
    end
    local names = {}
    for n in pairs(g) do names[#names + 1] = n end
    table.sort(names)
    for _, n in ipairs(names) do
        if not state[n] then
            local found = visit(n)
            if found then return found end
        end
    end
end

describe("the Lua modules' imports", function()
    it("form no circle (the gemm descriptor is data; the registry's modules included)", function()
        local g = graph()
        assert(#g["divgpu.methods"] >= 3, "the registry's modules were not added")
        local found = cycle(g)
        assert(found == nil, "an import circle: " .. tostring(found))
        assert.are.same({}, g["divgpu.kernels.gemm"])
    end)

    it("twin: the cost model requiring the plan back is a circle, named", function()
        local g = graph()
        table.insert(g["divgpu.cost"], "divgpu.plan")
        local found = cycle(g)
        assert(found and found:find("divgpu.plan", 1, true) and found:find("divgpu.cost", 1, true), tostring(found))
    end)
end)
