#version 450
// The direct method as an exact GEMM (shape `gemm`): each step, the scores of
// a block of sequences against a block of candidates, the table's tile in
// shared memory serving every centroid of the block. Each (sequence,
// candidate) pair still has one accumulator and d ascending, one fused
// rounding an fma (the contract's chain, contract.glsl's chain_step): only
// the loop order across pairs differs from the baseline shape, never the
// arithmetic of a pair. Two phases a step (push constant `phase`):
//
//   PHASE_SCORES  workgroup (tile x, tile y): candidates j0 .. j0 + TC, sequences
//                 s0 .. s0 + TS; thread (tx, ty) owns the pairs (s0 + ty + m WY,
//                 j0 + tx + n WX) as named registers (microtile.glsl); writes, per
//                 sequence, the tile's best unmasked candidate in the contract's
//                 order (contract_key, contract_tie_key) to partial[s][tile x].
//   PHASE_APPEND  workgroup s: the best of its partials is the winner; it goes
//                 to the winners ring and the mask, its row of E to the f64
//                 centroid, and c = (f32) csum to the next step's centers.
//
// The tiling is compile-time (GEMM_WX, GEMM_WY threads, TILE_ROWS x
// TILE_COLUMNS pairs a thread, GEMM_SLICE dimensions a stage); the shipped
// variants set it per device kind. DIVGPU_COLUMNS: the table stored by
// columns (E[j][d] at d * N + j), whose tile loads are contiguous.
// DIVGPU_TABLE_BLOCKS: the table in blocks of `block_items` candidates, each
// its own allocation reached by device address (a table past one storage
// buffer: 4 GiB on the H200), each block in the layout above.
// DIVGPU_GEMM_PERTURB (tests' twins): 1 = the append forgets the last tile;
// 2 = a blocked table's last block is read at the block before it.
#extension GL_GOOGLE_include_directive : require
#ifdef DIVGPU_TABLE_BLOCKS
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#ifndef DIVGPU_GEMM_PERTURB
#define DIVGPU_GEMM_PERTURB 0  // non-vacuity twins (0 = off)
#endif
#ifndef GEMM_WX
#define GEMM_WX 16
#define GEMM_WY 16
#define TILE_ROWS 8
#define TILE_COLUMNS 8
#define GEMM_SLICE 8
#endif
// One dimension of threads (tx, ty derived from it): lavapipe's subgroups of a
// two-dimensional workgroup narrower than a subgroup gave wrong reductions.
layout(local_size_x = GEMM_WX * GEMM_WY) in;
const uint WX = GEMM_WX, WY = GEMM_WY, SLICE = GEMM_SLICE;
const uint TS = GEMM_WY * TILE_ROWS;      // sequences a tile
const uint TC = GEMM_WX * TILE_COLUMNS;   // candidates a tile
const uint THREADS = GEMM_WX * GEMM_WY;
const uint PHASE_SCORES = 0u, PHASE_APPEND = 1u;

layout(push_constant) uniform Push {
    uint num_items;   // N
    uint dim;         // D
    uint step;        // the step this dispatch appends (1 .. L-1)
    uint ring;        // slots per sequence in the winners ring
    uint sequences;   // S: sequences in the batch
    uint tiles;       // ceil(N / TC): candidate tiles, partials per sequence
    uint phase;
    uint block_items; // candidates a table block (DIVGPU_TABLE_BLOCKS; else unused)
} pc;

#ifdef DIVGPU_TABLE_BLOCKS
layout(std430, set = 0, binding = 0) readonly buffer Embeddings { uvec2 table_block[]; }; // the blocks' addresses
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer TableBlock { float v[]; };

// E[j][d]: block j / block_items, itself rows or columns of its own items.
float table_value(uint j, uint d) {
    const uint b = j / pc.block_items, local = j - b * pc.block_items;
    const uint items = min(pc.block_items, pc.num_items - b * pc.block_items);
#if DIVGPU_GEMM_PERTURB == 2
    // Twin: the last block is read at the block before it (in bounds: that one is full).
    const uint block = (b > 0u && b == (pc.num_items - 1u) / pc.block_items) ? b - 1u : b;
#else
    const uint block = b;
#endif
#ifdef DIVGPU_COLUMNS
    const uint i = d * items + local;
#else
    const uint i = local * pc.dim + d;
#endif
    return TableBlock(packUint2x32(table_block[block])).v[i];
}
#else
layout(std430, set = 0, binding = 0) readonly buffer Embeddings { float emb[]; };   // the table, rows or columns

float table_value(uint j, uint d) {
#ifdef DIVGPU_COLUMNS
    return emb[d * pc.num_items + j];
#else
    return emb[j * pc.dim + d];
#endif
}
#endif
layout(std430, set = 0, binding = 1) readonly buffer InvNorm { float inv_norm[]; }; // [N], from the host
layout(std430, set = 0, binding = 2) buffer Centroids { double csum[]; };           // [S][D], f64 sums
layout(std430, set = 0, binding = 3) buffer Centers { float centers[]; };           // [D][S], c = (f32) csum
layout(std430, set = 0, binding = 4) buffer Masks { uint mask[]; };                 // [S][ceil(N/32)] chosen bits
layout(std430, set = 0, binding = 5) writeonly buffer Winners { uint winners[]; };  // [S][ring]
layout(std430, set = 0, binding = 6) buffer Partials { uvec2 partial[]; };          // [S][tiles]: (key, tie)

#define CONTRACT_NO_TABLE_SCORE
#include "contract.glsl"
#include "microtile.glsl"

// The two slices of a stage: centroids [d][sequence], table [d][candidate].
shared float slice_c[SLICE][TS];
shared float slice_e[SLICE][TC];
// A tile's per-thread best, (key, tie) by sequence row and thread column.
shared uvec2 tile_best[TS][WX];
// PHASE_APPEND's subgroup partials.
shared uvec2 append_best[THREADS];

