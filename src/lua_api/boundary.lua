-- The Lua side of the API's error rule (boundary.rs): every native function
-- and method is wrapped so that misuse raises one line at the caller's
-- position (`script.lua:12: array(): unknown dtype 'x'`), without mlua's
-- traceback; an expected failure already comes back as `nil, message`.
-- Run by the module's loader with the raw tables; returns the public
-- module, the wrapped methods of each userdata type, and the test hooks,
-- which `require "divgpu.testing"` gives (they are not on the module).
local raw, methods, testing = ...
local error, pcall, tostring, type, pairs = error, pcall, tostring, type, pairs

-- The names errors give each object's methods (docs/api.md's).
local OBJECTS = { LuaContext = "ctx", LuaBuffer = "buf", LuaPipeline = "pipeline", LuaRecorder = "rec", LuaUpload = "upload",
                  LuaSpirv = "spirv", LuaEmbeddings = "emb", LuaHostArray = "array", LuaCheckpoint = "cp",
                  LuaLock = "lock", LuaOutput = "out", LuaVerifier = "verifier" }

local function one_line(e, name)
    local line = tostring(e):match("^[^\n]*"):gsub("^runtime error: ", "")
    -- mlua's own conversion errors, and a method called on another type's
    -- object, do not say whose call it was.
    if line:match("^bad argument") or line:match("^error converting") or line:match("^called on something else") then
        line = name .. ": " .. line
    end
    return line
end

local function wrap(f, name)
    -- The tail call keeps the wrapper out of the stack: level 2 is its caller.
    local function settle(ok, ...)
        if ok then return ... end
        error(one_line((...), name), 2)
    end
    return function(...) return settle(pcall(f, ...)) end
end

local function wrapped(t, prefix, sep)
    local out = {}
    for k, v in pairs(t) do
        if type(v) == "function" then
            out[k] = wrap(v, prefix .. sep .. k)
        elseif type(v) == "table" then
            out[k] = wrapped(v, prefix .. "." .. k, ".")
        else
            out[k] = v
        end
    end
    return out
end

local public = wrapped(raw, "divgpu", ".")
local hooks = wrapped(testing, "divgpu.testing", ".")
local object_methods = {}
for type_name, list in pairs(methods) do
    object_methods[type_name] = wrapped(list, OBJECTS[type_name] or type_name, ":")
end
return public, object_methods, hooks
