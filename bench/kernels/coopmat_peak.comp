#version 450
// The cooperative-matrix (tensor-core) rate of one shape and type through
// VK_KHR_cooperative_matrix: each subgroup keeps A, B and ACC accumulators
// in registers and runs UNROLL x ACC dependent-free MulAdds per iteration.
// Defines: A_TYPE, C_TYPE (e.g. int8_t / int32_t, float16_t / float), M, N, K.
// Counted as 2 M N K operations per MulAdd.
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
#define ACC 4
#define UNROLL 8
layout(local_size_x = 128) in;
layout(push_constant) uniform Push { uint iterations; } pc;
layout(std430, set = 0, binding = 0) readonly buffer In { A_TYPE inputs[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { C_TYPE outputs[]; };

void main() {
    coopmat<A_TYPE, gl_ScopeSubgroup, M, K, gl_MatrixUseA> a;
    coopmat<A_TYPE, gl_ScopeSubgroup, K, N, gl_MatrixUseB> b;
    coopMatLoad(a, inputs, 0, K, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(b, inputs, M * K, N, gl_CooperativeMatrixLayoutRowMajor);
    coopmat<C_TYPE, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator> acc[ACC];
    [[unroll]] for (uint k = 0u; k < ACC; ++k) acc[k] = coopmat<C_TYPE, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator>(C_TYPE(k));
    for (uint i = 0u; i < pc.iterations; ++i) {
        [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
            [[unroll]] for (uint k = 0u; k < ACC; ++k) acc[k] = coopMatMulAdd(a, b, acc[k]);
        }
    }
    [[unroll]] for (uint k = 1u; k < ACC; ++k) acc[0] = coopmat<C_TYPE, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator>(acc[0] + acc[k]);
    const uint subgroup = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
    coopMatStore(acc[0], outputs, (subgroup % 64u) * M * N, N, gl_CooperativeMatrixLayoutRowMajor);
}
