-- DIVGPU_UNDERFLOW_TERM = 0 (shaders/include/fp16_exact.glsl): the twin of
-- the fp16-exact bound's underflow term: K3 dropped (the bound as it was
-- before the underflow term). 1, the default, is the shipped bound.
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    default = 1,
    [0] = { {
        find = "    const double k3 = p32 * p32 * p32 * p32 / 1048576.0lf;  // 2^-148",
        replace = "    const double k3 = 0.0lf;  // Twin: the underflow term dropped" } },
}
