-- device: a context as the methods use it, on top of the native module. A
-- context opened here has passed the arithmetic self-test (is its fma
-- fused, or emulated exactly in the shaders?) and the loop probe (after how
-- many iterations does it stop a shader loop?); a shader is built for it
-- with the defines it needs; its waits may yield to a driver that feeds
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

local _M = {}

-- Self-test results per context ({fma = "hardware" | "emulated", denormals =
-- "kept" | "flushed"}), weakly keyed.
local self_tests = setmetatable({}, { __mode = "k" })

local function self_test(ctx)
    local t = self_tests[ctx]
    if not t then
        local fma, denormals = need(ctx:self_test())
        t = { fma = fma, denormals = denormals }
        self_tests[ctx] = t
    end
    return t
end

--- How the contract's fma is computed on ctx's device ("hardware" or
--- "emulated"); runs the arithmetic self-test (docs/contract.md#rules-for-implementations)
--- the first time. nil, err when the device cannot meet the contract.
function _M.fma_mode(ctx)
    return catch(function() return self_test(ctx).fma end)
end

--- "kept" or "flushed": what the self-test's subnormal cases saw.
function _M.denormals_seen(ctx)
    return catch(function() return self_test(ctx).denormals end)
end

--- The defines a job on table `e` needs for f32 denormals
--- (docs/contract.md#subnormals): none where the device preserves them
--- (DenormPreserve is requested) or the table has the subnormal certificate
--- (src/contract/subnormal.rs: no f32 value of the chain can be subnormal);
--- else DIVGPU_EXACT_UNDERFLOW, which redoes every operation near the
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

-- Loop-iteration cap per context (false: none found), weakly keyed.
local loop_caps = setmetatable({}, { __mode = "k" })
local PROBE_ITERATIONS = 1048576

local function probe_loop_cap(ctx)
    local pipeline = need(ctx:pipeline{ spirv = divgpu.shaders.get("loop_probe"), name = "loop_probe" })
    local out = need(ctx:buffer(4, "loop probe", "host"))
    local rec = need(ctx:recorder())
    need(rec:dispatch(need(ctx:bind(pipeline, { out })), { PROBE_ITERATIONS }, 1))
    need(rec:submit())
    need(rec:wait())
    local ran = need(out:read("u32"))[1]
    return ran < PROBE_ITERATIONS and ran or false
end

--- The number of iterations after which ctx's device silently stops a
--- shader loop (lavapipe: 65,535), or false when a loop of 2^20 runs in
--- full; measured once per context. nil, err when the probe cannot run.
function _M.loop_cap(ctx)
    if loop_caps[ctx] == nil then
        local cap, err = catch(probe_loop_cap, ctx)
        if cap == nil then return nil, err end
        loop_caps[ctx] = cap
    end
    return loop_caps[ctx]
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
--- buffer of the device (what its kernels bind it as): true, or nil and why.
--- Asked before anything is made, so a table too large is refused at once
--- rather than after its copy and upload.
function _M.table_fits(ctx, e, bytes_per_value)
    local info = ctx.info
    local bytes = e.n * e.dim * bytes_per_value
    local limit = min(info.max_storage_buffer_range, info.max_memory_allocation_size)
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
    self_test(ctx)
    need(_M.loop_cap(ctx))
    return ctx
end

--- Opens a device (divgpu.open's options) and runs the self-tests: ctx, or
--- nil, err when there is no such device or it fails them.
function _M.open(opts)
    return catch(open, opts or {})
end

local function shader(ctx, name, defines)
    local extra = {}
    for k, v in pairs(defines or {}) do extra[k] = v end
    if self_test(ctx).fma == "emulated" then extra.DIVGPU_FMA_EMULATED = 1 end
    -- "flush" on a device without a flush mode: in code (shaders/include/flush.glsl).
    if ctx.info.denormals_mode == "flush_emulated" then extra.DIVGPU_FLUSH_DENORMALS = 1 end
    if next(extra) == nil then return divgpu.shaders.get(name) end
    local source, all = divgpu.shaders.source(name)
    for k, v in pairs(extra) do all[k] = v end
    return need(divgpu.shaders.compile(source, { name = name, defines = all }))
end

local shipped
local function is_shipped(name)
    if not shipped then
        shipped = {}
        for _, n in ipairs(divgpu.shaders.names()) do shipped[n] = true end
    end
    return shipped[name] == true
end

--- The shipped shader `name` built for ctx's device, with extra `defines`:
--- the embedded SPIR-V when nothing needs changing, else compiled now (with
--- DIVGPU_FMA_EMULATED on devices whose fma() is not fused). nil, err when
--- it does not compile.
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
