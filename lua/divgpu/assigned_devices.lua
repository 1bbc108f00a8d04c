-- The GPUs a job scheduler assigned: Vulkan ignores CUDA_VISIBLE_DEVICES, so
-- a Slurm or Kubernetes job given GPU 3 of a node would otherwise run on
-- device 0. When CUDA_VISIBLE_DEVICES (or Slurm's SLURM_STEP_GPUS, or
-- GPU_DEVICE_ORDINAL) is set, the CLI's --device defaults to the devices it
-- names: a UUID (GPU-8a5c1f2e-...) is matched against each Vulkan device's
-- deviceUUID, which NVIDIA's driver makes the same as CUDA's. An index list
-- cannot be matched honestly (CUDA orders devices fastest first, or by PCI
-- bus, and Vulkan's order is neither's by promise): its indices are used as
-- Vulkan indices, and the line the run prints says so.
--
--   local assigned = require "divgpu.assigned_devices"
--   local value, line = assigned.device_option(os.getenv, divgpu.devices{})
--   -- value: a --device value ("2,3"), or nil when no variable is set
--
-- A UUID that matches no device, or an empty assignment, fails
-- (divgpu.failure) naming the variable.

local failure = require "divgpu.failure"

local fail = failure.fail
local ipairs, concat, string_format = ipairs, table.concat, string.format

local _M = {}

-- In the order they are read: the first one set is the assignment.
_M.VARIABLES = { "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "GPU_DEVICE_ORDINAL" }

--- A CUDA UUID ("GPU-6d657361-3232-...", any case) as Vulkan's hex digits,
--- or nil when `entry` is not one.
local function uuid_hex(entry)
    local body = entry:match("^[Gg][Pp][Uu]%-(.+)$")
    if not body then return nil end
    return (body:gsub("%-", "")):lower()
end

--- The index of the one device whose UUID starts with `hex` (CUDA accepts a
--- unique prefix); fails naming the variable when none or several match.
local function match_uuid(variable, entry, hex, devices)
    local found = {}
    for _, d in ipairs(devices) do
        if hex ~= "" and d.device_uuid:sub(1, #hex) == hex then found[#found + 1] = d end
    end
    if #found == 1 then return found[1].index end
    local known = {}
    for _, d in ipairs(devices) do known[#known + 1] = string_format("%d: %s", d.index, d.device_uuid) end
    fail(string_format("%s names %s, which matches %s Vulkan device (their UUIDs: %s); give --device to choose",
        variable, entry, #found == 0 and "no" or "more than one", concat(known, ", ")))
end

--- The entries of an assignment: UUIDs matched to device indices, index
--- lists taken as Vulkan indices. Returns the indices and whether any entry
--- was an index.
local function resolve(variable, value, devices)
    local indices, by_index = {}, false
    for entry in value:gmatch("[^,]+") do
        entry = entry:match("^%s*(.-)%s*$")
        local hex = uuid_hex(entry)
        if hex then
            indices[#indices + 1] = match_uuid(variable, entry, hex, devices)
        elseif entry:match("^%d+$") then
            indices[#indices + 1], by_index = tonumber(entry), true
        else
            -- MIG-..., NoDevFiles, -1: nothing a Vulkan device can be matched with.
            fail(string_format("%s=%s: '%s' is neither a GPU UUID (GPU-...) nor an index; give --device to choose",
                variable, value, entry))
        end
    end
    if #indices == 0 then
        fail(string_format("%s is set but names no GPU: the scheduler assigned none; give --device to choose", variable))
    end
    return indices, by_index
end

--- The --device value the scheduler's variable gives and the line the run
--- prints about it; nil when none is set. getenv: os.getenv or a stand-in;
--- devices: divgpu.devices{}.
function _M.device_option(getenv, devices)
    for _, variable in ipairs(_M.VARIABLES) do
        local value = getenv(variable)
        if value ~= nil then
            local indices, by_index = resolve(variable, value, devices)
            local list = concat(indices, ",")
            local line = string_format("devices %s from %s=%s", list, variable, value)
            if by_index then
                line = line .. " (an index list cannot be matched to CUDA's order: taken as Vulkan indices; "
                    .. "GPU UUIDs are matched exactly)"
            else
                line = line .. " (matched by UUID)"
            end
            return list, line
        end
    end
    return nil
end

return _M
