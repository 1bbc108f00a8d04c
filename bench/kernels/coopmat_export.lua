-- DIVGPU_COOPMAT_EXPORT (shaders/tensor_coopmat.comp): the campaign's
-- parity check (bench/tensor_paths.lua): every pair's â also stored, as
-- f64, in the binding `a_exact` (kernels/tensor_coopmat.lua's `export`).
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
layout(std430, set = 0, binding = 6) writeonly buffer PartialIndex { uint partial_j[]; };

]],
          replace = [[
layout(std430, set = 0, binding = 6) writeonly buffer PartialIndex { uint partial_j[]; };
layout(std430, set = 0, binding = 7) writeonly buffer AExact { double a_exact[]; };  // [S][N]

]] },
        { find = [[
        if (row && j < pc.num_items) {
            if (a < best1) {  // j ascending within a lane: the first of equal â is the least j
]],
          replace = [[
        if (row && j < pc.num_items) {
            a_exact[s * pc.num_items + j] = a;
            if (a < best1) {  // j ascending within a lane: the first of equal â is the least j
]] } },
}
