#version 450
// The tensor filter's products phase on tensor cores (VK_KHR_cooperative_matrix,
// int8 x int8 -> int32, 16 x 16 x 32): the same integers A_2, A_3, A_4 as
// tensor.comp's plain PHASE_PRODUCTS (shaders/tensor.md section 2: int32 sums
// of int8 products are exact in any order), so the same â, a_low and tile
// minima. A workgroup of four subgroups takes 16 sequences x 64 candidates;
// each subgroup 16 x 16, six MulAdds a 32-dimension step. The slices are the
// same buffers as tensor.comp's, read here as int8 arrays (four int8 a u32,
// little-endian), rows padded to a multiple of 32 bytes, sequences and
// candidates to multiples of 16 (lua/divgpu/tensor.lua allocates them so).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x = 128) in;
const uint M = 16u, N = 16u, K = 32u, SUBGROUPS = 4u;
const uint TILE_S = M, TILE_C = N * SUBGROUPS;   // 16 sequences x 64 candidates

layout(push_constant) uniform Push {
    uint num_items;   // N
    uint sequences;   // S
    uint row_bytes;   // a slice row: ceil(D / 32) * 32 bytes
    uint seq_rows;    // S padded to a multiple of 16
    uint item_rows;   // N padded to a multiple of 16
    uint tiles;       // ceil(N / 64): the partials a sequence has
} pc;

layout(std430, set = 0, binding = 0) readonly buffer InvNorm { float inv_norm[]; };
layout(std430, set = 0, binding = 1) readonly buffer TableSlices { int8_t table_slice[]; };       // [3][item_rows][row_bytes]
layout(std430, set = 0, binding = 2) readonly buffer Exponents { int table_exponent[]; };
layout(std430, set = 0, binding = 3) readonly buffer CentroidSlices { int8_t centroid_slice[]; }; // [3][seq_rows][row_bytes]
layout(std430, set = 0, binding = 4) readonly buffer Masks { uint mask[]; };
layout(std430, set = 0, binding = 5) readonly buffer StateF64 { double state_f64[]; };            // [S][4]
layout(std430, set = 0, binding = 6) writeonly buffer ALow { float a_low[]; };
layout(std430, set = 0, binding = 7) writeonly buffer Partials { dvec2 partial_a[]; };
layout(std430, set = 0, binding = 8) writeonly buffer PartialIndex { uint partial_j[]; };

const uint F_EXPONENT = 1u, STATE_F64 = 4u;
#define INF uint64BitsToDouble(0x7ff0000000000000ul)
#define INDEX_NONE 0xffffffffu

shared int sums[SUBGROUPS][3][M * N];   // A_2, A_3, A_4 of each subgroup's 16 x 16 pairs
shared double row_a1[TILE_S][8], row_a2[TILE_S][8];
shared uint row_j1[TILE_S][8];

uint words32() { return (pc.num_items + 31u) / 32u; }

bool is_masked(uint s, uint j) {
    return (mask[s * words32() + j / 32u] & (1u << (j % 32u))) != 0u;
}

// As tensor.comp's round_down: an f32 at most x that no flush mode changes.
float round_down(double x) {
    if (abs(x) < double(uintBitsToFloat(0x00800000u))) return x >= 0.0lf ? 0.0 : -uintBitsToFloat(0x00800000u);
    float f = float(x);
    if (double(f) > x) f = f > 0.0 ? uintBitsToFloat(floatBitsToUint(f) - 1u) : uintBitsToFloat(floatBitsToUint(f) + 1u);
    return f;
}

