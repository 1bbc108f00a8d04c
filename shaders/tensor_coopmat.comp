#version 450
// The tensor filter's products phase on tensor cores (VK_KHR_cooperative_matrix,
// int8 x int8 -> int32, 16 x 16 x 32): the same integers A_2, A_3 as
// tensor.comp's plain PHASE_PRODUCTS (shaders/tensor.md section 2: int32 sums
// of int8 products are exact in any order), so the same â and, over the
// tiles, the same minima: all the decision reads (it computes the â of the
// few tiles that reach its window again, tensor.md section 6).
//
// A workgroup takes TILE_S sequences x TILE_C candidates: CM_WR x CM_WC
// subgroups, each CM_FR x CM_FC blocks of 16 x 16 pairs (two accumulators a
// block, A_2 and A_3: three MulAdds a 32-byte step). CM_KSTEPS 32-byte steps
// of the slices are staged in shared memory at a time, in CM_STAGES buffers
// (the next stage loaded into registers during this one's products), so a
// centroid's slices serve TILE_C candidates and a table row's TILE_S
// sequences from shared memory, not from the L2 a subgroup at a time.
// The slices are the same buffers as tensor.comp's, read here as 16-byte
// vectors (four int8 a u32, little-endian), rows padded to a multiple of 32
// bytes, sequences and candidates to multiples of 16 (src/contract/tensor.rs
// and lua/divgpu/methods/tensor.lua allocate them so); rows past the padding
// are staged as zeros.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require

// The campaign's parity check (every pair's â also stored, as f64, in the
// binding `a_exact`: bench/kernels/coopmat_export.lua, the descriptor's
// `export`), its twin (A_3 without p_2 q_1: tests/kernels/coopmat_perturb.lua)
// and the bench's products-only levels (bench/kernels/coopmat_products_only.lua)
// are source patches outside shaders/, applied at run time by device.shader.
// The shipped tiling (lua/divgpu/methods/tensor.lua's COOPMAT_TILING says the
// same; tests/tensor_spec.lua checks it): 128 x 128 pairs a workgroup, 394
// useful TOPS on the H200 (bench/results/2026-12-04_h200_75d38f4). In the
// same day's calls every other tiling was slower: 64 x 64 (2,2,2,2,1,2)
// 272, 16 subgroups of 2 x 2 blocks (4,4,2,2,1,1) 318, 128 x 64 and 64 x 128
// 256-287 (..._ff5b76d, ..._f105c7b): one workgroup of 8 subgroups an SM
// with 8 blocks each reuses its staged rows best.
#ifndef CM_WR
#define CM_WR 4   // subgroups along the sequences
#define CM_WC 2   // subgroups along the candidates
#define CM_FR 2   // 16-row blocks a subgroup
#define CM_FC 4   // 16-column blocks a subgroup
#endif
#ifndef CM_KSTEPS
#define CM_KSTEPS 2  // 32-byte steps of the slices a stage
#endif
#ifndef CM_STAGES
// Stages in shared memory: 2 (the next stage stored during this one's
// products, one barrier a stage) or 1 (half the memory, so larger tiles fit
// in 48 KB; the next stage waits in registers, two barriers a stage).
#define CM_STAGES 1
#endif
#if CM_STAGES != 1 && CM_STAGES != 2
#error "tensor_coopmat: CM_STAGES is 1 or 2"
#endif
#define CM_ROW (2 * CM_KSTEPS + 1)  // 16-byte vectors a staged row: the steps and one of padding
const uint M = 16u, N = 16u, K = 32u;
const uint SUBGROUPS = CM_WR * CM_WC, THREADS = SUBGROUPS * 32u;
const uint TILE_S = CM_WR * CM_FR * M, TILE_C = CM_WC * CM_FC * N;
#if (CM_WC * CM_FC) % 2 != 0
#error "tensor_coopmat: CM_WC * CM_FC is even, so a tile's columns are whole mask words"
#endif
layout(local_size_x = THREADS) in;
// True where 128 A_2 + A_3 fits in int32 (D <= 1,032: tensor.md section 2),
// set by the host: the combine then forms that sum on the accumulators and
// reads one 16 x 16 block of sums back, not two.
layout(constant_id = 0) const bool FUSED_SUMS = false;

