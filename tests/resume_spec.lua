-- What interrupted runs rely on in the driver: finished batches streamed to
-- on_batch (one batch in memory), a stop polled between chunks, and SIGINT /
-- SIGTERM caught as a flag. The CLI's checkpoint and the real signals from
-- outside are tested in tests/cli_test.sh.
local divgpu = require "divgpu"
local driver = require "divgpu.driver"
local h = require "tests.helpers"

local e = divgpu.synth{ n = 200, dim = 8, clusters = 4, seed = 11 }
local L = 50

--- Runs the job with on_batch; returns the batches ({first, count, array},
--- appended to `batches` if given) and run's results.
local function streamed(method, starts, opts, batches)
    batches = batches or {}
    local args = { ctx = h.ctx(), embeddings = e, starts = starts, length = L, method = method, batch = 3,
                   target_seconds = 0.01,
                   on_batch = function(first, count, seqs) batches[#batches + 1] = { first, count, seqs } end }
    for k, v in pairs(opts or {}) do args[k] = v end
    local result, stats = driver.run(args)
    return batches, result, stats
end

--- The batches' rows in the given order of batches, as one array.
local function joined(batches, order)
    local flat = {}
    for _, b in ipairs(order) do
        local seqs = batches[b][3]
        for i = 1, #seqs do flat[#flat + 1] = seqs[i] end
    end
    return divgpu.array("u32", flat)
end

describe("driver.run streaming", function()
    for _, method in ipairs{ "direct", "gram" } do
        it("delivers every batch in order, equal to the mirror, and holds no whole result (" .. method .. ")", function()
            local starts = h.range(0, 10)
            local batches, result, stats = streamed(method, starts)
            assert.is_false(result)
            assert.are.equal(10, stats.sequences)
            assert.are.same({ 0, 3, 6, 9 }, { batches[1][1], batches[2][1], batches[3][1], batches[4][1] })
            assert.are.same({ 3, 3, 3, 1 }, { batches[1][2], batches[2][2], batches[3][2], batches[4][2] })
            for _, b in ipairs(batches) do assert.are.equal(b[2] * L, #b[3]) end
            local mirror = divgpu.mirror(e, starts, L)
            local d = divgpu.first_difference(joined(batches, { 1, 2, 3, 4 }), mirror, L)
            assert(d == nil, h.describe_difference(d))
            -- Twin: the same batches in another order are not the mirror's output.
            assert.is_not_nil(divgpu.first_difference(joined(batches, { 2, 1, 3, 4 }), mirror, L))
        end)
    end

    it("stops at a chunk boundary when stop says so, keeping only whole batches", function()
        local starts = h.range(0, 12)
        local polls, batches = 0, {}
        local _, result, stats = streamed("gram", starts, {
            stop = function()
                polls = polls + 1
                return #batches >= 1 and "halt" or nil
            end,
        }, batches)
        assert.is_false(result)
        assert.are.equal("halt", stats.stopped)
        assert.is_true(polls > 1)
        assert.is_true(#batches >= 1 and #batches < 4, #batches .. " batches delivered")
        assert.are.equal(3 * #batches, stats.sequences)
        local order = {}
        for i = 1, #batches do order[i] = i end
        local part = divgpu.array("u32", 3 * #batches)
        for i = 1, #part do part[i] = starts[i] end
        local d = divgpu.first_difference(joined(batches, order), divgpu.mirror(e, part, L), L)
        assert(d == nil, h.describe_difference(d))
        h.assert_no_validation_messages()
    end)

    it("without on_batch still returns the whole result", function()
        local starts = h.range(5, 12)
        local result, stats = driver.run{ ctx = h.ctx(), embeddings = e, starts = starts, length = L, batch = 3 }
        assert.is_nil(stats.stopped)
        local d = divgpu.first_difference(result, divgpu.mirror(e, starts, L), L)
        assert(d == nil, h.describe_difference(d))
    end)
end)

describe("signals", function()
    -- kill(getpid(), sig) through the ffi: os.execute's system() ignores SIGINT while it waits.
    local ffi = require "ffi"
    pcall(ffi.cdef, "int kill(int pid, int sig); int getpid(void);")
    local SIG = { INT = 2, TERM = 15 }
    local function raise(sig) assert(ffi.C.kill(ffi.C.getpid(), SIG[sig]) == 0) end
    -- Another thread (lavapipe's) may take the signal: wait for the flag, 2 s at most.
    local function flag()
        local t0 = divgpu.clock.now()
        while not divgpu.process.interrupted() and divgpu.clock.now() - t0 < 2 do end
        return divgpu.process.interrupted()
    end

    after_each(function() divgpu.process.catch_signals(false) end)

    it("SIGINT and SIGTERM are caught as a flag while catching", function()
        divgpu.process.catch_signals(true)
        assert.is_nil(divgpu.process.interrupted())
        raise("INT")
        assert.are.equal("SIGINT", flag())
        divgpu.process.catch_signals(true)  -- a new catch forgets it (and disarms the second-signal exit)
        assert.is_nil(divgpu.process.interrupted())
        raise("TERM")
        assert.are.equal("SIGTERM", flag())
    end)

    it("a SIGTERM during a run stops the driver at a chunk boundary", function()
        divgpu.process.catch_signals(true)
        local sent = false
        local batches, result, stats = streamed("gram", h.range(0, 12), {
            stop = divgpu.process.interrupted,
            on_progress = function()
                if not sent then sent = true raise("TERM") end
            end,
        })
        assert.is_false(result)
        assert.are.equal("SIGTERM", stats.stopped)
        assert.is_true(#batches < 4, #batches .. " batches delivered")
        assert.are.equal(3 * #batches, stats.sequences)
        h.assert_no_validation_messages()
    end)
end)

describe("the checkpoint's writer thread", function()
    it("append returns before the commit; the next read waits for it, and a failed commit is returned", function()
        local dir = h.tmpdir()
        local starts = h.range(0, 6)
        local out = dir .. "/cache.json"
        local cp = divgpu.files.checkpoint(out, { contract = "fp32", table = e, length = L, starts = starts })
        local mirror = divgpu.mirror(e, starts, L)
        local first3 = mirror:slice(1, 3 * L)
        assert.is_true(cp:append(first3) ~= nil)
        assert.are.equal(3, cp.done)  -- waits for the commit, then reads it
        -- A commit that cannot finish (its folder gone): append itself returns,
        -- the failure comes with the next append or finish, naming the file.
        assert(os.execute("rm -rf '" .. cp.path .. "'") == 0)
        cp:append(divgpu.mirror(e, h.range(3, 6), L))  -- the next batch (batches must come in order)
        -- The fields say what was committed before the failure.
        assert.are.equal(3, cp.done)
        -- The failure ends the checkpoint: every later call says so, and
        -- nothing more is written (a commit past a failed one would record
        -- its stray bytes as committed).
        for _, call in ipairs{ function() return cp:append(first3) end, function() return cp:finish() end,
                               function() return cp:finish() end } do
            local ok, err = call()
            assert.is_nil(ok)
            assert.matches("state.json", err)
        end
        local _, err = cp:append(first3)
        assert.matches("an earlier commit failed: .*state.json", err)
        assert.are.equal(3, cp.done)
        assert.is_nil(io.open(out, "r"), "finish wrote a cache after a failed commit")
        os.execute("rm -rf '" .. dir .. "'")
    end)

    it("a failure in a queue of commits is returned, and the batches behind it are not written", function()
        local dir = h.tmpdir()
        local starts = h.range(0, 9)
        local cp = divgpu.files.checkpoint(dir .. "/cache.json", { contract = "fp32", table = e, length = L, starts = starts })
        local three = divgpu.mirror(e, h.range(0, 3), L)
        cp:append(three)
        assert.are.equal(3, cp.done)
        assert(os.execute("rm -rf '" .. cp.path .. "'") == 0)
        -- Queued behind the failing one, or refused once the writer has failed:
        -- either way the next finish returns the failure, and so does the one after.
        for k = 1, 2 do cp:append(divgpu.mirror(e, h.range(3 * k, 3 * k + 3), L)) end
        for _ = 1, 2 do
            local ok, err = cp:finish()
            assert.is_nil(ok)
            assert.matches("state.json", err)
        end
        assert.are.equal(3, cp.done)
        os.execute("rm -rf '" .. dir .. "'")
    end)
end)
