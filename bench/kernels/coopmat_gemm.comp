#version 450
// The tensor filter's product at its shape, C = Q Eᵀ (Q: rows x D, E: cols x
// D, both row-major), through VK_KHR_cooperative_matrix with operands loaded
// straight from global memory (L2): each subgroup computes TR x TC tiles of
// M x N, K dimensions at a time. A first measure of the rate a plain kernel
// reaches at this shape, beside coopmat_peak's register-only rate.
// Defines: A_TYPE, C_TYPE, M, N, K, TR, TC.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#ifndef A_TYPE
#define A_TYPE int8_t
#define C_TYPE int32_t
#endif
#ifndef M
#define M 16
#define N 16
#define K 32
#endif
#ifndef TR
#define TR 2
#define TC 4
#endif
layout(local_size_x = 128) in;  // 4 subgroups of 32
layout(push_constant) uniform Push { uint rows; uint cols; uint dim; } pc;
layout(std430, set = 0, binding = 0) readonly buffer Q { A_TYPE q[]; };
layout(std430, set = 0, binding = 1) readonly buffer E { A_TYPE e[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { C_TYPE outputs[]; };

void main() {
    const uint subgroup = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
    const uint col_blocks = pc.cols / (N * TC);
    const uint r0 = (subgroup / col_blocks) * M * TR;
    const uint c0 = (subgroup % col_blocks) * N * TC;
    if (r0 >= pc.rows) return;
    coopmat<C_TYPE, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator> acc[TR][TC];
    [[unroll]] for (uint i = 0u; i < TR; ++i) {
        [[unroll]] for (uint j = 0u; j < TC; ++j) acc[i][j] = coopmat<C_TYPE, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator>(C_TYPE(0));
    }
    for (uint k0 = 0u; k0 < pc.dim; k0 += K) {
        coopmat<A_TYPE, gl_ScopeSubgroup, M, K, gl_MatrixUseA> a[TR];
        coopmat<A_TYPE, gl_ScopeSubgroup, K, N, gl_MatrixUseB> b[TC];
        [[unroll]] for (uint i = 0u; i < TR; ++i) coopMatLoad(a[i], q, (r0 + i * M) * pc.dim + k0, pc.dim, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint j = 0u; j < TC; ++j) coopMatLoad(b[j], e, (c0 + j * N) * pc.dim + k0, pc.dim, gl_CooperativeMatrixLayoutColumnMajor);
        [[unroll]] for (uint i = 0u; i < TR; ++i) {
            [[unroll]] for (uint j = 0u; j < TC; ++j) acc[i][j] = coopMatMulAdd(a[i], b[j], acc[i][j]);
        }
    }
    // Keep the results (a reduced copy: the whole C would be 4 GB at the filter's shape).
    [[unroll]] for (uint i = 1u; i < TR; ++i) {
        [[unroll]] for (uint j = 0u; j < TC; ++j) acc[0][j] = coopmat<C_TYPE, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator>(acc[0][j] + acc[i][j]);
    }
    [[unroll]] for (uint j = 1u; j < TC; ++j) acc[0][0] = coopmat<C_TYPE, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator>(acc[0][0] + acc[0][j]);
    coopMatStore(acc[0][0], outputs, (subgroup % 1024u) * M * N, N, gl_CooperativeMatrixLayoutRowMajor);
}
