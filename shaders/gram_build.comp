#version 450
// G' = G diag(inv_norm), G = E Eᵀ, for the tile-rows [pc.tile_row_begin,
// pc.tile_row_end) of the upper triangle (shaders/gram.md, term G):
// G'[i][j] = (f32)((f64 dot product of rows i and j) * (f64) inv_norm[j]).
// The products of two f32 are exact in f64 and the sum runs d ascending in
// f64, so every device gives the same G' (tests compare it with the host's
// reference bit for bit). G is symmetric: a workgroup computes one tile
// (bi, bj) with bj >= bi once and writes it twice, G'[i][j] with inv_j and,
// off the diagonal, G'[j][i] with inv_i.
//
// A register-blocked f64 GEMM: a workgroup of WX x WY threads computes a
// TILE x TILE tile (TILE = WY * TM = WX * TN), each thread TM x TN entries
// in registers (rows ty + m * WY, columns tx + n * WX: neighbouring threads
// read neighbouring shared words and write neighbouring G' entries), from
// SLICE-wide slices of the two row panels staged in shared memory as f64
// (converted once when staged, not at every use); the next slice is read
// from the table into registers while the current one is multiplied.
//
// G' is reached by device address, in blocks of whole rows, so it may
// exceed the device's maxStorageBufferRange (64 GiB at N = 131,072).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : require
#include "flush.glsl"
#include "underflow.glsl"


// Doubles of padding after each slice row of a panel. Staging writes a
// warp's values down the SLICE rows (row stride TILE doubles, a multiple of
// the 16 bank pairs: with no padding every row of a store lands in the same
// banks, an 8-way conflict); a stride of TILE + 4 spreads them to the
// 2-way least a 256-byte store needs. The reads are unchanged. (On the H200
// it bought nothing measurable with 64 x 64 tiles: bench/RESULTS.md.)
#ifndef DIVGPU_BUILD_PAD
#define DIVGPU_BUILD_PAD 0
#endif

// Tile-rows per group of the workgroups' order (0: row after row; see main).
#ifndef DIVGPU_BUILD_GROUP
#define DIVGPU_BUILD_GROUP 0
#endif

// The column of the mirror's entry from microtile row m.
#define MIRROR_I(m) (i0 + ty + m * WY)

// The tiling: WX x WY threads, TM x TN entries each, SLICE dimensions per
// stage. Specialization constants by default (one SPIR-V for every device);
// with DIVGPU_BUILD_TILING defined, compile-time constants (BUILD_WX ...).
// The sizes of the register arrays are plain constants of their own
// (ACC_SLOTS = TM * TN, STAGE): NVIDIA's compiler kept arrays sized by an
// expression of constants in local memory, at a thirtieth of the f64 rate.
#ifdef DIVGPU_BUILD_TILING
layout(local_size_x = BUILD_WX, local_size_y = BUILD_WY) in;
const uint TM = BUILD_TM, TN = BUILD_TN, SLICE = BUILD_SLICE;
const uint ACC_SLOTS = BUILD_TM * BUILD_TN;
const uint STAGE = BUILD_WY * BUILD_TM * BUILD_SLICE / (BUILD_WX * BUILD_WY);
#else
layout(local_size_x_id = 0, local_size_y_id = 1) in;  // WX x WY threads
layout(constant_id = 2) const uint TM = 4;          // rows per thread
layout(constant_id = 3) const uint TN = 4;          // columns per thread
layout(constant_id = 4) const uint SLICE = 8;       // dimensions per staged slice
layout(constant_id = 5) const uint ACC_SLOTS = 16;  // TM * TN
layout(constant_id = 6) const uint STAGE = 2;       // TILE * SLICE / THREADS: table values a thread stages per panel
#endif
const uint WX = gl_WorkGroupSize.x;             // threads along a tile's columns
const uint WY = gl_WorkGroupSize.y;             // threads along its rows
const uint TILE = WY * TM;                      // == WX * TN (the host checks)
const uint THREADS = WX * WY;

layout(push_constant) uniform Push {
    uint num_items;        // N
    uint dim;              // D
    uint tile_row_begin;   // first tile-row of this dispatch
    uint tile_row_end;     // one past the last
    uint block_rows;       // G' rows per block of g_blocks
} pc;

layout(std430, set = 0, binding = 0) readonly buffer Embeddings { float emb[]; };     // [N][D], rows
layout(std430, set = 0, binding = 1) readonly buffer InvNorm { float inv_norm[]; };   // [N], from the host
layout(std430, set = 0, binding = 2) readonly buffer GBlocks { uvec2 g_block[]; };    // device addresses of G''s blocks

layout(buffer_reference, std430, buffer_reference_align = 4) writeonly buffer GRow { float g[]; };

shared double panel_i[SLICE][TILE + DIVGPU_BUILD_PAD];
shared double panel_j[SLICE][TILE + DIVGPU_BUILD_PAD];

GRow g_row(uint i) {
    const uint64_t base = packUint2x32(g_block[i / pc.block_rows]);
    return GRow(base + uint64_t(i % pc.block_rows) * uint64_t(pc.num_items) * 4ul);
}

