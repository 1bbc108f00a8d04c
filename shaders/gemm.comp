#version 450
// The direct method as an exact GEMM (shape `gemm`): each step, the scores of
// a block of sequences against a block of candidates, the table's tile in
// shared memory serving every centroid of the block. Each (sequence,
// candidate) pair still has one accumulator and d ascending, one fused
// rounding an fma (the contract's chain, contract.glsl's chain_step): only
// the loop order across pairs differs from the baseline shape, never the
// arithmetic of a pair. Two phases a step (push constant `phase`):
//
//   PHASE_SCORES  a workgroup a tile: candidates j0 .. j0 + TC, sequences
//                 s0 .. s0 + TS; thread (tx, ty) owns the pairs (s0 + ROW_OF(m),
//                 j0 + COLUMN_OF(n)), rows and columns in groups of four
//                 neighbours, as named registers (microtile.glsl); the table's
//                 and the centroids' slices staged twice over, one barrier a
//                 slice; writes, per sequence, the tile's best unmasked
//                 candidate in the contract's order (contract_key,
//                 contract_tie_key) to partial[s][candidate tile].
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
// The tests' twins are source patches outside shaders/
// (tests/kernels/gemm_perturb.lua, DIVGPU_GEMM_PERTURB).
#extension GL_GOOGLE_include_directive : require
#ifdef DIVGPU_TABLE_BLOCKS
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

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
    const uint block = b;
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

// A thread's rows (and columns) come in groups of G_R (G_C) neighbours, read
// from shared memory as one vector: thread row ty holds local rows
// (g WY + ty) G_R + i for group g, component i. Each centroid and table value
// a thread reads per dimension is then one 128-bit load per four pairs'
// worth, not four scalar loads: the scalar form spent as many issue slots on
// shared loads as a quarter of its fmas.
#define G_R (TILE_ROWS < 4 ? TILE_ROWS : 4)
#define G_C (TILE_COLUMNS < 4 ? TILE_COLUMNS : 4)
#if TILE_ROWS >= 4
#define VEC_R vec4
#elif TILE_ROWS == 2
#define VEC_R vec2
#else
#define VEC_R float
#endif
#if TILE_COLUMNS >= 4
#define VEC_C vec4
#elif TILE_COLUMNS == 2
#define VEC_C vec2
#else
#define VEC_C float
#endif
#if TILE_ROWS == 1
#define COMP_R(v, i) (v)
#else
#define COMP_R(v, i) (v)[i]
#endif
#if TILE_COLUMNS == 1
#define COMP_C(v, i) (v)
#else
#define COMP_C(v, i) (v)[i]
#endif
const uint GROUPS_R = TS / G_R, GROUPS_C = TC / G_C;     // vectors a slice's dimension
const uint LOADS_C = (SLICE * GROUPS_R + THREADS - 1u) / THREADS;  // a thread's vectors a stage
const uint LOADS_E = (SLICE * GROUPS_C + THREADS - 1u) / THREADS;

