-- luarocks make: builds this checkout with its Makefile (cargo; the build
-- folder is $CARGO_TARGET_DIR, default ~/.cache/divgpu/target, so shaderc is
-- not rebuilt) and installs it with `make install` into the rock folder,
-- from which luarocks deploys lib/lua/5.1/divgpu.so, share/lua/5.1/divgpu/
-- and bin/divgpu into the tree. The poems stay in the rock folder
-- (lib/luarocks/rocks-5.1/divgpu/scm-1/share/divgpu), recorded in
-- divgpu/installed.lua. Debian 12's luarocks defaults to Lua 5.2 when lua5.2
-- is its interpreter; divgpu is a LuaJIT (5.1) module:
--   luarocks --lua-version=5.1 make --tree TREE divgpu-scm-1.rockspec
rockspec_format = "3.0"
package = "divgpu"
version = "scm-1"
source = {
   -- Not published: `luarocks make` builds the checkout it runs in and never
   -- fetches this url.
   url = "git+file://.",
}
description = {
   summary = "Diversity sequences on the GPU through Vulkan compute, scripted from LuaJIT",
   detailed = [[
      Orders a table of embeddings into diversity sequences on any Vulkan
      device (GPU or Mesa's lavapipe), bit-for-bit the same everywhere.
      A native module (require "divgpu"), the Lua driver (divgpu.*) and the
      divgpu command.
   ]],
   license = "MIT",
}
-- What the Lua side requires: LuaJIT 2.1 (the language is Lua 5.1; the
-- native module is built by mlua for LuaJIT 2.1, and LuaRocks provides a
-- `luajit` rock of its interpreter's version when that is LuaJIT, from
-- rockspec format 3.0), argparse (the CLI's grammar: command_target needs
-- 0.6) and dkjson (JSON lines, bench --json). Installed from Debian (`make
-- deps`: lua-argparse, lua-dkjson), they are files LuaRocks does not see:
-- tell it with rocks_provided in its config (docs/install.md). Also needed,
-- and no rocks: the Vulkan loader and a Vulkan driver at run time, cargo >=
-- 1.80 (rustup) and cmake, ninja, g++ to build; `make build` installs none.
dependencies = {
   "lua == 5.1",
   "luajit >= 2.1.0-beta3",
   "argparse >= 0.6",
   "dkjson >= 2.5",
}
-- `luarocks test`: every test, through the Makefile (busted specs on
-- lavapipe with the validation layer, the shell tests).
test_dependencies = {
   "busted >= 2.0",
}
test = {
   type = "command",
   command = "make test",
}
-- luarocks warns that CFLAGS is not passed in build_variables: cargo does
-- not read it, and a changed compiler environment could make cargo rebuild.
build = {
   type = "make",
   build_target = "build",
   install_target = "install",
   install_variables = {
      PREFIX = "$(PREFIX)",
      LUADIR = "$(LUADIR)",
      LIBDIR = "$(LIBDIR)",
      BINDIR = "$(BINDIR)",
   },
}
