-- G = E Eᵀ rows [row_begin, row_end) into one block of G (shaders/gram_build.comp).
return {
    shader = "gram_build",
    bindings = { "embeddings" },  -- rows layout; G's block is reached by device address
    push = { "num_items", "dim", "row_begin", "row_end", "block_row0", "block_lo", "block_hi" },
    constants = {},
    tile = 64,  -- G entries per workgroup side
}
