-- The tensor filter's products on tensor cores (shaders/tensor_coopmat.comp,
-- VK_KHR_cooperative_matrix int8 16 x 16 x 32 into int32): the same integers
-- as tensor.comp's products phase, a tile of sequences x candidates a
-- workgroup (its tiling: lua/divgpu/methods/tensor.lua's COOPMAT_TILING).
-- A kernel of the tensor method's job, not a method of its own.
return {
    bindings = { "column_weights", "table_slices", "centroid_slices", "masks", "state_f64", "partials",
                 "partial_index" },
    -- The campaign's parity check (bench/tensor_paths.lua): the variant that
    -- also stores every pair's â, and its bindings.
    export = { defines = { DIVGPU_COOPMAT_EXPORT = 1 },
               bindings = { "column_weights", "table_slices", "centroid_slices", "masks", "state_f64", "partials",
                            "partial_index", "a_exact" } },
    push = { "num_items", "sequences", "row_bytes", "seq_rows", "item_rows", "tiles" },
    constants = { fused_sums = 0 },
}
