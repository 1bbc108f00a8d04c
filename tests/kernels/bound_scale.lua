-- DIVGPU_BOUND_SCALE = x: the certified filters' bound multiplied by x (a
-- number as GLSL writes it: "1e-9", "0.01lf"); the tests shrink it and must
-- see the output change or the instrumented ratio pass 1. One hunk a
-- kernel: gram.comp's step bound, tensor.comp's, fp16-exact's filter bound
-- (include/fp16_exact.glsl, whose own factor is 2).
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    -- Any value: $VALUE stands for it. Each hunk applies where its kernel's text is.
    any = {
        { optional = true,
          find = "    return SLACK * ((1.0lf + U32) * err + U32 * amax + TINY);",
          replace = "    return double($VALUE) * SLACK * ((1.0lf + U32) * err + U32 * amax + TINY);" },
        { optional = true,
          find = "        const double bound = SLACK * ((1.0lf + U32) * err + (U32 + 2.0lf * E64) * amax + TINY);",
          replace = "        const double bound = double($VALUE) * SLACK * ((1.0lf + U32) * err + (U32 + 2.0lf * E64) * amax + TINY);" },
        { optional = true,
          find = "    return 2.0lf * (norm2 * k1 + double(inv_norm[j]) * (norm1 * k2 + double(dim) * k3) + tiny);",
          replace = "    return double($VALUE) * (norm2 * k1 + double(inv_norm[j]) * (norm1 * k2 + double(dim) * k3) + tiny);" },
    },
}
