#version 450
// Counts how many iterations a shader loop really runs. Mesa's lavapipe
// (llvmpipe) stops loops after 65,535 iterations per invocation, silently;
// the driver reads the count to size workgroups so no scan loop hits it.
layout(local_size_x = 1) in;

layout(push_constant) uniform Push { uint iterations; } pc;

layout(std430, set = 0, binding = 0) writeonly buffer Count { uint count[]; };

void main() {
    uint c = 0u;
    for (uint i = 0u; i < pc.iterations; ++i) {
        c += 1u;
    }
    count[0] = c;
}
