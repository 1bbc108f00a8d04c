-- Shared by the specs: one device context for the whole suite (with the
-- validation layer when DIVGPU_VALIDATION=1), the shipped poems, and
-- GPU-vs-mirror comparison.
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"

local M = {}

M.SHIPPED = "assets/embeddings/all-MiniLM-L6-v2/embeddings.json"

local ctx
function M.ctx()
    if not ctx then ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") }) end
    return ctx
end

local shipped
function M.shipped()
    if not shipped then shipped = assert(divgpu.load_embeddings(M.SHIPPED)) end
    return shipped
end

--- A table from rows of numbers (or number strings, written as given),
--- through a temporary embeddings.json and the real loader.
function M.load_rows(rows)
    local lines = {}
    for j, row in ipairs(rows) do lines[j] = "[" .. table.concat(row, ",") .. "]" end
    local dir = M.tmpdir()
    local path = dir .. "/embeddings.json"
    local f = assert(io.open(path, "w"))
    f:write("[", table.concat(lines, ",\n"), "]\n")
    f:close()
    local e = assert(divgpu.load_embeddings(path))
    os.execute("rm -rf " .. dir)
    return e
end

--- The first k shipped poems as a table of their own (the same f32 values:
--- "%.9g" round-trips every f32). The direct method on lavapipe costs N^2 D
--- emulated FMAs per sequence: its poem tests run on the first 520 poems,
--- while the Gram method's run on all of them.
local heads = {}
function M.shipped_head(k)
    if heads[k] then return heads[k] end
    local e = M.shipped()
    local values, dim = e:values(), e.dim
    local rows = {}
    for j = 0, k - 1 do
        local row = {}
        for d = 1, dim do row[d] = string.format("%.9g", values[j * dim + d]) end
        rows[j + 1] = row
    end
    heads[k] = M.load_rows(rows)
    return heads[k]
end

--- A new empty folder (the caller removes it).
function M.tmpdir()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0)
    return dir
end

-- The process's environment, for $XDG_CACHE_HOME (the cache folders read it
-- at each call: divgpu.rates, the CPU method's rates, Mesa's shader cache).
local ffi = require "ffi"
pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
pcall(ffi.cdef, "int unsetenv(const char *name);")

--- Runs fn(home) with $XDG_CACHE_HOME set to `home`, then puts it back as it
--- was, unset where it was (an empty value would leave Mesa's shader cache of
--- every later context without a folder); fn's error is raised after.
function M.with_cache_home(home, fn)
    local saved = os.getenv("XDG_CACHE_HOME")
    ffi.C.setenv("XDG_CACHE_HOME", home, 1)
    local ok, err = pcall(fn, home)
    if saved then ffi.C.setenv("XDG_CACHE_HOME", saved, 1) else ffi.C.unsetenv("XDG_CACHE_HOME") end
    assert(ok, err)
end

--- Runs fn(dir) with $XDG_CACHE_HOME a new empty folder, removed after.
function M.with_fresh_cache_home(fn)
    local dir = M.tmpdir()
    local ok, err = pcall(M.with_cache_home, dir, fn)
    os.execute("rm -rf '" .. dir .. "'")
    assert(ok, err)
end

function M.range(a, b)
    local list = {}
    for s = a, b - 1 do list[#list + 1] = s end
    return divgpu.array("u32", list)
end

--- Runs the job on the GPU (through the real driver) and on the CPU mirror.
function M.both(e, starts, length, opts)
    opts = opts or {}
    local gpu = driver.run{ ctx = M.ctx(), embeddings = e, starts = starts, length = length,
                            method = opts.method or "direct", spirv = opts.spirv, batch = opts.batch, workgroup_size = opts.workgroup_size }
    local cpu = divgpu.mirror(e, starts, length)
    return gpu, cpu
end

function M.describe_difference(d)
    if not d then return "identical" end
    return string.format("sequence %d differs at step %d: %d vs %d", d.row, d.step, d.a, d.b)
end

--- The baseline shader compiled with a define, e.g. { DIVGPU_PERTURB = 1 }.
function M.baseline_variant(defines)
    return assert(vk.shader(M.ctx(), "baseline", defines))
end

--- A shader of dependent xorshift loops (no compiler folds it; under
--- lavapipe's 65,535-iteration cap): work that keeps a GPU busy for a while.
local spin
function M.spin_spirv()
    if not spin then
        spin = assert(divgpu.shaders.compile([[
            #version 450
            layout(local_size_x = 64) in;
            layout(push_constant) uniform Push { uint n; } pc;
            layout(std430, binding = 0) buffer B { uint x[]; };
            void main() {
                uint s = gl_GlobalInvocationID.x + 1u;
                for (uint i = 0u; i < pc.n; ++i) { s ^= s << 13; s ^= s >> 17; s ^= s << 5; }
                x[gl_GlobalInvocationID.x] = s;
            }
        ]], { name = "spin" }))
    end
    return spin
end

--- A recorder on ctx holding `dispatches` spin dispatches (about 10 ms each
--- on lavapipe, 1 ms on an H200), not yet submitted.
function M.spin_recorder(ctx, dispatches)
    local group = ctx:bind(ctx:pipeline{ spirv = M.spin_spirv() }, { ctx:buffer(256, "spin") })
    local rec = ctx:recorder()
    for _ = 1, dispatches do
        rec:dispatch(group, { 60000 }, 1)
        rec:barrier()
    end
    return rec
end

--- Drops the suite's context (run_busted.lua, at the end, to collect it).
function M.release() ctx = nil end

function M.assert_no_validation_messages()
    if not ctx then return end
    local messages = ctx:validation_messages()
    assert(#messages == 0, #messages .. " validation message(s):\n" .. table.concat(messages, "\n"))
end

--- A table whose values are multiples of 1/8 in [-1, 1], from a seeded
--- generator (never a zero row): scores tie exactly.
function M.ties_table(n, dim, seed)
    local rows = {}
    for j = 1, n do
        local row = {}
        for d = 1, dim do
            seed = (seed * 1103515245 + 12345) % 2147483648
            row[d] = (seed % 17 - 8) / 8
        end
        if dim == 1 or row[1] == 0 then row[1] = 0.125 * (1 + j % 3) end
        rows[j] = row
    end
    return M.load_rows(rows)
end

--- Clustered with tiny noise: near-ties everywhere, windows of dozens.
function M.near_ties()
    return assert(require("divgpu").synth{ n = 300, dim = 64, clusters = 8, seed = 3, noise = 1e-5 })
end

--- A method spec's two parity checks against the CPU mirror, from its
--- `run(e, starts, length, opts, run_opts)` -> sequences, stats:
--- assert_identical (and, where `method` is given, that the run used it)
--- and assert_differs, the twin's (a perturbed variant must differ).
function M.mirror_checks(run, method)
    local divgpu = require "divgpu"
    local function assert_identical(e, starts, length, opts, run_opts)
        local gpu, stats = run(e, starts, length, opts, run_opts)
        local d = divgpu.first_difference(gpu, divgpu.mirror(e, starts, length), length)
        assert(d == nil, M.describe_difference(d))
        if method then assert(stats.method == method, "the run used method " .. tostring(stats.method)) end
        return stats
    end
    local function assert_differs(e, starts, length, opts, run_opts)
        local gpu = run(e, starts, length, opts, run_opts)
        assert(divgpu.first_difference(gpu, divgpu.mirror(e, starts, length), length),
            "the perturbed variant gave the contract's output: the check is vacuous")
    end
    return assert_identical, assert_differs
end

return M