layout(push_constant) uniform Push {
    uint num_items;   // N
    uint sequences;   // S
    uint row_bytes;   // a slice row: ceil(D / 32) * 32 bytes
    uint seq_rows;    // S padded to a multiple of 16
    uint item_rows;   // N padded to a multiple of 16
    uint tiles;       // ceil(N / TILE_C): the partials a sequence has
} pc;

layout(std430, set = 0, binding = 0) readonly buffer ColumnWeights { double column_weight[]; };  // [N]: 2^e_j / |E_j|
layout(std430, set = 0, binding = 1) readonly buffer TableSlices { uvec4 table_slice[]; };       // [2][item_rows][row_bytes]
layout(std430, set = 0, binding = 2) readonly buffer CentroidSlices { uvec4 centroid_slice[]; }; // [2][seq_rows][row_bytes]
layout(std430, set = 0, binding = 3) readonly buffer Masks { uint mask[]; };
layout(std430, set = 0, binding = 4) readonly buffer StateF64 { double state_f64[]; };            // [S][4]
layout(std430, set = 0, binding = 5) writeonly buffer Partials { dvec2 partial_a[]; };
layout(std430, set = 0, binding = 6) writeonly buffer PartialIndex { uint partial_j[]; };

const uint F_EXPONENT = 1u, STATE_F64 = 4u;
#define INF uint64BitsToDouble(0x7ff0000000000000ul)
#define INDEX_NONE 0xffffffffu

// A staged row: CM_KSTEPS 32-byte steps of one slice (two vectors each) and
// one vector of padding, so the 16 rows a matrix load reads fall in distinct
// banks. Several steps a stage: more MulAdds between barriers, and the next
// stage's loads have longer to arrive.
const uint KSTEPS = CM_KSTEPS, ROW = CM_ROW, STAGE_BYTES = KSTEPS * K;
const uint A_ROWS = 2u * TILE_S, B_ROWS = 2u * TILE_C;      // [slice][row] of the centroids, then the table
const uint STAGE = (A_ROWS + B_ROWS) * ROW;                  // vectors a stage
const uint ROW_LOADS = 2u * KSTEPS;                          // vectors a staged row holds
const uint LOADS = ((A_ROWS + B_ROWS) * ROW_LOADS + THREADS - 1u) / THREADS;  // a thread's vectors a stage
// After the products the same memory holds the combine's: each subgroup's two
// 16 x 16 int32 sums, stored from its accumulators (SCRATCH vectors a
// subgroup), then, over the scratch once every subgroup is done with it, a
// tile row's two smallest â and the index of the smallest per (subgroup
// column, half of a 16-column block: `side`), as the bits of a dvec2 (a
// vector each) and a uint (four a vector).
const uint SCRATCH = 2u * M * N / 4u;
const uint PARTS = CM_WC * 2u;
const uint MINIMA_A = 0u, MINIMA_J = TILE_S * PARTS;
const uint MINIMA = MINIMA_J + TILE_S * PARTS / 4u;
const uint EPILOGUE = SUBGROUPS * SCRATCH > MINIMA ? SUBGROUPS * SCRATCH : MINIMA;
const uint SHARED = CM_STAGES * STAGE > EPILOGUE ? CM_STAGES * STAGE : EPILOGUE;
shared uvec4 stage[SHARED];
const uint MASK_WORDS = TILE_C / 32u;  // a row's mask words in a tile (c0 a multiple of TILE_C)
shared double tile_weight[TILE_C];
shared double row_scale[TILE_S];
shared uint tile_mask[TILE_S * MASK_WORDS];

uint words32() { return (pc.num_items + 31u) / 32u; }

