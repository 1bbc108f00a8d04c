-- DIVGPU_GRAM_CHECK (shaders/gram.comp): the instrumented build: every step
-- rescores every unmasked candidate and records max |exact - a_j| / Bhat
-- (state_f64's GRAM_T_RATIO, which methods/gram.lua reads when the define
-- is passed).
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
shared uint red_best[SUBGROUP_SLOTS];

]],
          replace = [[
shared uint red_best[SUBGROUP_SLOTS];
shared double red_ratio[SUBGROUP_SLOTS];

]] },
        { find = [[
}


// ---- loading and saving the state around a dispatch ----
]],
          replace = [[
}

// max |exact - approx_j| / Bhat over this thread's unmasked candidates.
double check_ratio(double bound) {
    spill_register_page();
    double worst = 0.0lf;
    uint j;
    double a;
    for (uint q = 0u; candidate(q, j, a); ++q) {
        if (a != INF) worst = max(worst, abs(double(contract_score(j, pc.dim)) - a) / bound);
    }
    return worst;
}

// ---- loading and saving the state around a dispatch ----
]] },
        { find = [=[
    [[unroll]] for (uint b = 0u; b < GRAM_HIST_BINS; ++b) hist[b] = 0u;
    if (tid == 0u) {
]=],
          replace = [=[
    [[unroll]] for (uint b = 0u; b < GRAM_HIST_BINS; ++b) hist[b] = 0u;
    double worst_ratio = state_f64[seq * GRAM_STATE_F64 + GRAM_T_RATIO];
    if (tid == 0u) {
]=] },
        { find = [[

        if (tid == 0u) {
]],
          replace = [[

        {
            double r = subgroupMax(check_ratio(bound));
            if (subgroupElect()) red_ratio[gl_SubgroupID] = r;
            // Orders the ratios before thread 0 reads them.
            barrier();
            if (tid == 0u) {
                for (uint s = 0u; s < gl_NumSubgroups; ++s) worst_ratio = max(worst_ratio, red_ratio[s]);
            }
            // Orders every read of `center` and red_ratio before the next step writes them.
            barrier();
        }
        if (tid == 0u) {
]] },
        { find = [[
        state_f64[seq * GRAM_STATE_F64 + GRAM_T_NORMS] = chosen_norms;
    }
]],
          replace = [[
        state_f64[seq * GRAM_STATE_F64 + GRAM_T_NORMS] = chosen_norms;
        state_f64[seq * GRAM_STATE_F64 + GRAM_T_RATIO] = worst_ratio;
    }
]] } },
}
