-- The CPU method: the contract computed on the host, no Vulkan device
-- needed (src/cpu/, `divgpu.cpu`). The certified Gram filter of
-- shaders/gram.md, the same proof as the GPU kernel's (src/cpu/bound.rs
-- computes its bound term for term as gram.comp's step_bound), with the
-- contract's chain deciding every window; the direct path (every
-- candidate's chain) where G would not fit a quarter of the memory or
-- would not pay for its build. Its context is the host
-- (`cpu.host_context()`), a table of kind "cpu": `--device cpu` or
-- `--method cpu` name it, and auto weighs it against the Vulkan methods
-- where the only devices are CPU ones (lavapipe), by this machine's rates
-- (measured once, kept in the rates cache).
--
-- A batch is computed in one call: the Gram state of a sequence is rebuilt
-- from its prefix at every call, so cutting a batch into chunks of steps
-- would pay that rebuild again; the job's batches are sized instead so that
-- each takes about BATCH_SECONDS (progress and the checkpoint follow them).

local divgpu = require "divgpu"
local json = require "dkjson"

local string_format, floor, max, min = string.format, math.floor, math.max, math.min
local ipairs, tostring, type, pcall = ipairs, tostring, type, pcall
local now = divgpu.clock.now

local _M = { name = "cpu", device_kind = "cpu", preference = -3, default_layout = nil,
             doc = "the contract on the host's cores: the certified Gram filter (or every chain), no GPU" }

--- Run options the CPU job takes (the run's length and starts size its batches).
_M.options = { threads = "threads", length = "length", starts = "starts" }
--- Bench-only: the plan ("gram" or "direct") and the bound's scale (a twin).
_M.tuning = { cpu_plan = "plan", cpu_bound_scale = "bound_scale" }

-- Seconds a batch aims at: long enough that its set-up is noise, short
-- enough that progress moves and an interrupt keeps most of the work.
_M.BATCH_SECONDS = 2

--- The number of threads the host offers (rayon's default: every core).
local function cores()
    local f = io.popen("nproc 2>/dev/null")
    local n = f and tonumber(f:read("*l") or "")
    if f then f:close() end
    return n or 1
end

--- The processor's model name, for the rates cache's key.
local function cpu_model()
    local f = io.open("/proc/cpuinfo", "r")
    if not f then return "unknown" end
    local text = f:read("*a")
    f:close()
    return text:match("model name%s*:%s*([^\n]+)") or "unknown"
end

--- The host as a context of kind "cpu" (what the plan, the driver and the
--- report ask of a context: kind, info, timeout).
function _M.host_context(threads)
    local n = threads or cores()
    return { kind = "cpu", timeout = nil, threads = threads,
             info = { name = string_format("host CPU (%s, %d thread%s)", cpu_model(), n, n == 1 and "" or "s"),
                      type = "cpu", index = "cpu" } }
end

local function rates_path(ctx)
    local folder = require("divgpu.rates").cache_folder()
    if not folder then return nil end
    local key = (cpu_model() .. "-" .. tostring(ctx.threads or cores())):gsub("[^%w%-]+", "_")
    return string_format("%s/cpu-%s.json", folder, key), folder
end

-- What a measurement is (src/cpu/measure.rs); a cached file of another is
-- measured again. 2 (2026-12-05): each timing the fastest of three, on
-- batches of 16 sequences a worker (1: one timing of 2 a worker, whose
-- figures varied 1.7-1.9x between processes).
local MEASUREMENT = 2

local function read_rates(path)
    local f = path and io.open(path, "r")
    if not f then return nil end
    local r = json.decode(f:read("*a") or "")
    f:close()
    if type(r) ~= "table" or r.measurement ~= MEASUREMENT then return nil end
    for _, k in ipairs{ "build", "step", "direct" } do
        if type(r[k]) ~= "number" or not (r[k] > 0) then return nil end
    end
    return r
end

local function write_rates(path, folder, r)
    os.execute(string_format("mkdir -p '%s' 2>/dev/null", folder))
    local ok, out = pcall(divgpu.files.output, path)
    if not ok or not out then return false end
    return out:write(json.encode{ build = r.build, step = r.step, direct = r.direct,
                                        measurement = MEASUREMENT }) and out:commit() and true or false
end

-- The rates time the kernels alone; a run's wall time over them (the
-- driver's chunks, the sequences stored, the writer thread) and a run's
-- fixed seconds. Measured on the 2-core development machine (2026-12-05,
-- the poems, load about 1.4, the rates measured afresh by measurement 2):
-- 0:512 in full 1.68-1.74 s of wall for 1.24-1.30 s of kernels by the rates,
-- every start in full 6.57-6.64 s for 4.9-5.2 s: 1.3-1.35. 1.5 sits between
-- the idle and a loaded machine, inside tests/estimates_test.sh's 2x of both.
_M.WALL_OVER_KERNELS = 1.5
_M.RUN_SECONDS = 0.02

--- This machine's rates (seconds per unit of work: G's build per N^2 D,
--- a Gram step per N, a direct step per N D): cached, else measured (0.2 s
--- on 2 cores) and cached. r.source says which.
function _M.rates(ctx)
    if ctx.rates then return ctx.rates end
    local path, folder = rates_path(ctx)
    local r = read_rates(path)
    if r then
        r.source = "the cache " .. path
    else
        r = divgpu.cpu.measure_rate{ threads = ctx.threads }
        r.source = path and write_rates(path, folder, r) and ("a measurement, kept in " .. path) or "a measurement"
    end
    ctx.rates = r
    return r
end

function _M.serves(request)
    if request.plain then return true end
    return nil, "shapes and precisions other than baseline fp32 run only with the direct method"
end

function _M.fits()
    return true, "the host (G where it fits a quarter of the memory, else every chain)"
end

--- The job's seconds on this host: { { seconds, label } } (divgpu.cost's
--- form); nothing on a device that is not the host (a Vulkan device's
--- weighing names no cpu: plan.make weighs the host beside it).
function _M.estimate(job, device)
    if not (device.ctx and device.ctx.kind == "cpu") then return nil end
    local rates = _M.rates(device.ctx)
    local seconds, plan = divgpu.cpu.estimate{ n = job.n, dim = job.dim, steps = job.sequences * (job.length - 1),
                                               rates = rates }
    return { { seconds = seconds * _M.WALL_OVER_KERNELS + _M.RUN_SECONDS, label = "cpu (" .. plan .. ")" } }
