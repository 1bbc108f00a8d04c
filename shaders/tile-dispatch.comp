#version 450
// The direct method, one dispatch per tile (docs/contract.md#shapes): a hard grid sync
// between tiles, the running best carried across them in `carry`. fp16-exact
// runs its filter tile by tile (PHASE_SCAN) and decides in one more dispatch
// (PHASE_DECIDE).
#extension GL_GOOGLE_include_directive : require
#include "scan_header.glsl"

layout(push_constant) uniform Push {
    SCAN_PUSH_FIELDS
    uint tile_begin;  // this dispatch scans candidates [tile_begin, tile_end)
    uint tile_end;
    uint phase;       // PHASE_SCAN: one tile; PHASE_DECIDE: fp16-exact's exact pass and the update
} pc;

// The running best of each sequence, carried from one tile dispatch to the next.
struct Carry { double score; uint index; uint pad; };
layout(std430, set = 0, binding = 5) buffer Carries { Carry carry[]; };              // [S]

#include "scan_common.glsl"

void main() {
    begin_step();
    float best = SCORE_NONE;
    uint best_j = INDEX_NONE;
#if DIVGPU_FP16_EXACT
    centroid_norms();
    if (pc.phase == PHASE_SCAN) {
        // One tile of the filter pass; T is carried as the running minimum.
        const double lowest = reduce_min(filter_range(pc.tile_begin, pc.tile_end, 1.0 / 0.0));
        if (tid == 0u) {
            carry[seq].score = pc.tile_begin == 0u ? lowest : min(carry[seq].score, lowest);
        }
        return;
    }
    decide_range(carry[seq].score, best, best_j);
    reduce_best(best, best_j);
    append(red_index[0]);
#else
    scan_range(pc.tile_begin, pc.tile_end, best, best_j);
    reduce_best(best, best_j);
    if (tid == 0u) {
        float carried = SCORE_NONE;
        uint carried_j = INDEX_NONE;
        if (pc.tile_begin != 0u) {
            carried = NARROW_F32(carry[seq].score);
            carried_j = carry[seq].index;
        }
        if (contract_better(red_score[0], red_index[0], carried, carried_j)) {
            carried = red_score[0];
            carried_j = red_index[0];
        }
        carry[seq].score = TO_F64(carried);
        carry[seq].index = carried_j;
        red_index[0] = carried_j;
    }
    // Orders thread 0's merged winner before every thread reads it.
    barrier();
    if (pc.tile_end == pc.num_items) {
        append(red_index[0]);
    }
#endif
}