// Staged vector v of the stage at byte k0: row v / ROW_LOADS of the stage
// (the centroids' slices, then the table's), vector v % ROW_LOADS of it;
// zeros past the row's bytes (a last stage of fewer steps adds nothing).
void load_stage(uint s0, uint c0, uint k0, out uvec4 pre[LOADS]) {
    const uint vectors = pc.row_bytes / 16u;
    [[unroll]] for (uint l = 0u; l < LOADS; ++l) {
        const uint v = gl_LocalInvocationID.x + l * THREADS, row = v / ROW_LOADS, w = k0 / 16u + v % ROW_LOADS;
        uvec4 x = uvec4(0u);
        if (w < vectors) {
            if (row < A_ROWS) {
                const uint slice = row / TILE_S, s = s0 + row % TILE_S;
                if (s < pc.seq_rows) x = centroid_slice[(slice * pc.seq_rows + s) * vectors + w];
            } else if (row < A_ROWS + B_ROWS) {
                const uint slice = (row - A_ROWS) / TILE_C, c = c0 + (row - A_ROWS) % TILE_C;
                if (c < pc.item_rows) x = table_slice[(slice * pc.item_rows + c) * vectors + w];
            }
        }
        pre[l] = x;
    }
}

void store_stage(uint b, uvec4 pre[LOADS]) {
    [[unroll]] for (uint l = 0u; l < LOADS; ++l) {
        const uint v = gl_LocalInvocationID.x + l * THREADS;
        if (v < (A_ROWS + B_ROWS) * ROW_LOADS) stage[b * STAGE + v / ROW_LOADS * ROW + v % ROW_LOADS] = pre[l];
    }
}

#define ACC coopmat<int32_t, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator>
#define MAT_A coopmat<int8_t, gl_ScopeSubgroup, M, K, gl_MatrixUseA>
#define MAT_B coopmat<int8_t, gl_ScopeSubgroup, K, N, gl_MatrixUseB>

// The stage at vector `base`: its KSTEPS steps' MulAdds into main's
// accumulators (a2 += p1 q1, a3 += p1 q2 + p2 q1). A macro, not a function:
// with the accumulators at module scope for a function, every tiling ran at
// 72-76 useful TOPS on the H200; the same loop on main's own arrays, 171 at
// 64 x 64 (bench/results/2026-12-03_h200_a1d1ff9 and _d3d92a4).
#define PRODUCTS(base) \
    [[unroll]] for (uint ks = 0u; ks < KSTEPS; ++ks) { \
        const uint at = (base) + 2u * ks; /* the step's first vector in a staged row */ \
        MAT_A p1[CM_FR], p2[CM_FR]; \
        [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) { \
            const uint r = (wr * CM_FR + fr) * M; \
            coopMatLoad(p1[fr], stage, r * ROW + at, ROW, gl_CooperativeMatrixLayoutRowMajor); \
            coopMatLoad(p2[fr], stage, (TILE_S + r) * ROW + at, ROW, gl_CooperativeMatrixLayoutRowMajor); \
        } \
        [[unroll]] for (uint fc = 0u; fc < CM_FC; ++fc) { \
            const uint c = A_ROWS + (wc * CM_FC + fc) * N; \
            MAT_B q1, q2; \
            coopMatLoad(q1, stage, c * ROW + at, ROW, gl_CooperativeMatrixLayoutColumnMajor); \
            coopMatLoad(q2, stage, (TILE_C + c) * ROW + at, ROW, gl_CooperativeMatrixLayoutColumnMajor); \
            [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) { \
                const uint i = fr * CM_FC + fc; \
                a2[i] = coopMatMulAdd(p1[fr], q1, a2[i]); \
                a3[i] = coopMatMulAdd(p1[fr], q2, a3[i]); \
                a3[i] = coopMatMulAdd(p2[fr], q1, a3[i]); \
            } \
        } \
    }

// The combine (tensor.md section 2), a 16 x 16 block at a time through the
// subgroup's scratch: lane l takes row l / 2, columns (l % 2) * 8 .. + 8.
// â = (A_2 2^7 + A_3) * (2^(e_j) / |E_j| * 2^(e_c - 21)): the same real as
// tensor.comp's ldexp(A_2 2^-14 + A_3 2^-21, e_c + e_j) / |E_j|, rounded once,
// since the integer sum and both power-of-two scalings are exact in f64 (the
// exponents are those of f32 values, far inside f64's normal range).

