-- DIVGPU_TENSOR_CHECK (shaders/tensor.comp): the instrumented build: max
-- |score - â| / B̂ over every candidate-step (read by methods/tensor.lua
-- when the define is passed).
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
    if (j < pc.num_items && !is_masked(s, j)) a = approx(s, j);
    // The tile's two smallest and the index of the smallest (as gram.comp).
]],
          replace = [[
    if (j < pc.num_items && !is_masked(s, j)) a = approx(s, j);
    if (j < pc.num_items) a_exact[s * pc.num_items + j] = a;
    // The tile's two smallest and the index of the smallest (as gram.comp).
]] },
        { find = [[
    }
    // Append the winner: ring slot, mask bit, counters, f64 centroid sum.
]],
          replace = [[
    }
    {
        double worst = 0.0lf;
        for (uint j = tid; j < n; j += threads) {
            if (is_masked(s, j) || !sliceable) continue;
            worst = max(worst, abs(double(contract_score(j, pc.dim)) - a_exact[s * n + j]) / bound);
        }
        worst = workgroup_max(worst);
        if (tid == 0u) state_f64[s * STATE_F64 + F_RATIO] = max(state_f64[s * STATE_F64 + F_RATIO], worst);
    }
    // Append the winner: ring slot, mask bit, counters, f64 centroid sum.
]] } },
}
