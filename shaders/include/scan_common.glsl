// The direct method's shared state and steps (docs/contract.md#shapes): the centroid
// in shared memory, the reduction, the append, the exact scan of a candidate
// range and fp16-exact's filter. Include after scan_header.glsl and the push block.

#define PHASE_SCAN 0u
#define PHASE_DECIDE 1u

shared float center[MAX_DIM];
shared float red_score[gl_WorkGroupSize.x];
shared uint red_index[gl_WorkGroupSize.x];

#include "contract.glsl"
#if DIVGPU_FP16_EXACT
#include "fp16_exact.glsl"
shared double red_bound[gl_WorkGroupSize.x];
#endif

uint seq;
uint tid;
uint threads;
uint words;


#include "best.glsl"

bool is_masked(uint j) {
    return (mask[seq * words + j / 32u] & (1u << (j % 32u))) != 0u;
}

void load_center() {
    for (uint d = tid; d < pc.dim; d += threads) {
        center[d] = contract_centroid(csum[seq * pc.dim + d]);
    }
    // Orders the centroid writes before any thread's scan reads them.
    barrier();
}

// Every kernel's first lines: who this invocation is, and the centroid c.
void begin_step() {
    seq = gl_WorkGroupID.x;
    tid = gl_LocalInvocationID.x;
    threads = gl_WorkGroupSize.x;
    words = (pc.num_items + 31u) / 32u;
    load_center();
}


// Appends w to the sequence: winners ring, mask bit, f64 centroid sum.
void append(uint w) {
    if (tid == 0u) {
        winners[seq * pc.ring + pc.step % pc.ring] = w;
        mask[seq * words + w / 32u] |= 1u << (w % 32u);
    }
    for (uint d = tid; d < pc.dim; d += threads) {
        csum[seq * pc.dim + d] += TO_F64(LOAD_EMB(EMB_INDEX(w, d)));
    }
}

#if DIVGPU_FP16_EXACT
double norm2;
double norm1;
double k1;

// |c|_2 and |c|_1 of the f32 centroid, in f64, for the filter bound.
void centroid_norms() {
    double sq = 0.0, ab = 0.0;
    for (uint d = tid; d < pc.dim; d += threads) {
        sq += TO_F64(center[d]) * TO_F64(center[d]);
        ab += abs(TO_F64(center[d]));
    }
    red_bound[tid] = sq;
    // Orders the partial sums before thread 0 adds them.
    barrier();
    if (tid == 0u) {
        double total = 0.0;
        for (uint i = 0u; i < threads; ++i) total += red_bound[i];
        red_bound[0] = total;
    }
    barrier();
    // Round-off of these f64 sums is ~1e-16 relative: covered by SCALE.
    norm2 = sqrt(red_bound[0]);
    barrier();
    red_bound[tid] = ab;
    barrier();
    if (tid == 0u) {
        double total = 0.0;
        for (uint i = 0u; i < threads; ++i) total += red_bound[i];
        red_bound[0] = total;
    }
    barrier();
    norm1 = red_bound[0];
    k1 = bound_k1(pc.dim);
    // Orders the reads of red_bound[0] before its next reuse.
    barrier();
}

// Filter pass over [begin, end): stores f_j, returns this thread's min(f_j + B_j).
double filter_range(uint begin, uint end, double lowest) {
    for (uint j = begin + tid; j < end; j += threads) {
        if (is_masked(j)) continue;
        const float f = filter_chain(j, pc.dim);
        filter_score[seq * pc.num_items + j] = f;
        lowest = min(lowest, TO_F64(f) + filter_bound(j, norm2, norm1, k1, pc.dim));
    }
    return lowest;
}

double reduce_min(double x) {
    red_bound[tid] = x;
    // Orders every thread's value before the reduction reads it.
    barrier();
    for (uint span = 1u; span < threads; span *= 2u) {
        const uint other = tid + span;
        if (tid % (2u * span) == 0u && other < threads) {
            red_bound[tid] = min(red_bound[tid], red_bound[other]);
        }
        // Orders this level's writes before the next level's reads.
        barrier();
    }
    const double result = red_bound[0];
    // Orders the read of red_bound[0] before its next reuse.
    barrier();
    return result;
}

// Exact pass: rescores every candidate whose filter interval reaches T.
void decide_range(double threshold, inout float best, inout uint best_j) {
    for (uint j = tid; j < pc.num_items; j += threads) {
        if (is_masked(j)) continue;
        if (TO_F64(filter_score[seq * pc.num_items + j]) - filter_bound(j, norm2, norm1, k1, pc.dim) > threshold) continue;
        const float s = contract_score(j, pc.dim);
        if (contract_better(s, j, best, best_j)) {
            best = s;
            best_j = j;
        }
    }
}
#endif

// Exact scan of [begin, end), keeping the running best across calls.
void scan_range(uint begin, uint end, inout float best, inout uint best_j) {
    for (uint j = begin + tid; j < end; j += threads) {
        if (is_masked(j)) continue;  // already in the sequence
        const float s = contract_score(j, pc.dim);
        if (contract_better(s, j, best, best_j)) {
            best = s;
            best_j = j;
        }
    }
}

