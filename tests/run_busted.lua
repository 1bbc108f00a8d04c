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

-- Same as /usr/bin/busted. With failures it exits non-zero itself; without,
-- it returns here.
require "busted.runner" { standalone = false }

-- Every validation-layer message of the run fails it, from whichever context
-- (a spec's own, the driver's, a collected one): the native module keeps
-- them all, except those of contexts opened with echo_validation = false
-- (deliberate misuse). Contexts are collected first, so messages from their
-- teardown count too.
-- busted insulates each spec file (its package.loaded entries are dropped
-- afterwards), so the module is required again: the same library, whose
-- message list is process-wide.
local loaded, divgpu = pcall(require, "divgpu")
if loaded then
  local helpers = package.loaded["tests.helpers"]
  if helpers then helpers.release() end
  collectgarbage()
  collectgarbage()
  local messages = require("divgpu.testing").validation_messages()
  if #messages > 0 then
    io.stderr:write(#messages, " validation-layer message(s) during the run:\n", table.concat(messages, "\n"), "\n")
    os.exit(1)
  end
end
