-- The public Lua surface: the modules a user requires, in one place.
-- docs/api.md documents these (and the native module, `require "divgpu"`)
-- and nothing else; tests/api_doc_spec.lua checks every export of each
-- against the page. Every other lua/divgpu/ module is internal: its names
-- may change with the code that uses them (docs/architecture.md lists them).
-- A method's module (divgpu.methods.NAME) is reached through
-- divgpu.methods.get(NAME); the page documents the interface every method
-- implements, not each module's table.
--
--   for _, name in ipairs(require "divgpu.public") do print(name) end
return {
    "divgpu.vk_compute",  -- the seed scripts' facade: open a device, make the direct method's jobs
    "divgpu.driver",      -- whole runs: driver.run
    "divgpu.plan",        -- what a run will do, and why: plan.make, plan.lines
    "divgpu.methods",     -- the registry of methods
    "divgpu.data",        -- where the shipped table is
    "divgpu.stats",       -- run --stats files: write and read
    "divgpu.cli",         -- the command line as a function: cli.main
}
