#version 450
// The reference shape (SPEC section 5, `baseline`): one workgroup per
// sequence, one strided pass over all candidates per step, a per-thread
// running best, a workgroup reduction, then the update. One dispatch appends
// one step to every sequence of the batch.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;             // threads per workgroup, chosen by the driver
layout(constant_id = 1) const uint MAX_DIM = 1;  // shared centroid size (>= pc.dim)

#include "push_baseline.glsl"
#include "bindings.glsl"

shared float center[MAX_DIM];
shared float red_score[gl_WorkGroupSize.x];
shared uint red_index[gl_WorkGroupSize.x];

#include "contract.glsl"

void main() {
    const uint seq = gl_WorkGroupID.x;
    const uint tid = gl_LocalInvocationID.x;
    const uint threads = gl_WorkGroupSize.x;
    const uint dim = pc.dim;
    const uint words = (pc.num_items + 31u) / 32u;

    for (uint d = tid; d < dim; d += threads) {
        center[d] = contract_centroid(csum[seq * dim + d]);
    }
    // Orders the centroid writes before any thread's scan reads them.
    barrier();

    float best = SCORE_NONE;
    uint best_j = INDEX_NONE;
    for (uint j = tid; j < pc.num_items; j += threads) {
        if ((mask[seq * words + j / 32u] & (1u << (j % 32u))) != 0u) {
            continue;  // already in the sequence
        }
        const float s = contract_score(j, dim);
        if (contract_better(s, j, best, best_j)) {
            best = s;
            best_j = j;
        }
    }
    red_score[tid] = best;
    red_index[tid] = best_j;
    // Orders every thread's running best before the reduction reads it.
    barrier();

    // Pairwise tree over any workgroup size; the order is total, so any tree
    // shape finds the same winner.
    for (uint span = 1u; span < threads; span *= 2u) {
        const uint other = tid + span;
        if (tid % (2u * span) == 0u && other < threads) {
            if (contract_better(red_score[other], red_index[other], red_score[tid], red_index[tid])) {
                red_score[tid] = red_score[other];
                red_index[tid] = red_index[other];
            }
        }
        // Orders this level's writes before the next level's reads.
        barrier();
    }

    const uint w = red_index[0];
    if (tid == 0u) {
        winners[seq * pc.ring + pc.step % pc.ring] = w;
        mask[seq * words + w / 32u] |= 1u << (w % 32u);
    }
    for (uint d = tid; d < dim; d += threads) {
        csum[seq * dim + d] += double(emb[w * dim + d]);
    }
}
