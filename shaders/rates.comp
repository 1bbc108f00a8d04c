#version 450
// The rates `--method auto` weighs (lua/divgpu/rates.lua), measured once per
// device and driver: the contract's chain (contract_fma: the device's fused
// fma, or the exact emulation where fma() is not fused), f64 fma, and copying.
// CHAINS independent chains a thread, so the pipes and not the latency bound
// the time; the values stay bounded and normal (no denormal path is timed).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
    uint mode;        // MODE_CHAIN, MODE_F64 or MODE_COPY
    uint iterations;  // loop iterations of CHAINS x 8 fmas (or copy elements a thread)
    uint words4;      // uvec4 elements to copy
} pc;

layout(std430, set = 0, binding = 0) writeonly buffer Out { double result[]; };
layout(std430, set = 0, binding = 1) readonly buffer Src { uvec4 src[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Dst { uvec4 dst[]; };

#define CONTRACT_NO_TABLE_SCORE
#include "contract.glsl"

const uint MODE_CHAIN = 0u, MODE_F64 = 1u, MODE_COPY = 2u;
#define CHAINS 8

void main() {
    const uint id = gl_GlobalInvocationID.x;
    if (pc.mode == MODE_COPY) {
        for (uint i = id; i < pc.words4; i += gl_NumWorkGroups.x * 64u) dst[i] = src[i];
        return;
    }
    double total = 0.0lf;
    if (pc.mode == MODE_CHAIN) {
        float a[CHAINS];
        [[unroll]] for (uint k = 0u; k < CHAINS; ++k) a[k] = float(id % 7u + k) * 0.125;
        for (uint i = 0u; i < pc.iterations; ++i) {
            [[unroll]] for (uint u = 0u; u < 8u; ++u) {
                [[unroll]] for (uint k = 0u; k < CHAINS; ++k) a[k] = chain_step(a[k], 0.999, 0.001);
            }
        }
        [[unroll]] for (uint k = 0u; k < CHAINS; ++k) total += double(a[k]);
    } else {
        double a[CHAINS];
        [[unroll]] for (uint k = 0u; k < CHAINS; ++k) a[k] = double(id % 7u + k) * 0.125lf;
        for (uint i = 0u; i < pc.iterations; ++i) {
            [[unroll]] for (uint u = 0u; u < 8u; ++u) {
                [[unroll]] for (uint k = 0u; k < CHAINS; ++k) a[k] = fma(a[k], 0.999lf, 0.001lf);
            }
        }
        [[unroll]] for (uint k = 0u; k < CHAINS; ++k) total += a[k];
    }
    result[id] = total;
}