uint words() { return (pc.num_items + 31u) / 32u; }

bool is_masked(uint s, uint j) {
    return (mask[s * words() + j / 32u] & (1u << (j % 32u))) != 0u;
}

// The better of two (key, tie) pairs in the contract's order.
uvec2 better(uvec2 a, uvec2 b) {
    return (b.x < a.x || (b.x == a.x && b.y < a.y)) ? b : a;
}

const uvec2 NO_CANDIDATE = uvec2(0xffffffffu, 0xffffffffu);

// ---- PHASE_SCORES ----
#define DECLARE_ONE(m, n) float acc_##m##_##n = 0.0;
#define DECLARE_ROW(m) ROW_PAIRS(DECLARE_ONE, m)
#define LOAD_C(m) const float c_##m = slice_c[d][ty + m * WY];
#define LOAD_E(n) const float e_##n = slice_e[d][tx + n * WX];
#define FMA_ONE(m, n) acc_##m##_##n = chain_step(c_##m, e_##n, acc_##m##_##n);
#define FMA_ROW(m) ROW_PAIRS(FMA_ONE, m)
// The row's best over this thread's candidates (masked ones and those past N skipped).
#define BEST_ONE(m, n) { \
        const uint j = j0 + tx + n * WX; \
        if (s < pc.sequences && j < pc.num_items && !is_masked(s, j)) { \
            const uvec2 k = uvec2(contract_key(contract_mul(acc_##m##_##n, inv_norm[j])), contract_tie_key(j)); \
            best = better(best, k); \
        } \
    }
#define BEST_ROW(m) { \
        const uint s = s0 + ty + m * WY; \
        uvec2 best = NO_CANDIDATE; \
        ROW_PAIRS(BEST_ONE, m) \
        tile_best[ty + m * WY][tx] = best; \
    }

void stage(uint s0, uint j0, uint d0, uint flat_id) {
    for (uint e = flat_id; e < TS * SLICE; e += THREADS) {
        const uint r = e % TS, d = e / TS, s = s0 + r;
        slice_c[d][r] = (s < pc.sequences && d0 + d < pc.dim) ? centers[(d0 + d) * pc.sequences + s] : 0.0;
    }
    for (uint e = flat_id; e < TC * SLICE; e += THREADS) {
#ifdef DIVGPU_COLUMNS
        const uint c = e % TC, d = e / TC;   // neighbouring threads, neighbouring candidates
#else
        const uint c = e / SLICE, d = e % SLICE;  // neighbouring threads, one row's dimensions
#endif
        const uint j = j0 + c;
        slice_e[d][c] = (j < pc.num_items && d0 + d < pc.dim) ? table_value(j, d0 + d) : 0.0;
    }
}

void scores() {
    const uint flat_id = gl_LocalInvocationID.x;
    const uint tx = flat_id % WX, ty = flat_id / WX;
    const uint j0 = gl_WorkGroupID.x * TC, s0 = gl_WorkGroupID.y * TS;
    ROWS(DECLARE_ROW)
    for (uint d0 = 0u; d0 < pc.dim; d0 += SLICE) {
        stage(s0, j0, d0, flat_id);
        // Orders the slices' writes before any thread reads them.
        barrier();
        [[unroll]] for (uint d = 0u; d < SLICE; ++d) {
            if (d0 + d < pc.dim) {  // (uniform) exactly D fmas a chain, d ascending
                ROWS(LOAD_C)
                COLUMNS(LOAD_E)
                ROWS(FMA_ROW)
            }
        }
        // Orders this stage's reads before the next stage overwrites the slices.
        barrier();
    }
    ROWS(BEST_ROW)
    // Orders every thread's best before one thread a row folds them.
    barrier();
    if (flat_id < TS) {
        const uint s = s0 + flat_id;
        uvec2 best = NO_CANDIDATE;
        for (uint c = 0u; c < WX; ++c) best = better(best, tile_best[flat_id][c]);
        if (s < pc.sequences) partial[s * pc.tiles + gl_WorkGroupID.x] = best;
    }
}

// ---- PHASE_APPEND ----
void append() {
    const uint s = gl_WorkGroupID.x;
    const uint tid = gl_LocalInvocationID.x;
    uvec2 best = NO_CANDIDATE;
#if DIVGPU_GEMM_PERTURB == 1
    const uint tiles = max(pc.tiles, 2u) - 1u;  // Twin: the last tile of candidates is forgotten.
#else
    const uint tiles = pc.tiles;
#endif
    for (uint t = tid; t < tiles; t += THREADS) best = better(best, partial[s * pc.tiles + t]);
    const uint k = subgroupMin(best.x);
    const uint tie = subgroupMin(best.x == k ? best.y : 0xffffffffu);
    if (subgroupElect()) append_best[gl_SubgroupID] = uvec2(k, tie);
    // Orders the subgroups' best before every thread folds them.
    barrier();
    best = NO_CANDIDATE;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) best = better(best, append_best[g]);
    const uint w = contract_tie_key(best.y);  // its own inverse
    if (tid == 0u) {
        winners[s * pc.ring + pc.step % pc.ring] = w;
        mask[s * words() + w / 32u] |= 1u << (w % 32u);
    }
    for (uint d = tid; d < pc.dim; d += THREADS) {
        const double sum = csum[s * pc.dim + d] + TO_F64(table_value(w, d));
        csum[s * pc.dim + d] = sum;
        centers[d * pc.sequences + s] = contract_centroid(sum);
    }
}

void main() {
    if (pc.phase == PHASE_SCORES) scores(); else append();
}
