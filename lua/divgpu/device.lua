-- device: a context as the methods use it, on top of the native module. A
-- context opened here has its profile made (src/gpu/profile.rs): it passed
-- the arithmetic self-test (is its fma fused, or emulated exactly in the
-- shaders?) and the loop probe (after how many iterations does it stop a
-- shader loop?); a shader is the shipped module with the specialization
-- constants the device needs; its waits may yield to a driver that feeds
-- several devices at once.
--
--   local device = require "divgpu.device"
--   local ctx = assert(device.open{ device = 0 })
--   local spirv = assert(device.shader(ctx, "baseline-columns"))
--
-- Misuse raises error(msg, 2); what the device cannot do returns nil, err.

local divgpu = require "divgpu"
local failure = require "divgpu.failure"

local need, catch = failure.need, failure.catch
local min, pairs, ipairs, next, setmetatable, tostring, error, string_format =
    math.min, pairs, ipairs, next, setmetatable, tostring, error, string.format
local coroutine_running, coroutine_yield = coroutine.running, coroutine.yield
local tonumber, loadfile, getinfo, sort = tonumber, loadfile, debug.getinfo, table.sort

local _M = {}

-- The device's profile as the native module made it (src/gpu/profile.rs:
-- the self-test and the loop probe ran once, when the context was opened;
-- divgpu.device_profile keeps it per context for the plans).
local function profile(ctx)
    return need(ctx:profile())
end

--- How the contract's fma is computed on ctx's device ("hardware" or
--- "emulated"): the profile's arithmetic self-test (docs/contract.md#rules-for-implementations).
--- nil, err when the device cannot meet the contract.
function _M.fma_mode(ctx)
    return catch(function() return profile(ctx).fma end)
end

--- "kept" or "flushed": what the self-test's subnormal cases saw.
function _M.denormals_seen(ctx)
    return catch(function() return profile(ctx).denormals_seen end)
end

