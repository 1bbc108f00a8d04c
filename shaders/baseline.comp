#version 450
// The direct method's reference shape (docs/contract.md#shapes): one workgroup per
// sequence, one strided pass over all candidates per dispatch (one step).
#extension GL_GOOGLE_include_directive : require
#include "scan_header.glsl"

layout(push_constant) uniform Push {
    SCAN_PUSH_FIELDS
} pc;

#include "scan_common.glsl"

void main() {
    begin_step();
    float best = SCORE_NONE;
    uint best_j = INDEX_NONE;
#if DIVGPU_FP16_EXACT
    centroid_norms();
    const double lowest = filter_range(0u, pc.num_items, 1.0 / 0.0);
    // The filter scores written above are read back by other threads below.
    memoryBarrierBuffer();
    decide_range(reduce_min(lowest), best, best_j);
#else
    scan_range(0u, pc.num_items, best, best_j);
#endif
    reduce_best(best, best_j);
    append(red_index[0]);
}