// Two stages of slices, so one barrier a slice: the next slice is loaded
// into registers while this one is computed, then stored to the other stage.
// Centroids [d][sequence group], table [d][candidate group].
shared VEC_R slice_c[2][SLICE][GROUPS_R];
shared VEC_C slice_e[2][SLICE][GROUPS_C];
// A tile's best per sequence row: the least key, then the least tie among
// the threads holding that key (shared atomics: 8 bytes a row, not a row
// per thread).
shared uint row_key[TS], row_tie[TS];
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
// Local row of the thread's pair row m (column n): see G_R above.
#define ROW_OF(m) (((m) / G_R * WY + ty) * G_R + (m) % G_R)
#define COLUMN_OF(n) (((n) / G_C * WX + tx) * G_C + (n) % G_C)
#define DECLARE_ONE(m, n) float acc_##m##_##n = 0.0;
#define DECLARE_ROW(m) ROW_PAIRS(DECLARE_ONE, m)
#define LOAD_C(m) const float c_##m = COMP_R(cg[(m) / G_R], (m) % G_R);
#define LOAD_E(n) const float e_##n = COMP_C(eg[(n) / G_C], (n) % G_C);
#define FMA_ONE(m, n) acc_##m##_##n = chain_step(c_##m, e_##n, acc_##m##_##n);
#define FMA_ROW(m) ROW_PAIRS(FMA_ONE, m)
// One dimension d of stage b: every pair's next fma (d ascending: the contract's order).
#define DIMENSION(b, d) { \
        VEC_R cg[TILE_ROWS / G_R]; \
        VEC_C eg[TILE_COLUMNS / G_C]; \
        [[unroll]] for (uint g = 0u; g < TILE_ROWS / G_R; ++g) cg[g] = slice_c[b][d][g * WY + ty]; \
        [[unroll]] for (uint g = 0u; g < TILE_COLUMNS / G_C; ++g) eg[g] = slice_e[b][d][g * WX + tx]; \
        ROWS(LOAD_C) \
        COLUMNS(LOAD_E) \
        ROWS(FMA_ROW) \
    }