// The next slice of both panels, read from the table while the current one
// is multiplied.
float next_i[STAGE], next_j[STAGE];

// One table value of a panel's slice (rows r0 .. r0 + TILE, dimensions
// d0 .. d0 + SLICE): this thread's s-th, zero past the table's edge.
float slice_value(uint r0, uint d0, uint e) {
    const uint row = r0 + e / SLICE, col = d0 + e % SLICE;
    return (row < pc.num_items && col < pc.dim) ? emb[row * pc.dim + col] : 0.0;
}

void load_slices(uint i0, uint j0, uint d0, uint flat_id) {
    [[unroll]] for (uint s = 0u; s < STAGE; ++s) {
        next_i[s] = slice_value(i0, d0, flat_id + s * THREADS);
        next_j[s] = slice_value(j0, d0, flat_id + s * THREADS);
    }
}

void store_slices(uint flat_id) {
    [[unroll]] for (uint s = 0u; s < STAGE; ++s) {
        const uint e = flat_id + s * THREADS;
        panel_i[e % SLICE][e / SLICE] = TO_F64(next_i[s]);
        panel_j[e % SLICE][e / SLICE] = TO_F64(next_j[s]);
    }
}

// One term of an entry's sum: the product of two f32 is exact in f64, so
// the fma rounds once, as a sum of exact products does, d ascending.
double product_sum(double x, double y, double acc) {
    return fma(x, y, acc);
}

#ifdef DIVGPU_BUILD_TILING
// The microtile as TM x TN named scalars (acc_m_n), spelled out by the
// preprocessor: no array the compiler could leave in local memory.
#define LIST_1(F) F(0)
#define LIST_2(F) F(0) F(1)
#define LIST_4(F) F(0) F(1) F(2) F(3)
#define LIST_8(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7)
#define PAIRS_1(F, m) F(m, 0)
#define PAIRS_2(F, m) F(m, 0) F(m, 1)
#define PAIRS_4(F, m) F(m, 0) F(m, 1) F(m, 2) F(m, 3)
#define PAIRS_8(F, m) F(m, 0) F(m, 1) F(m, 2) F(m, 3) F(m, 4) F(m, 5) F(m, 6) F(m, 7)
#define TRANSPOSED_1(F, n) F(0, n)
#define TRANSPOSED_2(F, n) F(0, n) F(1, n)
#define TRANSPOSED_4(F, n) F(0, n) F(1, n) F(2, n) F(3, n)
#define TRANSPOSED_8(F, n) F(0, n) F(1, n) F(2, n) F(3, n) F(4, n) F(5, n) F(6, n) F(7, n)
#define EXPAND(a, b) a##b
#define LIST(k) EXPAND(LIST_, k)
#define PAIRS(k) EXPAND(PAIRS_, k)
#define TRANSPOSED(k) EXPAND(TRANSPOSED_, k)
#define ROWS(F) LIST(BUILD_TM)(F)
#define COLUMNS(F) LIST(BUILD_TN)(F)

#define DECLARE_ONE(m, n) double acc_##m##_##n = 0.0lf;
#define DECLARE_ROW(m) PAIRS(BUILD_TN)(DECLARE_ONE, m)
#define LOAD_X(m) const double x_##m = panel_i[d][ty + m * WY];
#define LOAD_Y(n) const double y_##n = panel_j[d][tx + n * WX];
#define FMA_ONE(m, n) acc_##m##_##n = product_sum(x_##m, y_##n, acc_##m##_##n);
#define FMA_ROW(m) PAIRS(BUILD_TN)(FMA_ONE, m)
#define LOAD_INV_J(n) const float inv_j_##n = j0 + tx + n * WX < pc.num_items ? inv_norm[j0 + tx + n * WX] : 0.0;
#define LOAD_INV_I(m) const float inv_i_##m = i0 + ty + m * WY < pc.num_items ? inv_norm[i0 + ty + m * WY] : 0.0;
#define STORE_ONE(m, n) if (j0 + tx + n * WX < pc.num_items) row.g[j0 + tx + n * WX] = scaled(acc_##m##_##n, inv_j_##n);
#define STORE_ROW(m) if (i0 + ty + m * WY < pc.num_items) { GRow row = g_row(i0 + ty + m * WY); PAIRS(BUILD_TN)(STORE_ONE, m) }
// The mirror, down G''s columns. (Staged through shared memory and stored
// along rows instead, it built at 0.82x this rate at N = 131,072 and 1.03x at
// 65,536 on the H200: bench/RESULTS.md.)
#define MIRROR_ONE(m, n) if (MIRROR_I(m) < pc.num_items) row.g[MIRROR_I(m)] = scaled(acc_##m##_##n, inv_i_##m);
#define MIRROR_COLUMN(n) if (j0 + tx + n * WX < pc.num_items) { GRow row = g_row(j0 + tx + n * WX); TRANSPOSED(BUILD_TM)(MIRROR_ONE, n) }
#else
// The microtile, at module scope (as gram.comp's register page, which the
// driver keeps in registers).
double acc[ACC_SLOTS];
#endif

