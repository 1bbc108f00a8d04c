-- The certified Gram filter's step (shaders/gram.comp): one workgroup per
-- sequence, `steps` steps per dispatch, the state in registers, shared
-- memory and, past both, global memory.
local divgpu = require "divgpu"

-- The state layout, declared once in shaders/include/gram_state.glsl.
local function state_layout()
    local source = assert(divgpu.include_source("gram_state.glsl"), "gram_state.glsl is not embedded")
    local c = {}
    for name, value in source:gmatch("const uint GRAM_([%w_]+) = (%d+)u;") do c[name] = tonumber(value) end
    return c
end
local layout = state_layout()

return {
    shader = "gram",
    bindings = { "embeddings", "inv_norm", "row_norms", "job_factors", "g_blocks", "centroids",
                 "approx", "winners", "state_f64", "state_u32" },
    push = { "num_items", "dim", "first_step", "steps", "ring", "block_rows", "shared_count" },
    constants = { workgroup_size = 0, max_dim = 1, window_capacity = 2, reg_slots = 3, shared_slots = 4,
                  dim_slots = 5, subgroup_slots = 6, stage_rows = 7 },
    state_u32_words = layout.STATE_U32,
    state_f64_words = layout.STATE_F64,
    -- 1-based offsets into a sequence's words, for Lua arrays.
    previous = layout.S_PREVIOUS + 1,
    window_total = layout.S_WINDOW_TOTAL + 1, window_ones = layout.S_WINDOW_ONES + 1,
    fallbacks = layout.S_FALLBACKS + 1, window_max = layout.S_WINDOW_MAX + 1,
    hist_first = layout.S_HIST, hist_bins = layout.HIST_BINS,
    t_norms = layout.T_NORMS + 1, t_ratio = layout.T_RATIO + 1,
}