// The row's best over this thread's candidates (masked ones and those past N
// skipped), then the tile's by the shared atomics.
#define BEST_ONE(m, n) { \
        const uint j = j0 + COLUMN_OF(n); \
        if (s < pc.sequences && j < pc.num_items && !is_masked(s, j)) { \
            const uvec2 k = uvec2(contract_key(contract_mul(acc_##m##_##n, inv_norm[j])), contract_tie_key(j)); \
            best_##m = better(best_##m, k); \
        } \
    }
#define BEST_ROW(m) uvec2 best_##m = NO_CANDIDATE; { \
        const uint s = s0 + ROW_OF(m); \
        ROW_PAIRS(BEST_ONE, m) \
        atomicMin(row_key[ROW_OF(m)], best_##m.x); \
    }
#define TIE_ROW(m) if (best_##m.x == row_key[ROW_OF(m)]) atomicMin(row_tie[ROW_OF(m)], best_##m.y);

// A thread's share of the slice at d0: whole vectors of neighbouring
// sequences (centroids) and candidates (table), zeros past the edges. Vector
// v of a slice: centroids always (and the table by columns) neighbouring
// threads, neighbouring groups of one dimension, as memory lies; the table by
// rows neighbouring threads, one candidate group's neighbouring dimensions,
// so a warp's load touches a few rows, not one row a thread.
#define C_GROUP(v) ((v) % GROUPS_R)
#define C_DIM(v) ((v) / GROUPS_R)
#ifdef DIVGPU_COLUMNS
#define E_GROUP(v) ((v) % GROUPS_C)
#define E_DIM(v) ((v) / GROUPS_C)
#else
#define E_GROUP(v) ((v) / SLICE)
#define E_DIM(v) ((v) % SLICE)
#endif
void load_slice(uint s0, uint j0, uint d0, uint flat_id, out VEC_R pre_c[LOADS_C], out VEC_C pre_e[LOADS_E]) {
    [[unroll]] for (uint k = 0u; k < LOADS_C; ++k) {
        const uint v = flat_id + k * THREADS, g = C_GROUP(v), d = d0 + C_DIM(v);
        VEC_R x = VEC_R(0.0);
        [[unroll]] for (uint i = 0u; i < G_R; ++i) {
            const uint s = s0 + g * G_R + i;
            if (v < SLICE * GROUPS_R && s < pc.sequences && d < pc.dim) COMP_R(x, i) = centers[d * pc.sequences + s];
        }
        pre_c[k] = x;
    }
    [[unroll]] for (uint k = 0u; k < LOADS_E; ++k) {
        const uint v = flat_id + k * THREADS, g = E_GROUP(v), d = d0 + E_DIM(v);
        VEC_C x = VEC_C(0.0);
        [[unroll]] for (uint i = 0u; i < G_C; ++i) {
            const uint j = j0 + g * G_C + i;
            if (v < SLICE * GROUPS_C && j < pc.num_items && d < pc.dim) COMP_C(x, i) = table_value(j, d);
        }
        pre_e[k] = x;
    }
}

void store_slice(uint b, uint flat_id, VEC_R pre_c[LOADS_C], VEC_C pre_e[LOADS_E]) {
    [[unroll]] for (uint k = 0u; k < LOADS_C; ++k) {
        const uint v = flat_id + k * THREADS;
        if (v < SLICE * GROUPS_R) slice_c[b][C_DIM(v)][C_GROUP(v)] = pre_c[k];
    }
    [[unroll]] for (uint k = 0u; k < LOADS_E; ++k) {
        const uint v = flat_id + k * THREADS;
        if (v < SLICE * GROUPS_C) slice_e[b][E_DIM(v)][E_GROUP(v)] = pre_e[k];
    }
}

void scores() {
    const uint flat_id = gl_LocalInvocationID.x;
    const uint tx = flat_id % WX, ty = flat_id / WX;
    // The (candidate tiles) x (sequence tiles) workgroups, folded into the
    // dispatch's x by y within the device's limits (lavapipe allows 65,535 a
    // dimension: a million items are 65,536 tiles of 16), are taken sequence
    // tile fastest, so those resident at once share candidate tiles and a
    // table past the L2 is read from memory about once a step.
    const uint seq_tiles = (pc.sequences + TS - 1u) / TS;
    const uint flat_group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (flat_group >= pc.tiles * seq_tiles) return;  // the fold's last row (whole workgroups)
    const uint j0 = flat_group / seq_tiles * TC, s0 = flat_group % seq_tiles * TS;
    for (uint r = flat_id; r < TS; r += THREADS) { row_key[r] = 0xffffffffu; row_tie[r] = 0xffffffffu; }
    ROWS(DECLARE_ROW)
    VEC_R pre_c[LOADS_C];
    VEC_C pre_e[LOADS_E];
    load_slice(s0, j0, 0u, flat_id, pre_c, pre_e);
    store_slice(0u, flat_id, pre_c, pre_e);
    // Orders the first slice's writes (and the rows' initial bests) before any thread reads them.
    barrier();
    uint b = 0u;
    for (uint d0 = 0u; d0 < pc.dim; d0 += SLICE) {
        const bool more = d0 + SLICE < pc.dim;
        if (more) load_slice(s0, j0, d0 + SLICE, flat_id, pre_c, pre_e);  // in flight during the fmas
        if (d0 + SLICE <= pc.dim) {
            [[unroll]] for (uint d = 0u; d < SLICE; ++d) DIMENSION(b, d)
        } else {
            [[unroll]] for (uint d = 0u; d < SLICE; ++d) {
                if (d0 + d < pc.dim) DIMENSION(b, d)  // (uniform) exactly D fmas a chain, d ascending
            }
        }
        if (more) store_slice(b ^ 1u, flat_id, pre_c, pre_e);
        // Orders this slice's reads before the next overwrites its stage, and
        // the next slice's writes before its reads.
        barrier();
        b ^= 1u;
    }
    ROWS(BEST_ROW)
    // Orders every thread's least key before the ties among its holders.
    barrier();
    ROWS(TIE_ROW)
    // Orders every tie before one thread a row writes the tile's best.
    barrier();
    if (flat_id < TS) {
        const uint s = s0 + flat_id;
        if (s < pc.sequences) partial[s * pc.tiles + j0 / TC] = uvec2(row_key[flat_id], row_tie[flat_id]);
    }
}

// ---- PHASE_APPEND ----
void append() {
    const uint s = gl_WorkGroupID.x;
    const uint tid = gl_LocalInvocationID.x;
    uvec2 best = NO_CANDIDATE;
    const uint tiles = pc.tiles;
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
