-- DIVGPU_GRAM_BUILD_PERTURB (shaders/gram_build.comp): the twins of G's
-- build: 1 and 2 (see each hunk's comment).
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
    return fma(x, y, acc);
]],
          replace = [[
    return acc + double(float(x * y));  // Twin: products rounded to f32 before the f64 sum.
]] } },
    [2] = {
        { find = [[
#define MIRROR_I(m) (i0 + ty + m * WY)
]],
          replace = [[
#define MIRROR_I(m) ((i0 + ty + m * WY) ^ 1u)  // Twin: the mirror's neighbouring columns swapped.
]] } },
}
