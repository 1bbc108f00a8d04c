-- G' = G diag(inv_norm), the upper triangle's tiles computed once and written
-- twice (shaders/gram_build.comp): tile-rows [tile_row_begin, tile_row_end).
return {
    -- A kernel of the gram method's job (G's build), not a method of its own.
    bindings = { "embeddings", "inv_norm", "g_blocks" },  -- rows layout; G''s blocks by device address
    push = { "num_items", "dim", "tile_row_begin", "tile_row_end", "block_rows" },
    constants = { wx = 0, wy = 1, tm = 2, tn = 3, slice = 4, acc_slots = 5, stage = 6 },
    --- A tiling: wx x wy threads, tm x tn entries each, slice dims per stage
    --- (compiled = true: as compile-time constants, the DIVGPU_BUILD_TILING variant;
    --- pad: the doubles a panel's slice row is padded by, DIVGPU_BUILD_PAD, 0 by default).
    --- Raises on a shape the kernel cannot run (tiles must be square and the
    --- staging even).
    tiling = function(t)
        local tile = t.wy * t.tm
        if t.wx * t.tn ~= tile then
            error(string.format("gram_build: tiles must be square (%d x %d threads, %d x %d each)", t.wx, t.wy, t.tm, t.tn), 3)
        end
        if (tile * t.slice) % (t.wx * t.wy) ~= 0 then
            error(string.format("gram_build: a %d x %d slice does not split over %d threads", tile, t.slice, t.wx * t.wy), 3)
        end
        local pad = t.pad or 0
        return { wx = t.wx, wy = t.wy, tm = t.tm, tn = t.tn, slice = t.slice, tile = tile, pad = pad,
                 acc_slots = t.tm * t.tn, stage = tile * t.slice / (t.wx * t.wy),
                 shared_bytes = 2 * t.slice * (tile + pad) * 8 }
    end,
}
