-- rates: a device's rates for the cost model (divgpu.cost), measured once per
-- device and driver with shaders/rates.comp and kept in the user's cache
-- folder ($XDG_CACHE_HOME/divgpu/rates, else ~/.cache/divgpu/rates), one small
-- JSON file per device UUID and driver version. Where that folder cannot be
-- written (or nothing can be measured: no timestamps), a table of known
-- devices stands in, and r.source says so.
--
--   local rates = require "divgpu.rates"
--   local r = rates.of(ctx)   -- (the plans ask divgpu.device_profile.rates(ctx)) { f32_chain =, f64_fma =, copy =, dispatch =, int8_mac = (known devices), source = }
--
-- Expected failures are not raised: a cache that cannot be read or written
-- is measured again; misuse (no context) raises error(msg, 2).

local json = require "dkjson"

local string_format, type, tonumber, tostring = string.format, type, tonumber, tostring
local max = math.max

local _M = {}

local MODE_CHAIN, MODE_F64, MODE_COPY = 0, 1, 2
local CHAINS, UNROLL = 8, 8
-- What a measurement is; a cached file of another is measured again.
-- 2 (2026-12-05): a CPU device's kernels run for milliseconds, not the tenth
-- of one that its dispatch alone costs (measurement 1's lavapipe figures were
-- mostly that overhead, and varied 2x from one process to the next).
local MEASUREMENT = 2
-- Sizes a CPU device (lavapipe) gets, each kernel a few milliseconds there:
-- on the 2-core development machine the chain 2.6-2.7e9 fmas/s, f64 3.1-3.4e10,
-- copy 5.9-6.3e9 bytes/s in six fresh processes, against 4e8-9.3e8 for the
-- chain at a 512th of the work. The best of REPEATS after a first, warming, run.
local CPU_SIZES = { chain_iterations = 2048, f64_iterations = 8192, words4 = 2 ^ 20, groups = 8 }
local GPU_SIZES = { chain_iterations = 512, f64_iterations = 512, words4 = 2 ^ 25, groups = 4096 }
local REPEATS = 5

-- Stand-ins where nothing can be measured: figures measured on the devices
-- named (bench/RESULTS.md) and a conservative default.
_M.KNOWN = {
    -- int8_mac: the tensor cores' int8 16 x 16 x 32 rate from registers (1,278.7 TOPS,
    -- 2026-12-03; not measured here: shaders/rates.comp has no cooperative matrices).
    ["NVIDIA H200"] = { f32_chain = 32.0e12, f64_fma = 16.7e12, copy = 4.0e12, dispatch = 4e-6, int8_mac = 6.39e14 },
    -- lavapipe on the 2-core development machine (rates.comp, 2026-12-05).
    llvmpipe = { f32_chain = 2.7e9, f64_fma = 3.2e10, copy = 6.0e9, dispatch = 5.2e-5 },
    default = { f32_chain = 1.0e12, f64_fma = 1.0e11, copy = 2.0e11, dispatch = 2e-5 },
}

local function cache_folder()
    local base = os.getenv("XDG_CACHE_HOME")
    if not base or base == "" then
        local home = os.getenv("HOME")
        if not home or home == "" then return nil end
        base = home .. "/.cache"
    end
    return base .. "/divgpu/rates"
end

--- The folder the measured rates are kept in ($XDG_CACHE_HOME or ~/.cache,
--- then divgpu/rates), or nil without a home: the CPU method's rates go there too.
_M.cache_folder = cache_folder

local function cache_path(info)
    local folder = cache_folder()
    if not folder then return nil end
    return string_format("%s/%s-%s.json", folder, info.device_uuid, tostring(info.driver_version)), folder
end

