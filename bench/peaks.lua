-- The device's ceilings through Vulkan, in the same call as every kernel
-- measured beside them: the SIMT fma rate in f32 and f64, the copy rate
-- (vkCmdCopyBuffer, bytes read + written), and for every shape
-- VK_KHR_cooperative_matrix offers, the tensor rate from registers
-- (coopmat_peak.comp) and at the tensor filter's product shape
-- (coopmat_gemm.comp: 4,096 x D by D x 262,144). One JSON line each, the best
-- of REPEATS timed runs after a quarter of a second of warm-up (GPU timestamps).
--   luajit bench/peaks.lua [--quick]      (--quick: small sizes, for lavapipe)
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"

local quick = arg[1] == "--quick"
local REPEATS = quick and 1 or 5
local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
local info = ctx.info

local function source(file)
    local f = assert(io.open("bench/kernels/" .. file))
    local text = f:read("*a")
    f:close()
    return text
end

local function emit(fields)
    local keys = {}
    for k in pairs(fields) do keys[#keys + 1] = k end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do
        local v = fields[k]
        parts[#parts + 1] = string.format("%q: %s", k, type(v) == "number" and string.format("%.6g", v)
            or type(v) == "boolean" and tostring(v) or string.format("%q", tostring(v)))
    end
    print("{" .. table.concat(parts, ", ") .. "}")
    io.stdout:flush()
end

--- The best GPU time of `repeats` runs of record(rec), after warm-up runs
--- that keep the GPU busy for a quarter of a second (the H200's clocks
--- still rose under runs of a millisecond: its int8 peak read 610-750 TOPS
--- in four of seven calls on 2026-12-04, 1,279-1,292 in the others); a run
--- over half a second is not repeated (a slow kernel must not eat the
--- call's time).
local WARM_SECONDS = quick and 0 or 0.25
local function best_time(record)
    local function run()
        local rec = assert(ctx:recorder())
        record(rec)
        assert(rec:submit())
        return assert(rec:wait())
    end
    local warm, best = 0, math.huge
    repeat
        local t = run()
        warm = warm + t
        if t > 0.5 then return t end
    until warm >= WARM_SECONDS
    for _ = 1, REPEATS do best = math.min(best, run()) end
    return best
end

--- The driver's statistics of a pipeline, as "name=value; ..." (register counts).
local function statistics(pipeline)
    local parts = {}
    for _, s in ipairs(pipeline:statistics()) do parts[#parts + 1] = s.name .. "=" .. s.value end
    return table.concat(parts, "; ")
end

local GROUPS = quick and 16 or 132 * 16

--- Runs one measurement; a failure is a JSON line of its own, not the end of the others.
local function measure(kind, fn)
    local ok, err = pcall(fn)
    if not ok then emit{ kind = kind .. "_error", error = tostring(err):match("^[^\n]*"), device = info.name } end
end

-- SIMT fma, f32 and f64.
for _, ty in ipairs{ "float", "double" } do measure("fma_peak", function()
    local spirv = assert(divgpu.shaders.compile(source("fma_peak.comp"), { name = "fma_peak_" .. ty, defines = { TYPE = ty } }))
    local pipeline = assert(ctx:pipeline{ spirv = spirv, name = "fma_peak_" .. ty })
    local out = assert(ctx:buffer(GROUPS * 256 * 8, "fma peak out"))
    local group = assert(ctx:bind(pipeline, { out }))
    local iterations = quick and 4 or (ty == "float" and 4096 or 2048)
    local t = best_time(function(rec) rec:dispatch(group, { iterations, 7 }, GROUPS) end)
    local flops = GROUPS * 256 * iterations * 16 * 8 * 2
    emit{ kind = "fma_peak", type = ty, seconds = t, tflops = flops / t / 1e12, device = info.name,
          statistics = statistics(pipeline) }
end) end

-- Copy: one large device-to-device copy, bytes read + written.
measure("copy", function()
    local bytes = math.min(quick and 2 ^ 24 or 2 ^ 31, info.max_memory_allocation_size)
    local a, b = assert(ctx:buffer(bytes, "copy from")), assert(ctx:buffer(bytes, "copy to"))
    a:fill(0x3f800000)
    local t = best_time(function(rec) rec:copy(a, b) end)
    emit{ kind = "copy", how = "vkCmdCopyBuffer", bytes = bytes, seconds = t, tb_per_s = 2 * bytes / t / 1e12,
          device = info.name }
    local spirv = assert(divgpu.shaders.compile(source("copy.comp"), { name = "copy" }))
    local pipeline = assert(ctx:pipeline{ spirv = spirv, name = "copy" })
    local group = assert(ctx:bind(pipeline, { a, b }))
    local groups = quick and 16 or 132 * 32
    t = best_time(function(rec) rec:dispatch(group, { bytes / 16 }, groups) end)
    emit{ kind = "copy", how = "shader", bytes = bytes, seconds = t, tb_per_s = 2 * bytes / t / 1e12, device = info.name }
end)

local GLSL_TYPE = { i8 = "int8_t", u8 = "uint8_t", f16 = "float16_t", f32 = "float", i32 = "int32_t", u32 = "uint32_t" }
local FILL = { i8 = 0x01ff0102, u8 = 0x01030102, f16 = 0x1c001c00 }  -- small values: sums stay finite

for _, s in ipairs(info.cooperative_matrix) do
    local a_type, c_type = GLSL_TYPE[s.a], GLSL_TYPE[s.c]
    if s.scope == "subgroup" and s.a == s.b and s.c == s.result and a_type and c_type and FILL[s.a] then
        local defines = { A_TYPE = a_type, C_TYPE = c_type, M = tostring(s.m), N = tostring(s.n), K = tostring(s.k) }
        local shape = string.format("%dx%dx%d %s->%s", s.m, s.n, s.k, s.a, s.c)
        local ok, err = pcall(function()
            local spirv = assert(divgpu.shaders.compile(source("coopmat_peak.comp"), { name = "coopmat_peak", defines = defines }))
            local pipeline = assert(ctx:pipeline{ spirv = spirv, name = "coopmat_peak " .. shape })
            local inputs = assert(ctx:buffer(4096, "coopmat inputs"))
            inputs:fill(FILL[s.a])
            local outputs = assert(ctx:buffer(64 * s.m * s.n * 4, "coopmat outputs"))
            local group = assert(ctx:bind(pipeline, { inputs, outputs }))
            local iterations = quick and 4 or 256
            local t = best_time(function(rec) rec:dispatch(group, { iterations }, GROUPS) end)
            local ops = GROUPS * 4 * iterations * 8 * 4 * 2 * s.m * s.n * s.k  -- 4 subgroups, UNROLL 8, ACC 4
            emit{ kind = "coopmat_peak", shape = shape, seconds = t, tops = ops / t / 1e12, device = info.name,
                  statistics = statistics(pipeline) }

            -- The filter's product shape.
            -- 4,096 x 768 by 768 x 32,768: the filter's shape with an eighth of its
            -- candidates (the rate, not the whole product, is the question).
            local rows, cols, dim = quick and 64 or 4096, quick and 256 or 32768, 768
            local bytes = s.a == "f16" and 2 or 1
            local q = assert(ctx:buffer(rows * dim * bytes, "coopmat Q"))
            local e = assert(ctx:buffer(cols * dim * bytes, "coopmat E"))
            q:fill(FILL[s.a])
            e:fill(FILL[s.a])
            local tr, tc = 2, 4
            local gemm_defines = { A_TYPE = a_type, C_TYPE = c_type, M = tostring(s.m), N = tostring(s.n),
                                   K = tostring(s.k), TR = tostring(tr), TC = tostring(tc) }
            local gspirv = assert(divgpu.shaders.compile(source("coopmat_gemm.comp"), { name = "coopmat_gemm", defines = gemm_defines }))
            local gpipe = assert(ctx:pipeline{ spirv = gspirv, name = "coopmat_gemm " .. shape })
            local gout = assert(ctx:buffer(1024 * s.m * s.n * 4, "coopmat gemm out"))
            local ggroup = assert(ctx:bind(gpipe, { q, e, gout }))
            local subgroups = (rows / (s.m * tr)) * (cols / (s.n * tc))
            local gt = best_time(function(rec) rec:dispatch(ggroup, { rows, cols, dim }, math.ceil(subgroups / 4)) end)
            emit{ kind = "coopmat_gemm", shape = shape, rows = rows, cols = cols, dim = dim, seconds = gt,
                  tops = 2 * rows * cols * dim / gt / 1e12, device = info.name, statistics = statistics(gpipe) }
        end)
        if not ok then emit{ kind = "coopmat_error", shape = shape, error = tostring(err):match("^[^\n]*") } end
    end
end
if #info.cooperative_matrix == 0 then emit{ kind = "coopmat_none", device = info.name } end
