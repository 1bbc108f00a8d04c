-- The certified tensor filter's step (shaders/tensor.comp; the proof is
-- shaders/tensor.md), one phase a dispatch: the centroids cut into int8
-- slices (one workgroup a sequence), the slice products by tiles of
-- candidates (a workgroup a tile and sequence), the decision (the window
-- rescored by the contract's chain, one workgroup a sequence).
return {
    method = "tensor",
    bindings = { "embeddings", "inv_norm", "job_factors", "table_slices", "exponents", "centroids",
                 "centroid_slices", "masks", "winners", "state_f64", "state_u32", "partials", "partial_index",
                 "a_exact" },
    push = { "num_items", "dim", "step", "ring", "sequences", "tiles", "tile_width", "words", "seq_rows",
             "item_rows", "phase" },
    constants = { workgroup_size = 0, max_dim = 1, window_capacity = 2, subgroup_slots = 3 },
    phases = { slice = 0, products = 1, decide = 2 },
    -- The counters share gram's layout (shaders/include/gram_state.glsl).
    state_layout = { include = "gram_state.glsl", prefix = "GRAM_" },
    -- f64 words of a sequence's state: B̂, the centroid's exponent, sliced or not, the check's ratio.
    state_f64_words = 4,
}
