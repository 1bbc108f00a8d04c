-- DIVGPU_GRAM_FLOOR (shaders/gram.comp): timing only, not exact: each step
-- adds the row and takes the smallest approx; the per-step floor of this
-- design (bench/gram_tune.lua floor, bench/gram_stall_probe.lua floor=1).
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
        const dvec2 norms = add_to_centroid(w);
        chosen_norms += row_norm[w];
]],
          replace = [[
        const dvec2 norms = dvec2(0.0lf);
]] },
        { find = [[
        const double bound = step_bound(norm2, t);
        const double tau = best_a + 2.0lf * bound;
        if (second_a > tau) {
            winner = best;  // the window is {best}: no chain
            count = 1u;
        } else {
            collect_window(tau, parity);
            // B2: orders the window's members and count before every thread reads them.
            barrier();
            count = window_count[parity];
            uint best_key = 0xffffffffu, best_j = INDEX_NONE;
            if (count != 0u && count <= WINDOW_CAPACITY) {
                const uint staged = min(count, STAGE_ROWS);
                for (uint e = tid; e < staged * pc.dim; e += threads) {
                    const uint m = e / pc.dim, d = e - m * pc.dim;
                    staged_rows[m * MAX_DIM + d] = LOAD_EMB(EMB_INDEX(window[m], d));
                }
                // Orders the staged rows before the chains read them.
                barrier();
                for (uint m = tid; m < count; m += threads) {
                    const uint j = window[m];
                    const uint key = contract_key(m < staged ? staged_score(j, m, pc.dim) : contract_score(j, pc.dim));
                    if (key < best_key || (key == best_key && contract_tie_key(j) < contract_tie_key(best_j))) {
                        best_key = key;
                        best_j = j;
                    }
                }
            } else {
                // The fallback (count == 0 cannot happen under the theorem; scanning keeps it safe).
                scan_all(best_key, best_j);
            }
            uint chosen_key;
            reduce_best(best_key, best_j, chosen_key, winner);  // B3 inside
        }
]],
          replace = [[
        winner = best;
        count = 1u;
]] } },
}
