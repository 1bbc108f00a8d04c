#version 450
#extension GL_GOOGLE_include_directive : require
// Device self-test of the arithmetic the fp32 contract relies on
// (docs/contract.md#rules-for-implementations). The host computes the same
// operations and compares bits; a device whose f32 multiply, f64 -> f32
// conversion or f64 add is not correctly rounded, or whose fma() is not fused
// and whose f64 emulation of it is not exact either, gets a clear error
// instead of silently different output. A device with an unfused fma() but
// exact emulation runs the emulated chain (FMA_EMULATED).
layout(local_size_x = 64) in;

layout(push_constant) uniform Push { uint cases; } pc;

layout(std430, set = 0, binding = 0) readonly buffer F32In { float f_in[]; };    // [cases][3]
layout(std430, set = 0, binding = 1) readonly buffer F64In { double d_in[]; };   // [cases][2]
layout(std430, set = 0, binding = 2) writeonly buffer Out { uint result[]; };    // [cases][6]

#include "fma.glsl"
#include "flush.glsl"  // FLUSH_DENORMALS (id 102): set on a context imitating a flushing device

void main() {
    const uint i = gl_GlobalInvocationID.x;
    if (i >= pc.cases) {
        return;  // bounds guard: the last workgroup may be partly empty
    }
    const float a = f_in[3u * i], b = f_in[3u * i + 1u], c = f_in[3u * i + 2u];
    precise float fused = FTZ(fma(FTZ(a), FTZ(b), FTZ(c)));
    precise float product = FTZ(FTZ(a) * FTZ(b));
    const double x = d_in[2u * i], y = d_in[2u * i + 1u];
    precise double sum = x + y;
    const float narrowed = FTZ(float(x));
    result[6u * i + 0u] = floatBitsToUint(fused);
    result[6u * i + 1u] = floatBitsToUint(product);
    result[6u * i + 2u] = floatBitsToUint(narrowed);
    const uvec2 halves = unpackDouble2x32(sum);
    result[6u * i + 3u] = halves.x;
    result[6u * i + 4u] = halves.y;
    result[6u * i + 5u] = floatBitsToUint(FTZ(fma_emulated(FTZ(a), FTZ(b), FTZ(c))));
}
