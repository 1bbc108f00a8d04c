-- The certified Gram filter's step (shaders/gram.comp): one workgroup per
-- sequence, `steps` steps per dispatch, the state in registers, shared
-- memory and, past both, global memory.
return {
    method = "gram",
    bindings = { "embeddings", "inv_norm", "row_norms", "job_factors", "g_blocks", "centroids",
                 "approx", "winners", "state_f64", "state_u32" },
    push = { "num_items", "dim", "first_step", "steps", "ring", "block_rows", "shared_count" },
    constants = { workgroup_size = 0, max_dim = 1, window_capacity = 2, reg_slots = 3, shared_slots = 4,
                  dim_slots = 5, subgroup_slots = 6, stage_rows = 7 },
    -- The per-sequence state, declared once in shaders/include/gram_state.glsl
    -- (which gram.comp includes): the registry reads it into `state`.
    state_layout = { include = "gram_state.glsl", prefix = "GRAM_" },
}
