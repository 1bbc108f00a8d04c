-- docs/api.md documents every function the module exports, with its
-- signature and its error behaviour, and documents nothing that does not
-- exist. The exports are read at run time: the native module's table and
-- its sub-tables, the test hooks (`require "divgpu.testing"`, of the shipped
-- build and of the fault-injection build), every public Lua module's table
-- (lua/divgpu/public.lua: the rest are internal), the native objects' methods (as the
-- module registered them) and their fields, which Lua cannot list (mlua
-- hides their metatables), as src/lua_api/*.rs registers them; those are
-- then confirmed on real objects. The twins: an undocumented export injected
-- into the module, an entry dropped from the page, an entry for nothing, an
-- entry without its Errors line; each must be reported.
local divgpu = require "divgpu"
local testing = require "divgpu.testing"
local h = require "tests.helpers"

local DOC = "docs/api.md"
local FAULT_BUILD = "build/fault/divgpu.so"

local function read(path)
    local f = assert(io.open(path, "rb"), path .. ": cannot read")
    local text = f:read("*a")
    f:close()
    return text
end

local function lines_of(command)
    local p = assert(io.popen(command))
    local out = {}
    for line in p:lines() do out[#out + 1] = line end
    p:close()
    return out
end

--- The page's entries: name -> { body = text, line = n }, and the names in order.
local function entries_of(text)
    local entries, order, current = {}, {}, nil
    local n = 0
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
        n = n + 1
        local name = line:match("^###%s+`([^`]+)`%s*$")
        if name then
            current = { body = {}, line = n, name = name }
            if entries[name] then current.duplicate = entries[name].line end
            entries[name] = current
            order[#order + 1] = name
        elseif line:match("^#") then
            current = nil
        elseif current then
            current.body[#current.body + 1] = line
        end
    end
    for _, e in pairs(entries) do e.body = table.concat(e.body, "\n") end
    return entries, order
end

--- The Objects table: native type -> the name the page gives its objects.
local function objects_of(text)
    local objects = {}
    local section = text:match("\n## Objects\n(.-)\n## ")
    for name, native in (section or ""):gmatch("\n| `([%w_]+)` |[^\n]*| `([%w_]+)` |") do
        objects[native] = name
    end
    return objects
end

local function plain_find(s, what) return s:find(what, 1, true) ~= nil end

local function add(exports, name, kind, extra)
    local e = extra or {}
    e.name, e.kind = name, kind
    exports[#exports + 1] = e
end

--- The exports of one native table (the module, a sub-table, the test
--- hooks) under `prefix`: functions, and values; a sub-table with functions
--- is listed in turn. `known` (the shipped build's) marks the others fault_only.
local function table_exports(exports, prefix, t, known)
    for key, value in pairs(t) do
        local name = prefix .. "." .. key
        local other = known and known[key]
        if type(value) == "table" and not value[1] and next(value) ~= nil then
            table_exports(exports, name, value, known and (type(other) == "table" and other or {}) or nil)
        elseif not known or other == nil then
            add(exports, name, type(value) == "function" and "function" or "value", { fault_only = known ~= nil })
        end
    end
end

--- The native module's exports and its test hooks: the shipped build's, and
--- those only the fault build has.
local function native_exports(exports, module, fault)
    table_exports(exports, "divgpu", module)
    table_exports(exports, "divgpu.testing", testing)
    table_exports(exports, "divgpu", fault.module, module)
    table_exports(exports, "divgpu.testing", fault.testing, testing)
end

--- A Lua module's exports; a table of functions (a class) exports them too.
local function module_exports(exports, name, module)
    for key, value in pairs(module) do
        local qualified = "divgpu." .. name .. "." .. key
        if type(value) == "function" then
            add(exports, qualified, "function")
        else
            add(exports, qualified, "value")
            if type(value) == "table" then
                for fname, f in pairs(value) do
                    if type(f) == "function" and not tostring(fname):match("^__") then
                        add(exports, qualified .. ":" .. fname, "function")
                    end
                end
            end
        end
    end
end

--- The public Lua modules ("driver", "methods"), as lua/divgpu/public.lua
--- declares them; every other lua/divgpu/ module is internal and out of
--- the page (docs/api.md#internal-modules).
local function lua_module_names()
    local names = {}
    for i, name in ipairs(require "divgpu.public") do names[i] = name:match("^divgpu%.(.+)$") end
    assert(#names > 0, "lua/divgpu/public.lua lists no modules")
    return names
end

--- The methods the module registered (testing.userdata_methods) and the
--- fields src/lua_api/*.rs registers, by native type:
--- { Type = { { member, "method" | "field" }, ... } }.
local function userdata_members()
    local types = {}
    for native, names in pairs(testing.userdata_methods()) do
        local members = {}
        for _, name in ipairs(names) do members[#members + 1] = { name, "method" } end
        types[native] = members
    end
    for _, file in ipairs(lines_of("ls src/lua_api/*.rs")) do
        local text = read(file)
        -- Each `impl UserData for T` block runs to the next one (or the file's end).
        local starts = {}
        for pos, native in text:gmatch("()impl UserData for ([%w_]+)") do starts[#starts + 1] = { pos, native } end
        for i, s in ipairs(starts) do
            local block = text:sub(s[1], starts[i + 1] and starts[i + 1][1] - 1 or #text)
            local members = types[s[2]] or {}
            for member in block:gmatch("add_field_method_get%(%s*\"([%w_]+)\"") do members[#members + 1] = { member, "field" } end
            types[s[2]] = members
        end
    end
    return types
end

--- Every export, each { name, kind, fault_only }.
local function all_exports(module, fault_module, doc_text)
    local exports, problems = {}, {}
    native_exports(exports, module, fault_module)
    for _, name in ipairs(lua_module_names()) do
        module_exports(exports, name, require("divgpu." .. name))
    end
    local objects = objects_of(doc_text)
    for native, members in pairs(userdata_members()) do
        local object = objects[native]
        if not object then
            problems[#problems + 1] = string.format("native type %s (src/lua_api) has no row in the Objects table of %s", native, DOC)
        else
            for _, m in ipairs(members) do
                add(exports, object .. (m[2] == "method" and ":" or ".") .. m[1], m[2] == "method" and "function" or "value")
            end
        end
    end
    return exports, problems
end

--- What is wrong between the page's text and the exports: a list of lines.
local function check(doc_text, exports, problems)
    problems = problems or {}
    local entries, order = entries_of(doc_text)
    local exported = {}
    for _, e in ipairs(exports) do
        exported[e.name] = e
        local entry = entries[e.name]
        if not entry then
            problems[#problems + 1] = e.name .. " is exported but has no entry in " .. DOC
        else
            local body = entry.body
            local callable = e.kind == "function"
            if callable and not (plain_find(body, "`" .. e.name .. "(") or plain_find(body, "`" .. e.name .. "{")) then
                problems[#problems + 1] = string.format("%s:%d: %s: no signature (a code span `%s(...)`)", DOC, entry.line, e.name, e.name)
            elseif not callable and not plain_find(body, "`" .. e.name) then
                problems[#problems + 1] = string.format("%s:%d: %s: no signature (a code span `%s`)", DOC, entry.line, e.name, e.name)
            end
            if callable and not body:match("\nErrors:") and not body:match("^Errors:") then
                problems[#problems + 1] = string.format("%s:%d: %s: no 'Errors:' line", DOC, entry.line, e.name)
            end
            if e.fault_only and not plain_find(body, "fault-injection build") then
                problems[#problems + 1] = string.format("%s:%d: %s: exists only in the fault-injection build and must say so", DOC, entry.line, e.name)
            end
        end
    end
    for _, name in ipairs(order) do
        local entry = entries[name]
        if not exported[name] then
            problems[#problems + 1] = string.format("%s:%d: %s is documented but not exported", DOC, entry.line, name)
        end
        if entry.duplicate then
            problems[#problems + 1] = string.format("%s:%d: %s is documented twice (also line %d)", DOC, entry.line, name, entry.duplicate)
        end
    end
    return problems
end

--- The fault build's module and its test hooks (its two entry points).
local function fault_module()
    local open, err = package.loadlib(FAULT_BUILD, "luaopen_divgpu")
    assert(open, FAULT_BUILD .. " cannot be loaded (make build/fault/divgpu.so builds it): " .. tostring(err))
    local open_hooks = assert(package.loadlib(FAULT_BUILD, "luaopen_divgpu_testing"))
    return { module = open(), testing = open_hooks() }
end

local function report(problems)
    return #problems .. " problem(s):\n  " .. table.concat(problems, "\n  ")
end

describe("docs/api.md", function()
    local doc_text = read(DOC)
    local fault = fault_module()

    it("documents every export with its signature and errors, and nothing else", function()
        local exports, problems = all_exports(divgpu, fault, doc_text)
        assert(#exports > 100, "only " .. #exports .. " exports found: the listing is broken")
        problems = check(doc_text, exports, problems)
        assert(#problems == 0, report(problems))
    end)

    it("twin: an undocumented export injected into the module is reported", function()
        divgpu.undocumented_twin = function() end
        local ok, exports = pcall(all_exports, divgpu, fault, doc_text)
        divgpu.undocumented_twin = nil
        assert(ok, exports)
        local problems = table.concat(check(doc_text, exports), "\n")
        assert(plain_find(problems, "divgpu.undocumented_twin is exported but has no entry"), problems)
    end)

    it("twin: an entry dropped, an entry for nothing, an entry without its Errors line", function()
        local exports = all_exports(divgpu, fault, doc_text)
        local dropped = doc_text:gsub("\n### `divgpu%.open`\n", "\n### `divgpu.opened`\n", 1)
        local problems = table.concat(check(dropped, exports), "\n")
        assert(plain_find(problems, "divgpu.open is exported but has no entry"), problems)
        assert(plain_find(problems, "divgpu.opened is documented but not exported"), problems)
        local no_errors = doc_text:gsub("Errors: raises on a bad option value", "Raises on a bad option value", 1)
        problems = table.concat(check(no_errors, exports), "\n")
        assert(plain_find(problems, "divgpu.open: no 'Errors:' line"), problems)
        local no_row = doc_text:gsub("\n| `cp` |[^\n]*", "", 1)
        local _, missing = all_exports(divgpu, fault, no_row)
        assert(plain_find(table.concat(missing, "\n"), "LuaCheckpoint"), table.concat(missing, "\n"))
    end)

    it("every native method and field the source registers exists on a real object", function()
        local ctx = h.ctx()
        local buf = ctx:buffer(16, "api doc probe")
        local pipeline = ctx:pipeline{ spirv = divgpu.shaders.get("loop_probe"), name = "api doc probe" }
        local emb = divgpu.synth{ n = 8, dim = 2 }
        local starts = divgpu.array("u32", { 0 })
        local dir = h.tmpdir()
        -- A stale lock (this host, a pid that cannot be running), so that the
        -- lock taken over below has its note.
        local host = io.popen("hostname"):read("*l")
        local f = assert(io.open(dir .. "/locked.json.lock", "w"))
        f:write(string.format('{"host": "%s", "pid": 4194305, "started": 0}\n', host))
        f:close()
        local objects = {
            LuaContext = ctx, LuaBuffer = buf, LuaPipeline = pipeline, LuaRecorder = ctx:recorder(),
            LuaUpload = select(2, ctx:begin_upload(divgpu.array("u32", { 1 }))),
            LuaPending = ctx:begin_buffers{ { 16, "api doc probe (pending)" } },
            LuaBindGroup = ctx:bind(pipeline, { buf }), LuaSpirv = divgpu.shaders.get("baseline"), LuaEmbeddings = emb,
            LuaHostArray = starts,
            LuaCheckpoint = divgpu.files.checkpoint(dir .. "/out.json", { table = emb, length = 2, starts = starts }),
            LuaLock = divgpu.files.lock(dir .. "/locked.json"),
            LuaOutput = divgpu.files.output(dir .. "/written.txt"),
        }
        assert(divgpu.files.write_cache(dir .. "/v.json", { table = emb, length = 2, sequences = divgpu.mirror(emb, starts, 2) }))
        objects.LuaVerifier = assert(divgpu.files.verifier(dir .. "/v.json", emb, { sample = 1, seed = 1 }))
        local missing = {}
        for native, members in pairs(userdata_members()) do
            local object = objects[native]
            if not object then
                missing[#missing + 1] = native .. ": no object of this type in this test (add one above)"
            else
                for _, m in ipairs(members) do
                    local ok, value = pcall(function() return object[m[1]] end)
                    local want = m[2] == "method" and "function"
                    if not ok or value == nil or (want and type(value) ~= want) then
                        missing[#missing + 1] = native .. "." .. m[1] .. " (" .. m[2] .. ") is not on the object"
                    end
                end
            end
        end
        objects.LuaOutput:abort()
        objects.LuaLock:release()
        objects.LuaCheckpoint:close()
        os.execute("rm -rf '" .. dir .. "'")
        assert(#missing == 0, table.concat(missing, "\n"))
    end)
end)
