-- The safe write path when the disk fails at the commit: the
-- fault-injection build's testing.inject_write_fault makes the next commit's
-- sync (EIO) or rename (ENOSPC) fail. Every output keeps its old file, leaves
-- no temporary, and says so in one line; the checkpoint of a run whose
-- finished cache could not be renamed is kept, and the next run finishes it.
-- Run by `make test`: luajit tests/run_busted.lua --run=faults tests/write_faults_spec.lua
local divgpu = require "divgpu"
local testing = require "divgpu.testing"
local h = require "tests.helpers"

local e = divgpu.synth{ n = 40, dim = 4, seed = 7 }
local L = 10

local function read(path)
    local f = io.open(path, "rb")
    if not f then return nil end
    local t = f:read("*a")
    f:close()
    return t
end

local function write(path, text)
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
end

--- The temporaries left in `dir` (none, after any failure).
local function temporaries(dir)
    local p = io.popen("ls -A '" .. dir .. "' | grep '^\\.divgpu-tmp' || true")
    local list = p:read("*a")
    p:close()
    return list
end

describe("a failing disk at the commit", function()
    assert(testing.inject_write_fault, "this spec needs build/fault/divgpu.so (luajit tests/run_busted.lua --run=faults ...)")
    after_each(function() testing.inject_write_fault("none") end)

    local starts = h.range(0, 6)
    local sequences = divgpu.mirror(e, starts, L)

    for _, fault in ipairs{ { "write-sync", "Input/output error" }, { "write-rename", "No space left on device" } } do
        it("keeps the old cache and no temporary when the " .. fault[1] .. " fails", function()
            local dir = h.tmpdir()
            local out = dir .. "/cache.json"
            write(out, "precious")
            testing.inject_write_fault(fault[1])
            local ok, err = divgpu.files.write_cache(out, { table = e, length = L, sequences = sequences })
            assert.is_nil(ok)
            local line = err
            assert.matches(fault[2], line, 1, true)
            assert.matches(out, line, 1, true)
            assert.are.equal("precious", read(out))
            assert.are.equal("", temporaries(dir))
            -- Twin: the same write with no fault replaces the file.
            divgpu.files.write_cache(out, { table = e, length = L, sequences = sequences })
            assert.are_not.equal("precious", read(out))
            os.execute("rm -rf '" .. dir .. "'")
        end)
    end

    it("keeps the checkpoint of a run whose cache could not be renamed, and the next run finishes it", function()
        local dir = h.tmpdir()
        local out = dir .. "/cache.json"
        write(out, "precious")
        local job = { contract = "fp32", table = e, length = L, starts = starts }
        local cp = divgpu.files.checkpoint(out, job)
        cp:append(sequences)
        assert.are.equal(6, cp.done)  -- committed (the writer thread is done) before the fault is armed
        testing.inject_write_fault("write-rename")
        local ok, err = cp:finish()
        assert.is_nil(ok)
        assert.matches("No space left on device", err, 1, true)
        assert.are.equal("precious", read(out))
        cp:close()
        -- The next run finds every sequence committed and only finishes.
        local again = divgpu.files.checkpoint(out, job)
        assert.are.equal(6, again.done)
        assert.are.same({}, again.notes)
        again:finish()
        local whole = dir .. "/whole.json"
        divgpu.files.write_cache(whole, { table = e, length = L, sequences = sequences })
        assert.are.equal(read(whole), read(out))
        assert.is_nil(read(out .. ".lock"), "the lock is released")
        os.execute("rm -rf '" .. dir .. "'")
    end)

    it("keeps the old chart and table when their sync fails", function()
        local dir = h.tmpdir()
        local png, json = dir .. "/c.png", dir .. "/t.json"
        write(png, "precious")
        write(json, "precious")
        testing.inject_write_fault("write-sync")
        local ok = divgpu.plot.draw{ out = png, panels = { { y_label = "y", series = { { x = { 1, 2 }, y = { 1, 2 } } } } } }
        assert.is_nil(ok)
        testing.inject_write_fault("write-sync")
        assert.is_nil((e:write_json(json)))
        assert.are.equal("precious", read(png))
        assert.are.equal("precious", read(json))
        assert.are.equal("", temporaries(dir))
        os.execute("rm -rf '" .. dir .. "'")
    end)
end)
