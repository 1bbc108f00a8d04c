-- The direct method, one dispatch per tile with a grid-wide barrier between
-- tiles (shaders/tile-dispatch.comp); fp16-exact decides in one more dispatch.
local need = require("divgpu.failure").need
local ceil, min = math.ceil, math.min
local PHASE_SCAN, PHASE_DECIDE = 0, 1
return {
    method = "direct",
    bindings = { "embeddings", "inv_norm", "centroids", "masks", "winners", "carries" },
    exact_bindings = { "embeddings16", "filter_scores" },
    push = { "num_items", "dim", "step", "ring", "tile_begin", "tile_end", "phase" },
    constants = { workgroup_size = 0, max_dim = 1 },
    needs_tile = true,
    -- Per sequence, a buffer of its own: the running best (f64 score, u32 index, pad).
    extra_buffers = { carries = 16 },
    candidates_per_thread = function(n, wg, tile) return ceil(min(tile, n) / wg) end,
    record = function(k, rec, group, p)
        for begin = 0, p.n - 1, p.tile do
            need(k:dispatch(rec, group, { num_items = p.n, dim = p.dim, step = p.step, ring = p.ring,
                                          tile_begin = begin, tile_end = min(begin + p.tile, p.n), phase = PHASE_SCAN },
                            p.groups))
            -- Hard grid sync: every workgroup finishes this tile before any starts the next.
            need(rec:barrier())
        end
        if p.exact then
            need(k:dispatch(rec, group, { num_items = p.n, dim = p.dim, step = p.step, ring = p.ring,
                                          tile_begin = 0, tile_end = p.n, phase = PHASE_DECIDE }, p.groups))
        end
        return true
    end,
}
