-- The one plan (lua/divgpu/plan.lua): method, shape, tile and layout with
-- why, decided once, on lavapipe; driver.run runs the plan it is given.
local divgpu = require "divgpu"
local driver = require "divgpu.driver"
local methods = require "divgpu.methods"
local plan = require "divgpu.plan"
local h = require "tests.helpers"

describe("plan.make", function()
    local e = divgpu.synth{ n = 200, dim = 8, clusters = 4, seed = 11 }

    it("auto with a length weighs every method that serves and fits, once, and says why", function()
        local p = assert(plan.make(h.ctx(), e, { method = "auto", shape = "auto", length = 50, sequences = 4 }))
        assert.truthy(p.why.method:find("^estimated "), p.why.method)
        assert.truthy(methods.find(p.method), p.method)
        assert.truthy(p.estimates and next(p.estimates), "no estimates")
        assert.are.equal(methods.get(p.method).layout_for and methods.get(p.method).layout_for(p.shape)
            or methods.get(p.method).default_layout, p.layout)
        assert.truthy(plan.lines(p)[1]:find("^method " .. p.method), plan.lines(p)[1])
    end)

    it("a method asked for gives its fit's reason, not a bare 'asked for'", function()
        local p = assert(plan.make(h.ctx(), e, { method = "gram", sequences = 4 }))
        assert.are.equal("gram", p.method)
        assert.truthy(p.why.method:find("^asked for %(G %("), p.why.method)
        assert.is_nil(p.shape)
        assert.are.equal("rows", p.layout)
    end)

    it("a tiled shape gets its tile once, with why; a given layout is kept", function()
        local p = assert(plan.make(h.ctx(), e, { method = "direct", shape = "tiled", tile_size = 64, layout = "rows" }))
        assert.are.same({ "direct", "tiled", 64, "rows" }, { p.method, p.shape, p.tile, p.layout })
        assert.truthy(p.why.tile:find("tile size 64"), p.why.tile)
    end)

    it("twin: a method that does not fit is refused as nil, err; an unknown one raises", function()
        local p, err = plan.make(h.ctx(), e, { method = "gram", sequences = 4, memory_budget = 1 })
        assert.is_truthy(p, "gram asked for ignores the budget, as before")
        local big = divgpu.synth{ n = 300, dim = 8, clusters = 4, seed = 3 }
        p, err = plan.make(h.ctx(), big, { method = "auto", length = 10, sequences = 4, memory_budget = 1000 })
        assert.are.equal("direct", p and p.method, err)
        assert.truthy(p.why.method:find("no gram: ", 1, true), p.why.method)
        assert.has_error(function() plan.make(h.ctx(), e, { method = "fast" }) end)
    end)

    it("driver.run runs the plan it is given, and its stats carry the plan's why", function()
        local p = assert(plan.make(h.ctx(), e, { method = "direct", shape = "baseline", length = 20, sequences = 3 }))
        local out, stats = assert(driver.run{ ctx = h.ctx(), embeddings = e, starts = { 0, 5, 9 }, length = 20, plan = p })
        assert.are.equal(p.why.method, stats.method_reason)
        assert.are.equal(p, stats.plan)
        assert.is_nil(divgpu.first_difference(out, divgpu.mirror(e, divgpu.array("u32", { 0, 5, 9 }), 20), 20))
    end)

    it("twin: a bench switch among the run's options is refused; in tuning it is taken", function()
        local ok, err = pcall(driver.run, { ctx = h.ctx(), embeddings = e, starts = { 0 }, length = 3, method = "gram",
                                            reg_slots = 2 })
        assert.is_false(ok)
        assert.matches("reg_slots is a tuning switch of the gram method", tostring(err), 1, true)
        ok, err = pcall(driver.run, { ctx = h.ctx(), embeddings = e, starts = { 0 }, length = 3, tuning = { fast = 1 } })
        assert.is_false(ok)
        assert.matches("unknown tuning switch 'fast'", tostring(err), 1, true)
        assert(driver.run{ ctx = h.ctx(), embeddings = e, starts = { 0 }, length = 3, method = "gram",
                           tuning = { reg_slots = 2 } })
    end)
end)
