-- DIVGPU_TENSOR_PERTURB (shaders/tensor.comp): the twins: 1 = no exact
-- rescoring, 2 = p_2 q_1 dropped from A_3, 3 = the window collected from
-- the least â's tile alone.
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
                better(contract_key(contract_score(j, pc.dim)), j, best_key, best_j);
]],
          replace = [[
                // Twin: trust the approximation, no exact rescoring.
                better(contract_key(float(approx(s, j))), j, best_key, best_j);
]] } },
    [2] = {
        { find = [[
            a3 += x1 * y2 + x2 * y1;
]],
          replace = [[
            a3 += x1 * y2;  // Twin: p_2 q_1 dropped.
]] } },
    [3] = {
        { find = [[
    for (uint t = tid; t < pc.tiles; t += threads) {
        if (partial_a[s * pc.tiles + t].x <= tau) {
]],
          replace = [[
    for (uint t = tid; t < pc.tiles; t += threads) {
        if (t != j1 / pc.tile_width) continue;  // Twin: the other reaching tiles left out.
        if (partial_a[s * pc.tiles + t].x <= tau) {
]] } },
}