end

function _M.memory() return 0 end

--- Seconds by this host's rates for a job described as the plan weighs one.
function _M.seconds(ctx, n, dim, sequences, length)
    return _M.estimate({ n = n, dim = dim, sequences = sequences, length = length }, { ctx = ctx })[1].seconds
end

-- A recorder stand-in: the driver records, submits and waits on it as on
-- a GPU's; the batch computes on its first submit.
local Recorder = {}
Recorder.__index = Recorder
function Recorder:done() return true end
function Recorder:wait() return self.seconds end

local Batch = {}
Batch.__index = Batch

function Batch:record(first, n, rec)
    rec.first, rec.n = first, n
    return true
end

function Batch:submit(rec)
    local t = now()
    if not self.rows then
        local job = self.job
        local rows, info = divgpu.cpu.run{ embeddings = job.e, starts = self.starts, length = job.length,
                                           threads = job.threads, plan = job.plan, job_steps = job.job_steps,
                                           bound_scale = job.bound_scale }
        if not rows then return nil, info end
        self.rows, self.info = rows, info
    end
    rec.seconds = now() - t
    return true
end

--- The chunk's steps [first, first + n) of every sequence into `out`.
function Batch:store_winners(out, row0, count, _, first, n, length)
    local rows = self.rows
    for i = 0, count - 1 do
        local from, to = i * length, (row0 + i) * length
        for step = first, first + n - 1 do out[to + step + 1] = rows[from + step + 1] end
    end
    return true
end

function Batch:stats()
    local info = self.info or {}
    return { plan = info.plan, steps = info.steps or 0, singles = info.singles or 0, rescored = info.rescored or 0 }
end

local Job = {}
Job.__index = Job

--- Sequences a batch holds: about BATCH_SECONDS of work by this host's
--- rates, at least one per thread.
function Job:max_batch()
    local rates = _M.rates(self.ctx)
    local per_sequence = rates.step * self.e.n * (self.length - 1)
    local threads = self.threads or cores()
    return max(threads, floor(_M.BATCH_SECONDS / max(per_sequence, 1e-12)))
end

function Job:batch(starts, _, in_flight)
    local b = setmetatable({ job = self, starts = starts, recorders = {} }, Batch)
    for i = 1, in_flight do b.recorders[i] = setmetatable({}, Recorder) end
    return b
end

--- The job on the host context `ctx` for table `e` (opts: threads, plan,
--- bound_scale; length and sequences from the driver's run).
function _M.job(ctx, e, opts)
    opts = opts or {}
    local length = opts.length or e.n
    local steps = opts.starts and #opts.starts * (length - 1) or nil
    return setmetatable({ ctx = ctx, e = e, method = "cpu", threads = opts.threads or ctx.threads,
                          plan = opts.plan, bound_scale = opts.bound_scale,
                          length = length, job_steps = steps }, Job)
end

function _M.totals() return { steps = 0, singles = 0, rescored = 0 } end

function _M.add_totals(t, s)
    t.steps, t.singles, t.rescored = t.steps + s.steps, t.singles + s.singles, t.rescored + s.rescored
    t.plan = t.plan or s.plan
end

function _M.summary(t)
    if not t or t.steps == 0 then return nil end
    return string_format("cpu: the %s path; %.1f%% of steps decided without a chain, %d chains rescored in windows",
        tostring(t.plan), 100 * t.singles / t.steps, t.rescored)
end

return _M
