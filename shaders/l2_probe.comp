#version 450
// Read-bandwidth probe for `divgpu info --measure-l2`: every round reads a
// window of `window` 16-byte words; the read position rotates by `shift`
// each round so no multiprocessor re-reads its own slice from L1. While the
// window fits in L2, rounds after the first hit L2; past it they stream from
// memory, and the bandwidth falls off.
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint window;  // 16-byte words read per round
    uint rounds;
    uint shift;   // rotation per round, in words (< window)
} pc;

layout(std430, set = 0, binding = 0) readonly buffer Data { uvec4 data[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Sink { uint sink[]; };

void main() {
    const uint gid = gl_GlobalInvocationID.x;
    const uint total = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint acc = 0u;
    uint offset = 0u;
    for (uint r = 0u; r < pc.rounds; ++r) {
        for (uint i = gid; i < pc.window; i += total) {
            uint j = i + offset;
            if (j >= pc.window) j -= pc.window;
            const uvec4 v = data[j];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        offset += pc.shift;
        if (offset >= pc.window) offset -= pc.window;
    }
    sink[gid] = acc;  // keeps the loads alive
}
