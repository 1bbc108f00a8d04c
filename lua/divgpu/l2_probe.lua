-- Measures the L2 size of a device (Vulkan does not report it): sweeps the
-- working-set size of a read kernel (shaders/l2_probe.comp) and finds where
-- the bandwidth falls off.
--
--   local probe = require "divgpu.l2_probe"
--   local bytes, points = assert(probe.measure(ctx, { max_bytes = 512 * 2^20 }))
--
-- What the device refuses (memory, no timestamps) returns nil, err.

local divgpu = require "divgpu"
local failure = require "divgpu.failure"

local need, fail = failure.need, failure.fail
local floor, min, max, sqrt, ceil = math.floor, math.min, math.max, math.sqrt, math.ceil

local _M = {}

local MiB = 1048576

--- The bandwidth of reads over working sets from min_bytes to max_bytes.
local function sweep(ctx, opts)
    local info = ctx.info
    local max_bytes = min(opts.max_bytes or 512 * MiB, info.max_storage_buffer_range)
    local factor = opts.factor or 1.25
    local target = opts.target_bytes or 4 * 1024 * MiB
    local groups = min(opts.groups or 1024, info.max_workgroup_count)
    local pipeline = need(ctx:pipeline{ spirv = divgpu.shaders.get("l2_probe"), name = "l2_probe" })
    local data = need(ctx:buffer(max_bytes, "l2 probe data"))
    need(data:fill(0x9E3779B9))
    local sink = need(ctx:buffer(groups * 256 * 4, "l2 probe sink"))
    local group = need(ctx:bind(pipeline, { data, sink }))
    local rec = need(ctx:recorder())
    local points = {}
    local size = opts.min_bytes or MiB
    while size <= max_bytes do
        local words = floor(size / 16)
        local rounds = max(2, ceil(target / size))
        local shift = floor(words * 5 / 11) + 1
        -- Warm-up dispatch, then the timed one.
        need(rec:dispatch(group, { words, 1, 0 }, groups))
        need(rec:barrier())
        need(rec:submit())
        need(rec:wait())
        need(rec:dispatch(group, { words, rounds, shift % words }, groups))
        need(rec:submit())
        local seconds = need(rec:wait())
        if not seconds then fail("l2_probe: the device's queue has no timestamps") end
        points[#points + 1] = { bytes = words * 16, gbps = words * 16 * rounds / seconds / 1e9 }
        size = floor(size * factor)
    end
    return points
end

--- probe.measure(ctx, opts) -> l2_bytes, points ({bytes, gbps}...), or nil, err.
--- opts: min_bytes (1 MiB), max_bytes (512 MiB, capped by the buffer range),
--- factor (1.25), target_bytes read per point (4 GiB), groups (1024).
function _M.measure(ctx, opts)
    local points, err = failure.catch(sweep, ctx, opts or {})
    if not points then return nil, err end
    -- The knee: the largest size whose bandwidth is still at least the
    -- geometric mean of the best (cached) and the last (uncached) reading.
    local best, last = 0, points[#points].gbps
    for _, p in ipairs(points) do best = max(best, p.gbps) end
    local threshold = sqrt(best * last)
    local knee = points[1].bytes
    for _, p in ipairs(points) do
        if p.gbps >= threshold then knee = p.bytes end
    end
    return knee, points
end

return _M