void main() {
    const uint g = gl_SubgroupID, tid = gl_LocalInvocationID.x;
    const uint s0 = gl_WorkGroupID.y * TILE_S, c0 = gl_WorkGroupID.x * TILE_C + g * N;
    const uint splane = pc.seq_rows * pc.row_bytes, tplane = pc.item_rows * pc.row_bytes;
    coopmat<int32_t, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator> a2 =
        coopmat<int32_t, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator>(0);
    coopmat<int32_t, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator> a3 = a2, a4 = a2;
    if (c0 < pc.item_rows) {  // (uniform in the subgroup) a subgroup past the padded table has nothing to do
        for (uint k0 = 0u; k0 < pc.row_bytes; k0 += K) {
            coopmat<int8_t, gl_ScopeSubgroup, M, K, gl_MatrixUseA> p1, p2, p3;
            coopmat<int8_t, gl_ScopeSubgroup, K, N, gl_MatrixUseB> q1, q2, q3;
            const uint ca = s0 * pc.row_bytes + k0, cb = c0 * pc.row_bytes + k0;
            coopMatLoad(p1, centroid_slice, ca, pc.row_bytes, gl_CooperativeMatrixLayoutRowMajor);
            coopMatLoad(p2, centroid_slice, splane + ca, pc.row_bytes, gl_CooperativeMatrixLayoutRowMajor);
            coopMatLoad(p3, centroid_slice, 2u * splane + ca, pc.row_bytes, gl_CooperativeMatrixLayoutRowMajor);
            coopMatLoad(q1, table_slice, cb, pc.row_bytes, gl_CooperativeMatrixLayoutColumnMajor);
            coopMatLoad(q2, table_slice, tplane + cb, pc.row_bytes, gl_CooperativeMatrixLayoutColumnMajor);
            coopMatLoad(q3, table_slice, 2u * tplane + cb, pc.row_bytes, gl_CooperativeMatrixLayoutColumnMajor);
            a2 = coopMatMulAdd(p1, q1, a2);
            a3 = coopMatMulAdd(p1, q2, a3);
            a3 = coopMatMulAdd(p2, q1, a3);
            a4 = coopMatMulAdd(p1, q3, a4);
            a4 = coopMatMulAdd(p3, q1, a4);
            a4 = coopMatMulAdd(p2, q2, a4);
        }
    }
    coopMatStore(a2, sums[g][0], 0, N, gl_CooperativeMatrixLayoutRowMajor);
    coopMatStore(a3, sums[g][1], 0, N, gl_CooperativeMatrixLayoutRowMajor);
    coopMatStore(a4, sums[g][2], 0, N, gl_CooperativeMatrixLayoutRowMajor);
    // Orders the subgroups' sums before every thread reads them.
    barrier();
    // Thread t: sequence row t / 8 of the tile, candidates (t % 8) * 8 .. + 8.
    const uint r = tid / 8u, part = tid % 8u, s = s0 + r;
    double best1 = INF, best2 = INF;
    uint best_j = INDEX_NONE;
    const int ce = s < pc.sequences ? int(state_f64[s * STATE_F64 + F_EXPONENT]) : 0;
    for (uint k = 0u; k < 8u; ++k) {
        const uint c = part * 8u + k, j = gl_WorkGroupID.x * TILE_C + c;
        if (s >= pc.sequences || j >= pc.num_items) continue;
        double a = INF;
        if (!is_masked(s, j)) {
            const uint sg = c / N, at = r * N + c % N;
            const double t = double(sums[sg][0][at]) * (1.0lf / 16384.0lf) + double(sums[sg][1][at]) * (1.0lf / 2097152.0lf)
                           + double(sums[sg][2][at]) * (1.0lf / 268435456.0lf);
            a = ldexp(t, ce + table_exponent[j]) * double(inv_norm[j]);
        }
        a_low[s * pc.num_items + j] = a == INF ? uintBitsToFloat(0x7f800000u) : round_down(a);
        if (a < best1) {
            best2 = best1;
            best1 = a;
            best_j = j;
        } else if (a < best2) {
            best2 = a;
        }
    }
    row_a1[r][part] = best1;
    row_a2[r][part] = best2;
    row_j1[r][part] = best_j;
    // Orders the threads' minima before one thread a row folds them.
    barrier();
    if (part == 0u && s < pc.sequences) {
        double a1 = INF, a2v = INF;
        uint j1 = INDEX_NONE;
        for (uint k = 0u; k < 8u; ++k) {
            if (row_a1[r][k] < a1) {
                a2v = min(a1, row_a2[r][k]);
                a1 = row_a1[r][k];
                j1 = row_j1[r][k];
            } else {
                a2v = min(a2v, row_a1[r][k]);
            }
        }
        partial_a[s * pc.tiles + gl_WorkGroupID.x] = dvec2(a1, a2v);
        partial_j[s * pc.tiles + gl_WorkGroupID.x] = j1;
    }
}
