-- DIVGPU_GRAM_UNIFORM (shaders/gram.comp): a probe of the stall at 384 and
-- 512 threads on the H200 (bench/gram_stall_probe.lua uniform=1): the same
-- barriers in every step, whatever the window.
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
        uint winner, count;
        const double bound = step_bound(norm2, t);
]],
          replace = [[
        uint winner, count;
        // A probe of the stall at 384 and 512 threads on the H200
        // (bench/gram_stall_probe.lua uniform=1): the same barriers in every
        // step, whatever the window, so no barrier sits under a data-dependent
        // branch. The window and its rescoring as below (no twins here).
        const double bound = step_bound(norm2, t);
]] },
        { find = [[
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
]],
          replace = [[
        const bool single = second_a > tau;
        if (!single) collect_window(tau, parity);
        barrier();  // B2, every step
        count = single ? 1u : window_count[parity];
        const bool rescore = !single && count != 0u && count <= WINDOW_CAPACITY;
        const uint staged = rescore ? min(count, STAGE_ROWS) : 0u;
        uint best_key = 0xffffffffu, best_j = INDEX_NONE;
        for (uint e = tid; e < staged * pc.dim; e += threads) {
            const uint m = e / pc.dim, d = e - m * pc.dim;
            staged_rows[m * MAX_DIM + d] = LOAD_EMB(EMB_INDEX(window[m], d));
        }
        barrier();  // the staged rows, every step
        if (rescore) {
            for (uint m = tid; m < count; m += threads) {
                const uint j = window[m];
                const uint key = contract_key(m < staged ? staged_score(j, m, pc.dim) : contract_score(j, pc.dim));
                if (key < best_key || (key == best_key && contract_tie_key(j) < contract_tie_key(best_j))) {
                    best_key = key;
                    best_j = j;
]] },
        { find = [[
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
]],
          replace = [[
]] },
        { find = [[
            uint chosen_key;
            reduce_best(best_key, best_j, chosen_key, winner);  // B3 inside
]],
          replace = [[
        } else if (!single) {
            scan_all(best_key, best_j);
]] },
        { find = [[
        }

]],
          replace = [[
        }
        uint chosen_key, rescored;
        reduce_best(best_key, best_j, chosen_key, rescored);  // B3, every step
        winner = single ? best : rescored;

]] } },
}
