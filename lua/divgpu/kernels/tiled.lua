-- The direct method in tiles inside the shader (shaders/tiled.comp).
local ceil, min = math.ceil, math.min
return {
    method = "direct",
    bindings = { "embeddings", "inv_norm", "centroids", "masks", "winners" },
    exact_bindings = { "embeddings16", "filter_scores" },
    push = { "num_items", "dim", "step", "ring", "tile_size" },
    constants = { workgroup_size = 0, max_dim = 1 },
    needs_tile = true,
    candidates_per_thread = function(n, wg, tile) return ceil(n / tile) * ceil(min(tile, n) / wg) end,
    record = function(k, rec, group, p)
        return k:dispatch(rec, group, { num_items = p.n, dim = p.dim, step = p.step, ring = p.ring, tile_size = p.tile },
                          p.groups)
    end,
}
