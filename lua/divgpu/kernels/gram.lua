-- The certified Gram filter (shaders/gram.comp): one workgroup per sequence,
-- `steps` steps per dispatch.
return {
    shader = "gram",
    bindings = { "embeddings", "inv_norm", "row_norms", "g_blocks", "centroids", "masks",
                 "approx", "winners", "state_f64", "state_u32" },
    push = { "num_items", "dim", "first_step", "steps", "ring", "block_rows" },
    constants = { workgroup_size = 0, max_dim = 1, window_capacity = 2 },
    -- previous, window total, windows of one, fallbacks, largest window, the
    -- window-size histogram (gram.comp's S_HIST, HIST_BINS, STATE_U32)
    state_u32_words = 16,
    hist_first = 5, hist_bins = 11,
    state_f64_words = 2,  -- chosen norms T, max |exact - a| / B (instrumented builds)
}
