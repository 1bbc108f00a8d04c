#version 450
// Device self-test of the arithmetic the fp32 contract relies on (SPEC
// section 2). The host computes the same operations and compares bits; a
// device whose fma() is not fused, or whose f32 multiply, f64 -> f32
// conversion or f64 add is not correctly rounded, gets a clear error instead
// of silently different output.
layout(local_size_x = 64) in;

layout(push_constant) uniform Push { uint cases; } pc;

layout(std430, set = 0, binding = 0) readonly buffer F32In { float f_in[]; };    // [cases][3]
layout(std430, set = 0, binding = 1) readonly buffer F64In { double d_in[]; };   // [cases][2]
layout(std430, set = 0, binding = 2) writeonly buffer Out { uint result[]; };    // [cases][5]

void main() {
    const uint i = gl_GlobalInvocationID.x;
    if (i >= pc.cases) {
        return;  // bounds guard: the last workgroup may be partly empty
    }
    const float a = f_in[3u * i], b = f_in[3u * i + 1u], c = f_in[3u * i + 2u];
    precise float fused = fma(a, b, c);
    precise float product = a * b;
    const double x = d_in[2u * i], y = d_in[2u * i + 1u];
    precise double sum = x + y;
    const float narrowed = float(x);
    result[5u * i + 0u] = floatBitsToUint(fused);
    result[5u * i + 1u] = floatBitsToUint(product);
    result[5u * i + 2u] = floatBitsToUint(narrowed);
    const uvec2 halves = unpackDouble2x32(sum);
    result[5u * i + 3u] = halves.x;
    result[5u * i + 4u] = halves.y;
}
