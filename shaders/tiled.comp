#version 450
// The direct method, tiled (docs/contract.md#shapes): the baseline's pass split into
// tiles of pc.tile_size candidates inside the shader; the running best is
// kept across tiles, never reset between them.
#extension GL_GOOGLE_include_directive : require
#include "scan_header.glsl"

layout(push_constant) uniform Push {
    SCAN_PUSH_FIELDS
    uint tile_size;   // candidates per tile of the in-shader tile loop
} pc;

#include "scan_common.glsl"

void main() {
    begin_step();
    float best = SCORE_NONE;
    uint best_j = INDEX_NONE;
    const uint n = pc.num_items;
#if DIVGPU_FP16_EXACT
    centroid_norms();
    double lowest = 1.0 / 0.0;
    for (uint begin = 0u; begin < n; begin += pc.tile_size) {
        lowest = filter_range(begin, min(begin + pc.tile_size, n), lowest);
    }
    // The filter scores written above are read back by other threads below.
    memoryBarrierBuffer();
    decide_range(reduce_min(lowest), best, best_j);
#else
    for (uint begin = 0u; begin < n; begin += pc.tile_size) {
        scan_range(begin, min(begin + pc.tile_size, n), best, best_j);
    }
#endif
    reduce_best(best, best_j);
    append(red_index[0]);
}