// 2^(e_j) / |E_j| of column j (clamped into the table), exact in f64 and cut
// on the host with the slices (src/contract/tensor.rs: ldexp of the f32
// inverse norm).
double weight_of(uint j) { return column_weight[min(j, pc.num_items - 1u)]; }

// 2^(e_s - 21) of sequence s's row (0 past the sequences).
double scale_of(uint s) {
    return s < pc.sequences ? ldexp(1.0lf, int(state_f64[s * STATE_F64 + F_EXPONENT]) - 21) : 0.0lf;
}

// The mask word of row s holding columns j0 .. j0 + 31 (all masked past the rows or the table).
uint mask_of(uint s, uint j0) { return s < pc.sequences && j0 < pc.num_items ? mask[s * words32() + j0 / 32u] : ~0u; }

// A thread's share of the tile's constants, fetched before the products and
// kept in shared memory after them (the loads in flight meanwhile).
const uint HELD_W = (TILE_C + THREADS - 1u) / THREADS, HELD_S = (TILE_S + THREADS - 1u) / THREADS;
const uint HELD_M = (TILE_S * MASK_WORDS + THREADS - 1u) / THREADS;
struct TileConstants { double w[HELD_W]; double scale[HELD_S]; uint mask[HELD_M]; };

TileConstants fetch_tile_constants(uint s0, uint c0) {
    const uint t = gl_LocalInvocationID.x;
    TileConstants held;
    [[unroll]] for (uint h = 0u; h < HELD_W; ++h) held.w[h] = weight_of(c0 + min(t + h * THREADS, TILE_C - 1u));
    [[unroll]] for (uint h = 0u; h < HELD_S; ++h) held.scale[h] = scale_of(s0 + min(t + h * THREADS, TILE_S - 1u));
    [[unroll]] for (uint h = 0u; h < HELD_M; ++h) {
        const uint i = min(t + h * THREADS, TILE_S * MASK_WORDS - 1u);
        held.mask[h] = mask_of(s0 + i / MASK_WORDS, c0 + i % MASK_WORDS * 32u);
    }
    return held;
}

void keep_tile_constants(TileConstants held) {
    const uint t = gl_LocalInvocationID.x;
    [[unroll]] for (uint h = 0u; h < HELD_W; ++h) {
        if (t + h * THREADS < TILE_C) tile_weight[t + h * THREADS] = held.w[h];
    }
    [[unroll]] for (uint h = 0u; h < HELD_S; ++h) {
        if (t + h * THREADS < TILE_S) row_scale[t + h * THREADS] = held.scale[h];
    }
    [[unroll]] for (uint h = 0u; h < HELD_M; ++h) {
        if (t + h * THREADS < TILE_S * MASK_WORDS) tile_mask[t + h * THREADS] = held.mask[h];
    }
}

// The lane's 8 columns' weights from j0 (read once for its CM_FR rows).
void column_weights(uint c0, uint j0, out double w[8]) {
    [[unroll]] for (uint e = 0u; e < 8u; ++e) w[e] = tile_weight[j0 - c0 + e];
}

// Row s's 8 pairs from column j0 (a multiple of 8: one mask word): their â
// from the block's sums x2, x3 (A_2, A_3; or x2 = 128 A_2 + A_3 where
// FUSED_SUMS), the lane's two least â and the least's index kept. No early
// exit, so the 8 pairs unroll into straight-line code.
void take_block(uint s0, uint c0, uint s, uint j0, uvec4 x2[2], uvec4 x3[2], double w[8], double scale,
                inout double best1, inout double best2, inout uint best_j) {
    const bool row = s < pc.sequences;
    const uint masked = tile_mask[(s - s0) * MASK_WORDS + (j0 - c0) / 32u] >> (j0 % 32u);
    [[unroll]] for (uint e = 0u; e < 8u; ++e) {
        const uint j = j0 + e;
        double a = INF;
        if ((masked & (1u << e)) == 0u) {
            // The same integer either way, exact in f64.
            const double x = FUSED_SUMS ? double(int(x2[e / 4u][e % 4u]))
                                        : double(int(x2[e / 4u][e % 4u])) * 128.0lf + double(int(x3[e / 4u][e % 4u]));
            a = x * (w[e] * scale);
        }
        if (row && j < pc.num_items) {
            if (a < best1) {  // j ascending within a lane: the first of equal â is the least j
                best2 = best1;
                best1 = a;
                best_j = j;
            } else if (a < best2) {
                best2 = a;
            }
        }
    }
}

