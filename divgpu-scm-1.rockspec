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
-- Also needed, from Debian (the Makefile's deps target installs them):
-- luajit, lua-argparse, lua-dkjson, libvulkan1 and a Vulkan driver; cargo
-- >= 1.80 (rustup) to build.
dependencies = {
   "lua ~> 5.1",
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
