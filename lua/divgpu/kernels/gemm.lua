-- The direct method as an exact GEMM (shaders/gemm.comp): each step, the
-- scores of every (sequence, candidate) pair of a batch by tiles, then the
-- append, one workgroup a sequence (the `phase` push field). Its job is its
-- own (methods/direct_gemm.lua, which methods/direct.lua names; this
-- descriptor is data and requires nothing): a batch keeps the centroids as f32 columns
-- and each tile's best.
return {
    method = "direct",
    bindings = { "embeddings", "inv_norm", "centroids", "centers", "masks", "winners", "partials" },
    push = { "num_items", "dim", "step", "ring", "sequences", "tiles", "phase", "block_items" },
    constants = {},
    phases = { scores = 0, append = 1 },
    -- A table past one storage buffer runs here in blocks by device address
    -- (methods/direct_gemm.lua), on devices that have them.
    takes_table_in_blocks = true,
}
