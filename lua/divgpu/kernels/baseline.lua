-- The direct method's reference shape (shaders/baseline.comp): one dispatch a
-- step, each thread a strided share of all candidates.
local ceil = math.ceil
return {
    method = "direct",
    reference = true,  -- the direct method's default shape
    bindings = { "embeddings", "inv_norm", "centroids", "masks", "winners" },
    exact_bindings = { "embeddings16", "filter_scores" },  -- appended for fp16-exact
    push = { "num_items", "dim", "step", "ring" },
    constants = { workgroup_size = 0, max_dim = 1 },
    --- Candidates one thread scores in one dispatch, at most.
    candidates_per_thread = function(n, wg) return ceil(n / wg) end,
    --- Records step p.step for p.groups sequences.
    record = function(k, rec, group, p)
        return k:dispatch(rec, group, { num_items = p.n, dim = p.dim, step = p.step, ring = p.ring }, p.groups)
    end,
}
