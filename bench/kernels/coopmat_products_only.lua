-- DIVGPU_COOPMAT_PRODUCTS_ONLY (shaders/tensor_coopmat.comp): bench only,
-- wrong results, to see what binds the tensor-core loop: 1 = the products
-- without the combine; 2 = and without global loads after the first stage
-- (the same stage multiplied every time); 3 = and the fragments loaded once
-- (MulAdds from registers, the barriers kept); 4 = as 2 without the
-- barriers.
--
-- A named source patch, applied at run time to the shipped source (its
-- includes expanded) by device.shader when a caller passes the define;
-- never compiled into the module. Each hunk's `find` must occur exactly
-- once (tests/patches_spec.lua checks every value still applies).
return {
    [1] = {
        { find = [[
// are source patches outside shaders/, applied at run time by device.shader.
// The shipped tiling (lua/divgpu/methods/tensor.lua's COOPMAT_TILING says the
]],
          replace = [[
// are source patches outside shaders/, applied at run time by device.shader.
const bool GLOBAL_LOADS = true;
const bool STAGE_BARRIERS = true;
// The shipped tiling (lua/divgpu/methods/tensor.lua's COOPMAT_TILING says the
]] },
        { find = [[
        const bool more = k0 + STAGE_BYTES < pc.row_bytes;
]],
          replace = [[
        const bool more = GLOBAL_LOADS && k0 + STAGE_BYTES < pc.row_bytes;
]] },
        { find = [[
        barrier();
        b ^= 1u;
]],
          replace = [[
        if (STAGE_BARRIERS) barrier();
        if (GLOBAL_LOADS) b ^= 1u;
]] },
        { find = [[
        barrier();
        store_stage(0u, pre);
]],
          replace = [[
        if (STAGE_BARRIERS) barrier();
        if (GLOBAL_LOADS || k0 == 0u) store_stage(0u, pre);
]] },
        { find = [[
        barrier();
        if (k0 + STAGE_BYTES < pc.row_bytes) load_stage(s0, c0, k0 + STAGE_BYTES, pre);  // in flight during the products
]],
          replace = [[
        if (STAGE_BARRIERS || k0 == 0u) barrier();
        if (GLOBAL_LOADS && k0 + STAGE_BYTES < pc.row_bytes) load_stage(s0, c0, k0 + STAGE_BYTES, pre);  // in flight during the products
]] },
        { find = [=[
    const uint rr = lane / 2u, side = lane % 2u;
    double best1[CM_FR], best2[CM_FR], scale[CM_FR];
    uint best_j[CM_FR];
    [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) {
        best1[fr] = INF;
        best2[fr] = INF;
        best_j[fr] = INDEX_NONE;
        const uint s = s0 + (wr * CM_FR + fr) * M + rr;
        scale[fr] = row_scale[s - s0];
    }
    [[unroll]] for (uint fc = 0u; fc < CM_FC; ++fc) {
        const uint j0 = c0 + (wc * CM_FC + fc) * N + side * 8u;
        double w[8];
        column_weights(c0, j0, w);
        [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) {
            const uint i = fr * CM_FC + fc;
            if (FUSED_SUMS) {
                coopMatStore(a2[i] * ACC(128) + a3[i], stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
            } else {
                coopMatStore(a2[i], stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
                coopMatStore(a3[i], stage, scratch + M * N / 4u, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
            }
            // Orders the subgroup's stores before its lanes read them.
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            const uint at = scratch + rr * (N / 4u) + side * 2u;
            const uvec4 x2[2] = { stage[at], stage[at + 1u] };
            uvec4 x3[2] = { uvec4(0u), uvec4(0u) };
            if (!FUSED_SUMS) x3 = uvec4[2](stage[at + M * N / 4u], stage[at + M * N / 4u + 1u]);
            // Orders the lanes' reads before the next block's stores.
            subgroupBarrier();
            take_block(s0, c0, s0 + (wr * CM_FR + fr) * M + rr, j0, x2, x3, w, scale[fr], best1[fr], best2[fr], best_j[fr]);
        }
    }
    fold_minima(s0, tile, wr, wc, best1, best2, best_j);
]=],
          replace = [=[
    // Every accumulator kept live through one stored sum; the partials are garbage.
    ACC sum = ACC(0);
    [[unroll]] for (uint i = 0u; i < CM_FR * CM_FC; ++i) sum = sum + a2[i] + a3[i];
    coopMatStore(sum, stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
    if (gl_LocalInvocationID.x < TILE_S && s0 + gl_LocalInvocationID.x < pc.sequences)
        partial_j[(s0 + gl_LocalInvocationID.x) * pc.tiles + tile] = stage[gl_LocalInvocationID.x].x;
]=] } },
    [2] = {
        { find = [[
// are source patches outside shaders/, applied at run time by device.shader.
// The shipped tiling (lua/divgpu/methods/tensor.lua's COOPMAT_TILING says the
]],
          replace = [[
// are source patches outside shaders/, applied at run time by device.shader.
const bool GLOBAL_LOADS = false;
const bool STAGE_BARRIERS = true;
// The shipped tiling (lua/divgpu/methods/tensor.lua's COOPMAT_TILING says the
]] },
        { find = [[
        const bool more = k0 + STAGE_BYTES < pc.row_bytes;
]],
          replace = [[
        const bool more = GLOBAL_LOADS && k0 + STAGE_BYTES < pc.row_bytes;
]] },
        { find = [[
        barrier();
        b ^= 1u;
]],
          replace = [[
        if (STAGE_BARRIERS) barrier();
        if (GLOBAL_LOADS) b ^= 1u;
]] },
        { find = [[
        barrier();
        store_stage(0u, pre);
]],
          replace = [[
        if (STAGE_BARRIERS) barrier();
        if (GLOBAL_LOADS || k0 == 0u) store_stage(0u, pre);
]] },
        { find = [[
        barrier();
        if (k0 + STAGE_BYTES < pc.row_bytes) load_stage(s0, c0, k0 + STAGE_BYTES, pre);  // in flight during the products
]],
          replace = [[
        if (STAGE_BARRIERS || k0 == 0u) barrier();
        if (GLOBAL_LOADS && k0 + STAGE_BYTES < pc.row_bytes) load_stage(s0, c0, k0 + STAGE_BYTES, pre);  // in flight during the products
]] },
        { find = [=[
    const uint rr = lane / 2u, side = lane % 2u;
    double best1[CM_FR], best2[CM_FR], scale[CM_FR];
    uint best_j[CM_FR];
    [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) {
        best1[fr] = INF;
        best2[fr] = INF;
        best_j[fr] = INDEX_NONE;
        const uint s = s0 + (wr * CM_FR + fr) * M + rr;
        scale[fr] = row_scale[s - s0];
    }
    [[unroll]] for (uint fc = 0u; fc < CM_FC; ++fc) {
        const uint j0 = c0 + (wc * CM_FC + fc) * N + side * 8u;
        double w[8];
        column_weights(c0, j0, w);
        [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) {
            const uint i = fr * CM_FC + fc;
            if (FUSED_SUMS) {
                coopMatStore(a2[i] * ACC(128) + a3[i], stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
            } else {
                coopMatStore(a2[i], stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
                coopMatStore(a3[i], stage, scratch + M * N / 4u, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
            }
            // Orders the subgroup's stores before its lanes read them.
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            const uint at = scratch + rr * (N / 4u) + side * 2u;
            const uvec4 x2[2] = { stage[at], stage[at + 1u] };
            uvec4 x3[2] = { uvec4(0u), uvec4(0u) };
            if (!FUSED_SUMS) x3 = uvec4[2](stage[at + M * N / 4u], stage[at + M * N / 4u + 1u]);
            // Orders the lanes' reads before the next block's stores.
            subgroupBarrier();
            take_block(s0, c0, s0 + (wr * CM_FR + fr) * M + rr, j0, x2, x3, w, scale[fr], best1[fr], best2[fr], best_j[fr]);
        }
    }
    fold_minima(s0, tile, wr, wc, best1, best2, best_j);
]=],
          replace = [=[
    // Every accumulator kept live through one stored sum; the partials are garbage.
    ACC sum = ACC(0);
    [[unroll]] for (uint i = 0u; i < CM_FR * CM_FC; ++i) sum = sum + a2[i] + a3[i];
    coopMatStore(sum, stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
    if (gl_LocalInvocationID.x < TILE_S && s0 + gl_LocalInvocationID.x < pc.sequences)
        partial_j[(s0 + gl_LocalInvocationID.x) * pc.tiles + tile] = stage[gl_LocalInvocationID.x].x;
]=] } },
    [3] = {
        { find = [[
// are source patches outside shaders/, applied at run time by device.shader.
// The shipped tiling (lua/divgpu/methods/tensor.lua's COOPMAT_TILING says the
]],
          replace = [[
// are source patches outside shaders/, applied at run time by device.shader.
const bool GLOBAL_LOADS = false;
const bool STAGE_BARRIERS = true;
// The shipped tiling (lua/divgpu/methods/tensor.lua's COOPMAT_TILING says the
]] },
        { find = [[

// The combine (tensor.md section 2), a 16 x 16 block at a time through the
]],
          replace = [=[

// Bench level 3: the first stage's fragments, loaded once, multiplied every time.
#define PRODUCTS_FROM_REGISTERS \
    [[unroll]] for (uint fc = 0u; fc < CM_FC; ++fc) { \
        [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) { \
            const uint i = fr * CM_FC + fc; \
            a2[i] = coopMatMulAdd(r1[fr], s1[fc], a2[i]); \
            a3[i] = coopMatMulAdd(r1[fr], s2[fc], a3[i]); \
            a3[i] = coopMatMulAdd(r2[fr], s1[fc], a3[i]); \
        } \
    }

// The combine (tensor.md section 2), a 16 x 16 block at a time through the
]=] },
        { find = [[
#if CM_STAGES == 2
]],
          replace = [[
]] },
        { find = [[
    // Orders the first stage before any subgroup reads it.
]],
          replace = [[
]] },
        { find = [[
    uint b = 0u;
    for (uint k0 = 0u; k0 < pc.row_bytes; k0 += STAGE_BYTES) {
        const bool more = k0 + STAGE_BYTES < pc.row_bytes;
        if (more) load_stage(s0, c0, k0 + STAGE_BYTES, pre);  // in flight during the products
        PRODUCTS(b * STAGE)
        if (more) store_stage(b ^ 1u, pre);
        // Orders this stage's reads before the next overwrites it (and the
        // last one's before the combine's), and the next stage's writes
        // before its reads.
]],
          replace = [=[
    MAT_A r1[CM_FR], r2[CM_FR];
    MAT_B s1[CM_FC], s2[CM_FC];
    [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) {
        const uint r = (wr * CM_FR + fr) * M;
        coopMatLoad(r1[fr], stage, r * ROW, ROW, gl_CooperativeMatrixLayoutRowMajor);
        coopMatLoad(r2[fr], stage, (TILE_S + r) * ROW, ROW, gl_CooperativeMatrixLayoutRowMajor);
    }
    [[unroll]] for (uint fc = 0u; fc < CM_FC; ++fc) {
        const uint c = A_ROWS + (wc * CM_FC + fc) * N;
        coopMatLoad(s1[fc], stage, c * ROW, ROW, gl_CooperativeMatrixLayoutColumnMajor);
        coopMatLoad(s2[fc], stage, (TILE_C + c) * ROW, ROW, gl_CooperativeMatrixLayoutColumnMajor);
    }
    for (uint k0 = 0u; k0 < pc.row_bytes; k0 += K) {
        PRODUCTS_FROM_REGISTERS
]=] },
        { find = [[
        b ^= 1u;
]],
          replace = [[
]] },
        { find = [[
#else
    for (uint k0 = 0u; k0 < pc.row_bytes; k0 += STAGE_BYTES) {
        // Orders the last stage's reads before this one's writes.
        barrier();
        store_stage(0u, pre);
        // Orders the stage's writes before its reads.
        barrier();
        if (k0 + STAGE_BYTES < pc.row_bytes) load_stage(s0, c0, k0 + STAGE_BYTES, pre);  // in flight during the products
        PRODUCTS(0u)
    }
    // Orders the last stage's reads before the combine's writes (the loops
    // above end on a barrier already).
    barrier();
#endif
]],
          replace = [[
]] },
        { find = [=[
    const uint rr = lane / 2u, side = lane % 2u;
    double best1[CM_FR], best2[CM_FR], scale[CM_FR];
    uint best_j[CM_FR];
    [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) {
        best1[fr] = INF;
        best2[fr] = INF;
        best_j[fr] = INDEX_NONE;
        const uint s = s0 + (wr * CM_FR + fr) * M + rr;
        scale[fr] = row_scale[s - s0];
    }
    [[unroll]] for (uint fc = 0u; fc < CM_FC; ++fc) {
        const uint j0 = c0 + (wc * CM_FC + fc) * N + side * 8u;
        double w[8];
        column_weights(c0, j0, w);
        [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) {
            const uint i = fr * CM_FC + fc;
            if (FUSED_SUMS) {
                coopMatStore(a2[i] * ACC(128) + a3[i], stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
            } else {
                coopMatStore(a2[i], stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
                coopMatStore(a3[i], stage, scratch + M * N / 4u, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
            }
            // Orders the subgroup's stores before its lanes read them.
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            const uint at = scratch + rr * (N / 4u) + side * 2u;
            const uvec4 x2[2] = { stage[at], stage[at + 1u] };
            uvec4 x3[2] = { uvec4(0u), uvec4(0u) };
            if (!FUSED_SUMS) x3 = uvec4[2](stage[at + M * N / 4u], stage[at + M * N / 4u + 1u]);
            // Orders the lanes' reads before the next block's stores.
            subgroupBarrier();
            take_block(s0, c0, s0 + (wr * CM_FR + fr) * M + rr, j0, x2, x3, w, scale[fr], best1[fr], best2[fr], best_j[fr]);
        }
    }
    fold_minima(s0, tile, wr, wc, best1, best2, best_j);
]=],
          replace = [=[
    // Every accumulator kept live through one stored sum; the partials are garbage.
    ACC sum = ACC(0);
    [[unroll]] for (uint i = 0u; i < CM_FR * CM_FC; ++i) sum = sum + a2[i] + a3[i];
    coopMatStore(sum, stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
    if (gl_LocalInvocationID.x < TILE_S && s0 + gl_LocalInvocationID.x < pc.sequences)
        partial_j[(s0 + gl_LocalInvocationID.x) * pc.tiles + tile] = stage[gl_LocalInvocationID.x].x;
]=] } },
    [4] = {
        { find = [[
// are source patches outside shaders/, applied at run time by device.shader.
// The shipped tiling (lua/divgpu/methods/tensor.lua's COOPMAT_TILING says the
]],
          replace = [[
// are source patches outside shaders/, applied at run time by device.shader.
const bool GLOBAL_LOADS = false;
const bool STAGE_BARRIERS = false;
// The shipped tiling (lua/divgpu/methods/tensor.lua's COOPMAT_TILING says the
]] },
        { find = [[
        const bool more = k0 + STAGE_BYTES < pc.row_bytes;
]],
          replace = [[
        const bool more = GLOBAL_LOADS && k0 + STAGE_BYTES < pc.row_bytes;
]] },
        { find = [[
        barrier();
        b ^= 1u;
]],
          replace = [[
        if (STAGE_BARRIERS) barrier();
        if (GLOBAL_LOADS) b ^= 1u;
]] },
        { find = [[
        barrier();
        store_stage(0u, pre);
]],
          replace = [[
        if (STAGE_BARRIERS) barrier();
        if (GLOBAL_LOADS || k0 == 0u) store_stage(0u, pre);
]] },
        { find = [[
        barrier();
        if (k0 + STAGE_BYTES < pc.row_bytes) load_stage(s0, c0, k0 + STAGE_BYTES, pre);  // in flight during the products
]],
          replace = [[
        if (STAGE_BARRIERS || k0 == 0u) barrier();
        if (GLOBAL_LOADS && k0 + STAGE_BYTES < pc.row_bytes) load_stage(s0, c0, k0 + STAGE_BYTES, pre);  // in flight during the products
]] },
        { find = [=[
    const uint rr = lane / 2u, side = lane % 2u;
    double best1[CM_FR], best2[CM_FR], scale[CM_FR];
    uint best_j[CM_FR];
    [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) {
        best1[fr] = INF;
        best2[fr] = INF;
        best_j[fr] = INDEX_NONE;
        const uint s = s0 + (wr * CM_FR + fr) * M + rr;
        scale[fr] = row_scale[s - s0];
    }
    [[unroll]] for (uint fc = 0u; fc < CM_FC; ++fc) {
        const uint j0 = c0 + (wc * CM_FC + fc) * N + side * 8u;
        double w[8];
        column_weights(c0, j0, w);
        [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) {
            const uint i = fr * CM_FC + fc;
            if (FUSED_SUMS) {
                coopMatStore(a2[i] * ACC(128) + a3[i], stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
            } else {
                coopMatStore(a2[i], stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
                coopMatStore(a3[i], stage, scratch + M * N / 4u, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
            }
            // Orders the subgroup's stores before its lanes read them.
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            const uint at = scratch + rr * (N / 4u) + side * 2u;
            const uvec4 x2[2] = { stage[at], stage[at + 1u] };
            uvec4 x3[2] = { uvec4(0u), uvec4(0u) };
            if (!FUSED_SUMS) x3 = uvec4[2](stage[at + M * N / 4u], stage[at + M * N / 4u + 1u]);
            // Orders the lanes' reads before the next block's stores.
            subgroupBarrier();
            take_block(s0, c0, s0 + (wr * CM_FR + fr) * M + rr, j0, x2, x3, w, scale[fr], best1[fr], best2[fr], best_j[fr]);
        }
    }
    fold_minima(s0, tile, wr, wc, best1, best2, best_j);
]=],
          replace = [=[
    // Every accumulator kept live through one stored sum; the partials are garbage.
    ACC sum = ACC(0);
    [[unroll]] for (uint i = 0u; i < CM_FR * CM_FC; ++i) sum = sum + a2[i] + a3[i];
    coopMatStore(sum, stage, scratch, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
    if (gl_LocalInvocationID.x < TILE_S && s0 + gl_LocalInvocationID.x < pc.sequences)
        partial_j[(s0 + gl_LocalInvocationID.x) * pc.tiles + tile] = stage[gl_LocalInvocationID.x].x;
]=] } },
}
