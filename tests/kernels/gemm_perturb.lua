-- DIVGPU_GEMM_PERTURB (shaders/gemm.comp): the tests' twins: 1 = the append
-- forgets the last tile; 2 = a blocked table's last block is read at the
-- block before it; 3 = the two stages never swap; 4 = the dispatch's fold
-- (more tiles than one dimension allows) runs only its first row.
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
    const uint tiles = pc.tiles;
]],
          replace = [[
    const uint tiles = max(pc.tiles, 2u) - 1u;  // Twin: the last tile of candidates is forgotten.
]] } },
    [2] = {
        { find = [[
    const uint block = b;
]],
          replace = [[
    // Twin: the last block is read at the block before it (in bounds: that one is full).
    const uint block = (b > 0u && b == (pc.num_items - 1u) / pc.block_items) ? b - 1u : b;
]] } },
    [3] = {
        { find = [[
        b ^= 1u;
]],
          replace = [[
]] } },
    [4] = {
        { find = [[
    if (flat_group >= pc.tiles * seq_tiles) return;  // the fold's last row (whole workgroups)
    const uint j0 = flat_group / seq_tiles * TC, s0 = flat_group % seq_tiles * TS;
]],
          replace = [[
    if (flat_group >= pc.tiles * seq_tiles) return;  // the fold's last row (whole workgroups)
    if (gl_WorkGroupID.y > 0u) return;  // Twin: the fold's rows after the first never run.
    const uint j0 = flat_group / seq_tiles * TC, s0 = flat_group % seq_tiles * TS;
]] } },
}
