-- DIVGPU_COOPMAT_PERTURB (shaders/tensor_coopmat.comp): the campaign's twin
-- (bench/tensor_paths.lua): A_3 without p_2 q_1.
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
                a3[i] = coopMatMulAdd(p2[fr], q1, a3[i]); \
]],
          replace = [[
                 \
]] } },
}
