-- DIVGPU_GRAM_WARP_UNIFORM (shaders/gram.comp): a probe of the stall
-- (bench/gram_stall_probe.lua warp=1): the branches around B2, the staged
-- rows' barrier and B3 on subgroup-uniform values.
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
        if (second_a > tau) {
]],
          replace = [[
        // A probe of the stall (bench/gram_stall_probe.lua warp=1): the
        // branches around B2, the staged rows' barrier and B3 on values the
        // compiler can see are the same in every lane of a subgroup.
        if (subgroupBroadcastFirst(second_a > tau)) {
]] },
        { find = [[
            count = window_count[parity];
            uint best_key = 0xffffffffu, best_j = INDEX_NONE;
]],
          replace = [[
            count = window_count[parity];
            count = subgroupBroadcastFirst(count);
            uint best_key = 0xffffffffu, best_j = INDEX_NONE;
]] } },
}
