-- DIVGPU_GRAM_PERTURB (shaders/gram.comp): the non-vacuity twins of the
-- gram step: 1 = no exact rescoring (the window's approx trusted); 2 = the
-- row pending from the previous dispatch dropped; 3 = an overflowing window
-- cut to its capacity instead of a full scan; 4 = the smallest approx
-- trusted whatever the bound says.
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
shared uint window_count[2];
shared uint red_key[SUBGROUP_SLOTS];
]],
          replace = [[
shared uint window_count[2];
shared double window_a[WINDOW_CAPACITY];  // the twin's members' approx
shared uint red_key[SUBGROUP_SLOTS];
]] },
        { find = [[
        window[slot] = j;
    }
]],
          replace = [[
        window[slot] = j;
        window_a[slot] = a;
    }
]] },
        { find = [[
                    const uint key = contract_key(m < staged ? staged_score(j, m, pc.dim) : contract_score(j, pc.dim));
]],
          replace = [[
                    // Twin: trust the approximation, no exact rescoring.
                    const uint key = contract_key(float(window_a[m]));
]] } },
    [2] = {
        { find = [[
        bool add = true;
        add_row_and_scan(g_row(w), w, add);
]],
          replace = [[
        bool add = true;
        // Twin: the row pending from the previous dispatch is dropped.
        add = k != 0u;
        add_row_and_scan(g_row(w), w, add);
]] } },
    [3] = {
        { find = [[
                // The fallback (count == 0 cannot happen under the theorem; scanning keeps it safe).
                scan_all(best_key, best_j);
]],
          replace = [[
                // Twin: an overflowing window is cut to its capacity instead of a full scan.
                for (uint m = tid; m < WINDOW_CAPACITY; m += threads) {
                    const uint j = window[m];
                    const uint key = contract_key(contract_score(j, pc.dim));
                    if (key < best_key || (key == best_key && contract_tie_key(j) < contract_tie_key(best_j))) {
                        best_key = key;
                        best_j = j;
                    }
                }
]] } },
    [4] = {
        { find = [[
        if (second_a > tau) {
]],
          replace = [[
        // Twin: trust the smallest approx whatever the bound says.
        if (true) {
]] } },
}