// The stored entry: the f64 dot product times inv, rounded once to f32.
float scaled(double dot, float inv) {
    // May flush where denormals are not kept: gram.comp's G_ETA covers it.
    return FTZ(float(dot * TO_F64(inv)));
}

void main() {
#if DIVGPU_BUILD_GROUP > 0
    // Tiles in groups of DIVGPU_BUILD_GROUP tile-rows, down each group's
    // columns: the workgroups resident at once then write G' rows of a few
    // tile-rows and tile-columns, not of one tile-row and hundreds of
    // tile-columns (the mirror's), so their stores touch fewer pages.
    const uint columns = gl_NumWorkGroups.x, rows = gl_NumWorkGroups.y;
    const uint linear = gl_WorkGroupID.y * columns + gl_WorkGroupID.x;
    const uint g0 = linear / (DIVGPU_BUILD_GROUP * columns) * DIVGPU_BUILD_GROUP;
    const uint rows_here = min(uint(DIVGPU_BUILD_GROUP), rows - g0);
    const uint within = linear - g0 * columns;
    const uint bi = pc.tile_row_begin + g0 + within % rows_here;
    const uint bj = within / rows_here;
#else
    const uint bi = pc.tile_row_begin + gl_WorkGroupID.y;
    const uint bj = gl_WorkGroupID.x;
#endif
    if (bj < bi || bi >= pc.tile_row_end) return;  // the lower triangle: written as the mirror of the upper
    const uint tx = gl_LocalInvocationID.x;
    const uint ty = gl_LocalInvocationID.y;
    const uint flat_id = ty * WX + tx;
    const uint i0 = bi * TILE, j0 = bj * TILE;

#ifdef DIVGPU_BUILD_TILING
    ROWS(DECLARE_ROW)
#else
    [[unroll]] for (uint mn = 0u; mn < ACC_SLOTS; ++mn) acc[mn] = 0.0lf;
#endif
    load_slices(i0, j0, 0u, flat_id);
    for (uint d0 = 0u; d0 < pc.dim; d0 += SLICE) {
        store_slices(flat_id);
        // Orders the panel writes before any thread reads them.
        barrier();
        if (d0 + SLICE < pc.dim) load_slices(i0, j0, d0 + SLICE, flat_id);
        [[unroll]] for (uint d = 0u; d < SLICE; ++d) {
#ifdef DIVGPU_BUILD_TILING
            ROWS(LOAD_X)
            COLUMNS(LOAD_Y)
            ROWS(FMA_ROW)
#else
            double x[TM], y[TN];
            [[unroll]] for (uint m = 0u; m < TM; ++m) x[m] = panel_i[d][ty + m * WY];
            [[unroll]] for (uint n = 0u; n < TN; ++n) y[n] = panel_j[d][tx + n * WX];
            [[unroll]] for (uint m = 0u; m < TM; ++m) {
                [[unroll]] for (uint n = 0u; n < TN; ++n) acc[m * TN + n] = product_sum(x[m], y[n], acc[m * TN + n]);
            }
#endif
        }
        // Orders this slice's reads before the next slice overwrites the panels.
        barrier();
    }

    // G'[i][j] = G_ij * inv_j, d ascending in every sum: the tile, and off
    // the diagonal its mirror G'[j][i] = G_ij * inv_i. (No `continue` in these
    // loops: NVIDIA's compiler then left them rolled.)
#ifdef DIVGPU_BUILD_TILING
    COLUMNS(LOAD_INV_J)
    ROWS(LOAD_INV_I)
    ROWS(STORE_ROW)
    if (bi == bj) return;  // a diagonal tile holds both triangles of its own square
    COLUMNS(MIRROR_COLUMN)
#else
    float inv_j[TN], inv_i[TM];
    [[unroll]] for (uint n = 0u; n < TN; ++n) {
        const uint j = j0 + tx + n * WX;
        inv_j[n] = j < pc.num_items ? inv_norm[j] : 0.0;
    }
    [[unroll]] for (uint m = 0u; m < TM; ++m) {
        const uint i = i0 + ty + m * WY;
        inv_i[m] = i < pc.num_items ? inv_norm[i] : 0.0;
        if (i < pc.num_items) {  // else past the table's last row
            GRow row = g_row(i);
            [[unroll]] for (uint n = 0u; n < TN; ++n) {
                const uint j = j0 + tx + n * WX;
                if (j < pc.num_items) row.g[j] = scaled(acc[m * TN + n], inv_j[n]);
            }
        }
    }
    if (bi == bj) return;  // a diagonal tile holds both triangles of its own square
    [[unroll]] for (uint n = 0u; n < TN; ++n) {
        const uint j = j0 + tx + n * WX;
        if (j < pc.num_items) {
            GRow row = g_row(j);
            [[unroll]] for (uint m = 0u; m < TM; ++m) {
                if (MIRROR_I(m) < pc.num_items) row.g[MIRROR_I(m)] = scaled(acc[m * TN + n], inv_i[m]);
            }
        }
    }
#endif
}
