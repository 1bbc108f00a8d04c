-- device_profile: the one profile of a context's device that every plan
-- asks, kept per context. Its facts known at open come from ctx:profile()
-- (src/gpu/profile.rs: the limits, the self-test's fma and denormals, the
-- loop cap, the register budget), made once when device.open opens it; the
-- facts measured or kept in Lua are attached to the same table the first
-- time they are asked: `rates` (divgpu.rates: the cache file, a
-- measurement or the table of known devices) and `l2` (divgpu.tiles' table
-- of known devices, or divgpu.l2_probe's measurement).
--
--   local device_profile = require "divgpu.device_profile"
--   local p = assert(device_profile.profile(ctx))   -- p.subgroup_size, p.loop_cap, p.registers, ...
--   local r = device_profile.rates(ctx)             -- p.rates, filled once
--   local bytes, source = device_profile.l2(ctx, { l2_bytes =, measure_l2 = })
--
-- What the device cannot do returns nil, err (profile) or is thrown as a
-- divgpu.failure (rates, l2: called inside a plan); misuse raises error(msg, 2).

local failure = require "divgpu.failure"
local rates = require "divgpu.rates"
local tiles = require "divgpu.tiles"
local l2_probe = require "divgpu.l2_probe"

local need, catch = failure.need, failure.catch
local setmetatable, type, error = setmetatable, type, error

local _M = {}

-- The profile of each context (its values never refer to the context, so
-- the weak key lets it go), weakly keyed.
local profiles = setmetatable({}, { __mode = "k" })

local function made(ctx)
    if type(ctx) ~= "userdata" then error("device_profile: a device's context is required", 3) end
    local p = profiles[ctx]
    if not p then
        p = need(ctx:profile())
        profiles[ctx] = p
    end
    return p
end

--- The profile of ctx's device (docs/api.md#device-profile): the same table
--- for every call on ctx; nil, err when the device fails its self-test.
function _M.profile(ctx)
    if type(ctx) ~= "userdata" then error("device_profile.profile: a device's context is required", 2) end
    return catch(made, ctx)
end

--- ctx's rates for the cost model (divgpu.rates.of, looked up once per
--- context and kept as the profile's `rates`).
function _M.rates(ctx)
    local p = made(ctx)
    p.rates = p.rates or rates.of(ctx)
    return p.rates
end

--- The L2 size to plan ctx's tiles by: bytes, and where it comes from (a
--- sentence; bytes nil where nothing is known: the sentence says what to
--- pass). `asked.l2_bytes` (the user's) wins; `asked.measure_l2` measures
--- it (once per context: the profile's `l2_measured`); else the table of
--- known devices, kept as the profile's `l2` ({ bytes, source }).
function _M.l2(ctx, asked)
    local p = made(ctx)
    asked = asked or {}
    if asked.l2_bytes then return tiles.l2_bytes(ctx.info, { l2_bytes = asked.l2_bytes }) end
    if asked.measure_l2 then
        p.l2_measured = p.l2_measured or need(l2_probe.measure(ctx))
        return tiles.l2_bytes(ctx.info, { measured = p.l2_measured })
    end
    if not p.l2 then
        local bytes, source = tiles.l2_bytes(ctx.info, {})
        p.l2 = { bytes = bytes, source = source }
    end
    return p.l2.bytes, p.l2.source
end

--- Whether a device (a profile, or a context's info: the same fields)
--- reaches a table kept in blocks (by device address, with 64-bit integers).
function _M.reaches_blocks(p)
    return p.buffer_device_address == true and p.int64 == true
end

return _M
