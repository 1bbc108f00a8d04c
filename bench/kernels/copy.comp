#version 450
// The copy rate a compute shader reaches (vkCmdCopyBuffer ran at 0.85 TB/s on
// the H200, a fifth of what shaders and PyTorch move): 16-byte loads and
// stores, grid-stride, counted as bytes read + written.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint words4; } pc;  // uvec4 elements
layout(std430, set = 0, binding = 0) readonly buffer Src { uvec4 src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { uvec4 dst[]; };
void main() {
    for (uint i = gl_GlobalInvocationID.x; i < pc.words4; i += gl_NumWorkGroups.x * 256u) dst[i] = src[i];
}
