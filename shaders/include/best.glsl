// The workgroup's best candidate in the contract's order (contract_better:
// smaller score, then smaller index), shared by every kernel that picks a
// winner. Needs, declared before the include: `shared float red_score[]`,
// `shared uint red_index[]` (one slot per thread), the globals `tid` and
// `threads`, and contract.glsl.

// Leaves the workgroup's best (score, index) in red_score[0] / red_index[0].
void reduce_best(float best, uint best_j) {
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
}
