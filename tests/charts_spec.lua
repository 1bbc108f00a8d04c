-- plot's run chart (lua/divgpu/charts.lua) as the panels it hands to the
-- drawing, on made-up stats: in time the set-up before the first chunk is
-- shown from 0 (not cut off), and a mean window of 1.00-1.02 is drawn as
-- its excess over one rather than flattened on an axis from zero. Twins:
-- on the step axis no set-up line; windows up to 3 keep their own values.
local charts = require "divgpu.charts"

local function run_of(windows)
    local chunks = {}
    for i, w in ipairs(windows) do
        chunks[i] = { device = 1, batch = 1, first_step = i, steps = 1, sequences = 8, gpu_seconds = 0.1,
                      wall_seconds = 0.1, elapsed = 3 + 0.1 * i, gram = { window_mean = w } }
    end
    return { path = "/tmp/r.jsonl", header = { method = "gram", sequences = 8, length = #windows + 1, devices = { "d" } },
             chunks = chunks }
end

local function values(panel)
    local lo, hi = math.huge, -math.huge
    for _, s in ipairs(panel.series) do
        for _, y in ipairs(s.y) do if y == y then lo, hi = math.min(lo, y), math.max(hi, y) end end
    end
    return lo, hi
end

describe("charts: the run chart's panels", function()
    it("in time, a grey set-up line from 0 to the first chunk's start", function()
        local c = charts.run_chart({ run_of{ 1, 1.01, 1.02 } }, { x = "elapsed" })
        local setup = c.panels[1].series[#c.panels[1].series]
        assert.matches("^set%-up", setup.name)
        assert.are.same({ 0, 3.0 }, { setup.x[1], math.floor(setup.x[2] * 1000 + 0.5) / 1000 })
    end)

    it("twin: on the step axis, no set-up line", function()
        local c = charts.run_chart({ run_of{ 1, 1.01, 1.02 } }, { x = "step" })
        assert.are.equal(1, #c.panels[1].series)
    end)

    it("a mean window of 1.00-1.02 is drawn as its excess over one", function()
        local c = charts.run_chart({ run_of{ 1, 1.01, 1.02 } }, { x = "elapsed" })
        assert.matches(" %- 1$", c.panels[3].y_label)
        local lo, hi = values(c.panels[3])
        assert.is_true(math.abs(lo) < 1e-12 and math.abs(hi - 0.02) < 1e-12, lo .. " " .. hi)
    end)

    it("twin: windows up to 3 keep their own values and label", function()
        local c = charts.run_chart({ run_of{ 1, 2, 3 } }, { x = "step" })
        assert.are.equal("gram: mean window", c.panels[3].y_label)
        assert.are.same({ 1, 3 }, { values(c.panels[3]) })
    end)
end)