--- The defines a job on table `e` needs for f32 denormals
--- (docs/contract.md#subnormals): none where the device preserves them
--- (DenormPreserve is requested) or the table has the subnormal certificate
--- (src/contract/subnormal.rs: no f32 value of the chain can be subnormal);
--- else DIVGPU_EXACT_UNDERFLOW (read by device.shader as the specialization
--- constant EXACT_UNDERFLOW), which redoes every operation near the
--- underflow range exactly in code (shaders/include/underflow.glsl), so the
--- contract's bytes come out on every device. `exact_underflow = false`
--- turns that off (tests: the twin). Returns the defines (false for none)
--- and a line saying which and why.
function _M.underflow_defines(ctx, e, exact_underflow)
    local info = ctx.info
    if not info.denormals_need_certificate then
        return false, "f32 denormals: preserved by the device (DenormPreserve)"
    end
    local ok, why = e:subnormal_certificate()
    if ok then
        return false, string_format("f32 denormals: %s on this device, and the table's certificate shows none can occur",
            info.denormals)
    end
    if exact_underflow == false then
        return false, "f32 denormals: exact underflow turned off (the output may differ from the contract)"
    end
    return { DIVGPU_EXACT_UNDERFLOW = 1 }, string_format("f32 denormals: %s on this device and the table could "
        .. "produce one (%s): operations near 2^-126 are redone exactly in the shaders", info.denormals, why)
end

--- The number of iterations after which ctx's device silently stops a
--- shader loop (lavapipe: 65,535), or false when a loop of 2^20 runs in
--- full: the profile's loop probe. nil, err when the probe cannot run.
function _M.loop_cap(ctx)
    return catch(function() return profile(ctx).loop_cap end)
end

-- Coroutines in which a wait for the GPU may yield instead of blocking (the
-- driver makes several devices' jobs at once), weakly keyed.
local yielding = setmetatable({}, { __mode = "k" })

--- Lets waits in coroutine `co` (device.await) yield while the GPU works.
function _M.yield_in(co)
    yielding[co] = true
end

--- rec:wait() -> GPU seconds (false without timestamps), or nil, err (rec
--- a recorder, or an upload from ctx:begin_upload);
--- inside a coroutine given to yield_in, yields until the submission is
--- done, so that whoever resumes it can feed other devices meanwhile (past
--- ctx's timeout the wait reports it, as rec:wait does).
function _M.await(ctx, rec)
    local co = coroutine_running()
    if co and yielding[co] then
        local now = divgpu.clock.now
        local t0 = now()
        while true do
            local done, err = rec:done()
            if done == nil then return nil, err end
            if done then break end
            if now() - t0 > ctx.timeout then return rec:wait(now() - t0) end
            coroutine_yield()
        end
    end
    return rec:wait()
end

--- Whether the table, `bytes_per_value` bytes a value, fits one storage
--- buffer of the device (what its kernels bind it as; the profile's
--- storage_range): true, or nil and why.
--- Asked before anything is made, so a table too large is refused at once
--- rather than after its copy and upload.
function _M.table_fits(ctx, e, bytes_per_value)
    local info, err = ctx:profile()
    if not info then return nil, err end
    local bytes = e.n * e.dim * bytes_per_value
    local limit = info.storage_range
    if bytes <= limit then return true end
    return nil, string_format("the table (%d x %d, %d bytes a value: %.1f MiB) does not fit one storage buffer of "
        .. "device '%s' (%.1f MiB: maxStorageBufferRange and the largest allocation); use fewer items or "
        .. "dimensions, or a device with a larger range", e.n, e.dim, bytes_per_value, bytes / 1048576,
        info.name, limit / 1048576)
end

local function upload_all(ctx, list, into)
    local uploads = {}
    for i, entry in ipairs(list) do
        if entry[4] then
            into[entry[1]], uploads[i] = need(ctx:begin_upload_table(entry[2], entry[4], entry[3]))
        else
            into[entry[1]], uploads[i] = need(ctx:begin_upload(entry[2], entry[3]))
        end
    end
    for _, upload in ipairs(uploads) do need(_M.await(ctx, upload)) end
    return into
end

--- Uploads each { key, array, name } of `list` to ctx, the buffer going to
--- into[key] ({ key, table, name, layout }: a table by "rows" or "columns",
--- straight from it, ctx:begin_upload_table): every copy submitted first, then all awaited (device.await:
--- in a coroutine given to yield_in, other devices' uploads and builds go on
--- meanwhile). `into`, or nil, err.
function _M.upload_all(ctx, list, into)
    return catch(upload_all, ctx, list, into)
end

local function open(opts)
    local ctx = need(divgpu.open(opts))
    profile(ctx)
    return ctx
end

--- Opens a device (divgpu.open's options) and makes its profile (the
--- self-tests run): ctx, or nil, err when there is no such device or it
--- fails them.
function _M.open(opts)
    return catch(open, opts or {})
end

-- The specialization constants every kernel that includes the contract reads
-- (shaders/include/fma.glsl, underflow.glsl, flush.glsl): what varies by
-- device or table is set when the pipeline is made, so the module a device
-- runs is the shipped one. The defines of the same names (device.underflow_defines,
-- a caller's `defines`) are read as these constants, never compiled.
local SWITCHES = { DIVGPU_FMA_EMULATED = 100, DIVGPU_EXACT_UNDERFLOW = 101, DIVGPU_FLUSH_DENORMALS = 102 }
_M.SWITCHES = SWITCHES

--- The specialization constants ctx's device needs in every kernel:
--- { [id] = 0 | 1 } (fma emulated where the self-test found fma() unfused;
--- flush imitated on a context opened with denormals = "flush" on a device
--- without a flush mode; exact underflow off: a job turns it on).
function _M.specialization(ctx)
    local p = profile(ctx)
    return { [SWITCHES.DIVGPU_FMA_EMULATED] = p.fma == "emulated" and 1 or 0,
             [SWITCHES.DIVGPU_EXACT_UNDERFLOW] = 0,
             [SWITCHES.DIVGPU_FLUSH_DENORMALS] = p.denormals_mode == "flush_emulated" and 1 or 0 }
end

-- Per SPIR-V object device.shader returned: its specialization constants,
-- and the shipped shader's name where it is the embedded module; weakly keyed.
local specializations = setmetatable({}, { __mode = "k" })
local embedded = setmetatable({}, { __mode = "k" })

--- The specialization constants device.shader chose for `spirv` (nil for a
--- module it did not return).
function _M.specialization_of(spirv)
    return specializations[spirv]
end

--- The shipped shader whose embedded SPIR-V `spirv` is, when device.shader
--- returned it unchanged; nil for a module compiled at run time.
function _M.embedded_name(spirv)
    return embedded[spirv]
end

-- Where named source patches live (a checkout's tests/kernels and
-- bench/kernels): the folder above lua/divgpu/.
local function checkout_root()
    local source = getinfo(1, "S").source
    return source:sub(1, 1) == "@" and source:sub(2):match("^(.*)lua/divgpu/device%.lua$") or nil
end
local PATCH_FOLDERS = { "tests/kernels/", "bench/kernels/" }
local patch_cache = {}

--- The named source patch a define stands for (DIVGPU_GRAM_PERTURB ->
--- tests/kernels/gram_perturb.lua, DIVGPU_GRAM_FLOOR -> bench/kernels/gram_floor.lua),
--- or nil when there is none (the define is then compiled as a define).
function _M.patch_for(define)
    if patch_cache[define] == nil then
        patch_cache[define] = false
        local root, file = checkout_root(), define:gsub("^DIVGPU_", ""):lower() .. ".lua"
        for _, folder in ipairs(root and PATCH_FOLDERS or {}) do
            local chunk = loadfile(root .. folder .. file)
            if chunk then
                local patch = chunk()
                patch.file = folder .. file
                patch_cache[define] = patch
                break
            end
        end
    end
    return patch_cache[define] or nil
end

-- The source with every `#include "X"` replaced by the shipped include X (recursively).
local function expand(source)
    return (source:gsub('#include%s+"([^"]+)"[^\n]*', function(file)
        local text = divgpu.shaders.include(file)
        if not text then error(string_format("no shipped include '%s'", file), 0) end
        return expand(text)
    end))
end

--- The shipped shader `name`'s source, its includes expanded, with the
--- patches' hunks applied: { { define, value, patch }, ... }, the hunks
--- patch[value] (or patch.any, whose `replace` may hold $VALUE), each
--- { find = text, replace = text [, optional = true] } whose `find` must
--- occur exactly once (else the patch has drifted from the source: an error
--- naming it); an optional hunk may be absent (a patch of several kernels),
--- but one hunk at least must apply.
function _M.patched_source(name, patches)
    local source = expand((divgpu.shaders.source(name)))
    for _, p in ipairs(patches) do
        local define, value, patch = p[1], p[2], p[3]
        local hunks = patch[tonumber(value)] or patch[value] or patch.any
        if not hunks then
            error(string_format("%s = %s: %s has no such variant", define, tostring(value), patch.file), 0)
        end
        local applied = 0
        for i, hunk in ipairs(hunks) do
            local at = source:find(hunk.find, 1, true)
            local again = at and source:find(hunk.find, at + 1, true)
            if again or not (at or hunk.optional) then
                error(string_format("%s = %s (%s, hunk %d): its text is %s in shader '%s'", define, tostring(value),
                    patch.file, i, at and "not unique" or "not found", name), 0)
            end
            if at then
                -- `any` takes every value: $VALUE in a hunk stands for it.
                local replace = hunk.replace:gsub("%$VALUE", function() return tostring(value) end)
                source, applied = source:sub(1, at - 1) .. replace .. source:sub(at + #hunk.find), applied + 1
            end
        end
        if applied == 0 then
            error(string_format("%s = %s (%s): no hunk applies to shader '%s'", define, tostring(value), patch.file, name), 0)
        end
    end
    return source
end

local function is_on(v)
    return v ~= nil and v ~= false and v ~= 0 and v ~= "0"
end

-- The shipped shader of the same source as `name` built with exactly
-- name's defines plus `plain` (values compared as text), or nil.
local function shipped_with(name, plain)
    local source, wanted = divgpu.shaders.source(name)
    for k, v in pairs(plain) do wanted[k] = tostring(v) end
    for _, other in ipairs(divgpu.shaders.names()) do
        local other_source, defines = divgpu.shaders.source(other)
        local same = other_source == source
        for k, v in pairs(defines) do same = same and wanted[k] == tostring(v) end
        for k in pairs(wanted) do same = same and defines[k] ~= nil end
        if same then return other end
    end
end

local function shader(ctx, name, defines)
    local spec, plain, patches, compiled = _M.specialization(ctx), {}, {}, false
    for k, v in pairs(defines or {}) do
        if SWITCHES[k] then
            spec[SWITCHES[k]] = is_on(v) and 1 or 0
        elseif _M.patch_for(k) then
            -- A patch's default value (0 unless it says) is the shipped source.
            local patch = _M.patch_for(k)
            if tostring(v) ~= tostring(patch.default or 0) then patches[#patches + 1] = { k, v, patch } end
        else
            plain[k], compiled = v, true
        end
    end
    -- Defines that a shipped variant of the same kernel was built with (a
    -- tiling of an axes file) select that variant's embedded module.
    if compiled and #patches == 0 then
        local match = shipped_with(name, plain)
        if match then name, compiled = match, false end
    end
    local spirv
    if not compiled and #patches == 0 then
        spirv = divgpu.shaders.get(name)
        embedded[spirv] = name
    else
        -- An experiment (extra defines) or a test's twin, a bench's probe
        -- (named patches): compiled now.
        sort(patches, function(a, b) return a[1] < b[1] end)
        local source, all = divgpu.shaders.source(name)
        for k, v in pairs(plain) do all[k] = v end
        if #patches > 0 then source = _M.patched_source(name, patches) end
        spirv = need(divgpu.shaders.compile(source, { name = name, defines = all }))
    end
    specializations[spirv] = spec
    return spirv
end

local shipped
local function is_shipped(name)
    if not shipped then
        shipped = {}
        for _, n in ipairs(divgpu.shaders.names()) do shipped[n] = true end
    end
    return shipped[name] == true
end

--- The shipped shader `name` for ctx's device, with extra `defines`: the
--- embedded SPIR-V unless a define asks for something else. What varies by
--- device or table (DIVGPU_FMA_EMULATED, DIVGPU_EXACT_UNDERFLOW,
--- DIVGPU_FLUSH_DENORMALS) is a specialization constant, recorded for the
--- module (device.specialization_of; kernel.new sets them); a define naming
--- a patch (device.patch_for: the tests' twins, the bench's probes) applies
--- it to the source; any other define is compiled (experiments). nil, err
--- when it does not compile.
function _M.shader(ctx, name, defines)
    if not is_shipped(name) then error(string_format("device.shader: no shipped shader '%s'", tostring(name)), 2) end
    return catch(shader, ctx, name, defines)
end

-- Threads per workgroup: a CPU device (lavapipe) gains nothing from wide
-- workgroups and pays per barrier; a GPU wants a few warps per sequence.
function _M.default_workgroup(info)
    local wanted = info.type == "cpu" and 64 or 256
    return min(wanted, info.max_workgroup_invocations, info.max_workgroup_size)
end

return _M
