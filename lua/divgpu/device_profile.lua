-- device_profile: facts of device families that the methods plan by, kept
-- in one place (the device's own facts, its self-tests and caches, are
-- divgpu.device's; its measured rates divgpu.rates'; its L2 divgpu.tiles').
-- Pure data and functions of a context's info; no device is opened.
--
--   local profile = require "divgpu.device_profile"
--   local slots = profile.register_slots(ctx.info.type, 256)  -- f64 slots a thread may keep in registers
--   if profile.reaches_blocks(ctx.info) then ... end            -- a table kept in blocks by address

local floor, min, max = math.floor, math.min, math.max

local _M = {}

-- The register file of a GPU compute unit: NVIDIA's parts have 65,536
-- 32-bit registers an SM, at most 255 a thread. gram.comp's register page
-- costs three registers a slot (the f64 and its G' load issued ahead), the
-- rest of the kernel about 64, and holds 40 slots at most: at 512 threads
-- that is 21 (with 40 the page did not fit 128 registers, and on the H200,
-- driver 580, the spilled kernel chose other items than the contract:
-- 2,676 of 4,096 sequences identical at 65,536 items, 0 of 16 at 20,000;
-- 40 slots at 256 threads and 17 at 512 were identical: bench/RESULTS.md).
_M.GPU_REGISTERS = { file = 65536, per_thread_max = 255, kernel_other = 64, per_slot = 3, slots_max = 40 }

-- A CPU device compiles the unrolled page into vector code, where a small
-- page keeps that fast.
_M.CPU_SLOTS_MAX = 8

--- The register page's slots a thread may hold at most, on a device of
--- `kind` (info.type: "cpu", or a GPU's) with `wg` threads a workgroup.
function _M.register_slots(kind, wg)
    if kind == "cpu" then return _M.CPU_SLOTS_MAX end
    local r = _M.GPU_REGISTERS
    local budget = min(r.per_thread_max, floor(r.file / wg))
    return max(1, min(r.slots_max, floor((budget - r.kernel_other) / r.per_slot)))
end

--- Whether the device reaches a table kept in blocks (by device address,
--- with 64-bit integers).
function _M.reaches_blocks(info)
    return info.buffer_device_address == true and info.int64 == true
end

return _M