local function read_cached(path)
    local f = path and io.open(path, "r")
    if not f then return nil end
    local text = f:read("*a")
    f:close()
    local r = json.decode(text)
    if type(r) ~= "table" then return nil end
    -- Figures of an older measurement are measured again (the cost model's
    -- efficiencies are calibrated against this one's).
    if r.measurement ~= MEASUREMENT then return nil end
    for _, k in ipairs{ "f32_chain", "f64_fma", "copy", "dispatch" } do
        if type(r[k]) ~= "number" or not (r[k] > 0) then return nil end
    end
    return r
end

-- Through divgpu's one safe write path; any failure leaves the figures uncached.
local function write_cached(path, r)
    local out = require("divgpu").files.output(path)
    if not out then return false end
    return out:write(json.encode(r)) and out:commit() and true or false
end

-- What shaders/rates.comp declares (checked against its SPIR-V when the
-- pipeline is made, as a kernel descriptor is).
local INTERFACE = { bindings = { "out", "src", "dst" }, push = { "mode", "iterations", "words4" } }

local function measure(ctx)
    local device = require "divgpu.device"
    local need = require("divgpu.failure").need
    local info = ctx.info
    local size = info.type == "cpu" and CPU_SIZES or GPU_SIZES
    local groups, words4 = size.groups, size.words4
    -- The device's switches as the kernels get them (fma emulated on lavapipe): the rates are those of the chain they run.
    local spirv = need(device.shader(ctx, "rates"))
    local pipeline = need(ctx:pipeline{ spirv = spirv, name = "rates", interface = INTERFACE,
                                        specialization = device.specialization_of(spirv) })
    local out = need(ctx:buffer(groups * 64 * 8, "rates out"))
    local src, dst = need(ctx:buffer(words4 * 16, "rates src")), need(ctx:buffer(words4 * 16, "rates dst"))
    need(src:fill(0))
    local group = need(ctx:bind(pipeline, { out, src, dst }))
    local function timed(mode, iterations, count)
        local best = math.huge
        for r = 0, REPEATS do
            local rec = need(ctx:recorder())
            for _ = 1, count or 1 do need(rec:dispatch(group, { mode, iterations, words4 }, groups)) end
            need(rec:submit())
            local t = need(rec:wait())
            if r > 0 then best = math.min(best, t) end
        end
        return best
    end
    local fmas = function(iterations) return groups * 64 * iterations * UNROLL * CHAINS end
    return {
        f32_chain = fmas(size.chain_iterations) / timed(MODE_CHAIN, size.chain_iterations),
        f64_fma = fmas(size.f64_iterations) / timed(MODE_F64, size.f64_iterations),
        copy = 2 * words4 * 16 / timed(MODE_COPY, 0),
        -- 32 empty dispatches in one submission, each as the copy of nothing.
        dispatch = timed(MODE_CHAIN, 0, 32) / 32,
        device = info.name, driver_version = info.driver_version, fma = device.fma_mode(ctx),
        measurement = MEASUREMENT,
    }
end

--- Measures the rates on ctx: each kernel sized to run for a few
--- milliseconds on a GPU (a CPU device gets small sizes). The figures, or
--- nil, err (no timestamps; what the device refuses).
function _M.measure(ctx)
    if not ctx.info.timestamps then return nil, "the device has no timestamps" end
    return require("divgpu.failure").catch(measure, ctx)
end

--- True when `folder` exists (made if missing) and a file can be created in it.
local function writable(folder)
    if not folder then return false end
    os.execute(string_format("mkdir -p '%s' 2>/dev/null", folder))
    local probe = string_format("%s/.probe-%d", folder, math.random(1, 2 ^ 30))
    local f = io.open(probe, "w")
    if not f then return false end
    f:close()
    os.remove(probe)
    return true
end

local function table_rates(info, why)
    local known = _M.KNOWN[info.name] or (info.name:find("llvmpipe", 1, true) and _M.KNOWN.llvmpipe) or _M.KNOWN.default
    local r = {}
    for k, v in pairs(known) do r[k] = v end
    r.source = "the table of known devices (" .. why .. ")"
    return r
end

--- The rates of ctx's device: the cache file's; else measured and cached,
--- where the cache folder can be written; else the table's. r.source says
--- which. Looked up on every call: divgpu.device_profile.rates(ctx) keeps
--- them as the device profile's `rates`.
function _M.of(ctx)
    if type(ctx) ~= "userdata" then error("rates.of: a context is required", 2) end
    local r
    local info = ctx.info
    local path, folder = cache_path(info)
    r = read_cached(path)
    if r then
        r.source = "the cache " .. path
    elseif not writable(folder) then
        r = table_rates(info, "the cache folder " .. tostring(folder) .. " cannot be written")
    else
        local measured, why = _M.measure(ctx)
        if measured and write_cached(path, measured) then
            r = measured
            r.source = "a measurement, kept in " .. path
        else
            r = table_rates(info, measured and "the cache could not be written" or tostring(why))
        end
    end
    -- The tensor cores' rate is not measured (rates.comp has none): the table's, where it knows the device.
    local known = _M.KNOWN[info.name]
    if not r.int8_mac and known and known.int8_mac and info.cooperative_matrix then
        r.int8_mac = known.int8_mac
        r.source = r.source .. "; int8 from the table of known devices"
    end
    -- What the cost model reads beside the rates: a CPU device (lavapipe)
    -- achieves other fractions of them than a GPU (divgpu.cost.CPU_DEVICE).
    r.device_type = info.type
    return r
end

return _M
