-- Runs busted under LuaJIT: /usr/bin/busted runs under `lua` (5.1), but the
-- native module is built for LuaJIT.  Usage, from anywhere:
--   luajit tests/run_busted.lua [busted args]
-- Tests run from the repository root (busted's --directory), so .busted and
-- its relative lpath/cpath apply; relative path arguments are taken from there.

-- Repository root = parent of this file's directory.
local script = arg and arg[0] or "tests/run_busted.lua"
local dir = script:match("^(.*)[/\\][^/\\]*$") or "."
local root = dir .. "/.."

-- Respect an explicit -C/--directory; otherwise start at the repository root.
local has_dir = false
for _, a in ipairs(arg) do
  if a == "-C" or a:match("^%-C.") or a:match("^%-%-directory") then
    has_dir = true
  end
end
if not has_dir then
  table.insert(arg, 1, "--directory=" .. root)
end

-- Same as /usr/bin/busted.
require "busted.runner" { standalone = false }