// The tile's partial per sequence row: each lane's minima through shared
// memory, folded by one thread a row.
void fold_minima(uint s0, uint tile, uint wr, uint wc, double best1[CM_FR], double best2[CM_FR], uint best_j[CM_FR]) {
    const uint lane = gl_SubgroupInvocationID, tid = gl_LocalInvocationID.x;
    // Orders every subgroup's last reads of its scratch before the minima overwrite it.
    barrier();
    [[unroll]] for (uint fr = 0u; fr < CM_FR; ++fr) {
        const uint at = ((wr * CM_FR + fr) * M + lane / 2u) * PARTS + wc * 2u + lane % 2u;
        stage[MINIMA_A + at] = uvec4(unpackDouble2x32(best1[fr]), unpackDouble2x32(best2[fr]));
        stage[MINIMA_J + at / 4u][at % 4u] = best_j[fr];
    }
    // Orders the parts' minima before one thread a row folds them.
    barrier();
    if (tid < TILE_S && s0 + tid < pc.sequences) {
        double a1 = INF, a2v = INF;
        uint j1 = INDEX_NONE;
        for (uint p = 0u; p < PARTS; ++p) {
            const uvec4 m = stage[MINIMA_A + tid * PARTS + p];
            const double x = packDouble2x32(m.xy), x2nd = packDouble2x32(m.zw);
            const uint jp = stage[MINIMA_J + (tid * PARTS + p) / 4u][(tid * PARTS + p) % 4u];
            // The parts interleave their columns: of equal â, the least j.
            if (x < a1 || (x == a1 && jp < j1)) {
                a2v = min(a1, x2nd);
                a1 = x;
                j1 = jp;
            } else {
                a2v = min(a2v, x);
            }
        }
        partial_a[(s0 + tid) * pc.tiles + tile] = dvec2(a1, a2v);
        partial_j[(s0 + tid) * pc.tiles + tile] = j1;
    }
}

void main() {
    const uint g = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint wr = g / CM_WC, wc = g % CM_WC;
    // Workgroups taken sequence tile fastest: those resident at once share a
    // tile of the table, which is then read from memory about once a step.
    const uint linear_group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint tile = linear_group / gl_NumWorkGroups.y;
    const uint s0 = linear_group % gl_NumWorkGroups.y * TILE_S, c0 = tile * TILE_C;
    ACC a2[CM_FR * CM_FC], a3[CM_FR * CM_FC];
    [[unroll]] for (uint i = 0u; i < CM_FR * CM_FC; ++i) {
        a2[i] = ACC(0);
        a3[i] = ACC(0);
    }
    const TileConstants held = fetch_tile_constants(s0, c0);
    uvec4 pre[LOADS];
    load_stage(s0, c0, 0u, pre);
#if CM_STAGES == 2
    store_stage(0u, pre);
    // Orders the first stage before any subgroup reads it.
    barrier();
    uint b = 0u;
    for (uint k0 = 0u; k0 < pc.row_bytes; k0 += STAGE_BYTES) {
        const bool more = k0 + STAGE_BYTES < pc.row_bytes;
        if (more) load_stage(s0, c0, k0 + STAGE_BYTES, pre);  // in flight during the products
        PRODUCTS(b * STAGE)
        if (more) store_stage(b ^ 1u, pre);
        // Orders this stage's reads before the next overwrites it (and the
        // last one's before the combine's), and the next stage's writes
        // before its reads.
        barrier();
        b ^= 1u;
    }
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
    keep_tile_constants(held);
    // Orders the constants' writes before the combine reads them.
    barrier();
    const uint scratch = g * SCRATCH;
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
}
