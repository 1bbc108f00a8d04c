-- vk_compute: the seed scripts' small facade, a public module
-- (lua/divgpu/public.lua; docs/api.md#divgpuvk_compute-the-seed-scripts-facade).
-- It opens a device with its self-tests and makes the direct method's
-- jobs; the work itself is in divgpu.device (a context as the methods use
-- it) and divgpu.methods.direct (the direct method), both internal, and
-- whole runs are divgpu.driver's (divgpu.plan decides them).
--
--   local vk = require "divgpu.vk_compute"
--   local ctx = assert(vk.open{ device = 0 })          -- runs the arithmetic self-test once
--   local job = assert(vk.job(ctx, embeddings))        -- uploads the table, builds the pipeline
--   local batch = assert(job:batch(starts, ring))      -- per-batch buffers: centroids, masks, winners
--   batch:record(first_step, count); batch:submit(); local gpu_s = batch:wait()
--   local ring = batch:winners()                       -- u32 array [#starts][ring]
--
-- Misuse raises error(msg, 2); what the device cannot do returns nil, err.

local device = require "divgpu.device"
local direct = require "divgpu.methods.direct"

return {
    open = device.open,
    fma_mode = device.fma_mode,
    denormals_seen = device.denormals_seen,
    loop_cap = device.loop_cap,
    shader = device.shader,
    underflow_defines = device.underflow_defines,
    default_workgroup = device.default_workgroup,
    job = direct.job,
}
