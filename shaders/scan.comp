#version 450
// Every shape of the GPU work (SPEC section 5), one workgroup per sequence;
// build.rs compiles one variant per (shape, precision):
//   SHAPE_BASELINE       one strided pass over all candidates per step (the reference)
//   SHAPE_TILED          the same pass split into tiles of pc.tile_size candidates
//   SHAPE_TILE_DISPATCH  one dispatch per tile, the running best carried in `carry`
//   DIVGPU_FP16          the fp16 contract: half loads, f32 arithmetic (no float16_t math)
//   DIVGPU_FP16_EXACT    half loads filter, the fp32 contract decides
//   DIVGPU_COLUMNS       the table stored by columns (see bindings.glsl)
// One dispatch (or, for tile-dispatch, one dispatch per tile) appends one
// step to every sequence of the batch.
#extension GL_GOOGLE_include_directive : require

#define SHAPE_BASELINE 0
#define SHAPE_TILED 1
#define SHAPE_TILE_DISPATCH 2
#ifndef SHAPE
#define SHAPE SHAPE_BASELINE
#endif
#ifndef DIVGPU_FP16
#define DIVGPU_FP16 0
#endif
#ifndef DIVGPU_FP16_EXACT
#define DIVGPU_FP16_EXACT 0
#endif
#define PHASE_SCAN 0u
#define PHASE_DECIDE 1u

#if DIVGPU_FP16 || DIVGPU_FP16_EXACT
// Half values in storage only: loads convert to f32 (StorageBuffer16BitAccess,
// no Float16 arithmetic capability).
#extension GL_EXT_shader_16bit_storage : require
#endif

layout(local_size_x_id = 0) in;                   // threads per workgroup, chosen by the driver
layout(constant_id = 1) const uint MAX_DIM = 1;   // shared centroid size (>= pc.dim)

#include "push.glsl"
#include "bindings.glsl"

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

// Appends w to the sequence: winners ring, mask bit, f64 centroid sum.
void append(uint w) {
    if (tid == 0u) {
        winners[seq * pc.ring + pc.step % pc.ring] = w;
        mask[seq * words + w / 32u] |= 1u << (w % 32u);
    }
    for (uint d = tid; d < pc.dim; d += threads) {
        csum[seq * pc.dim + d] += double(LOAD_EMB(EMB_INDEX(w, d)));
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
        sq += double(center[d]) * double(center[d]);
        ab += abs(double(center[d]));
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
        lowest = min(lowest, double(f) + filter_bound(j, norm2, norm1, k1));
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
        if (double(filter_score[seq * pc.num_items + j]) - filter_bound(j, norm2, norm1, k1) > threshold) continue;
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

void main() {
    seq = gl_WorkGroupID.x;
    tid = gl_LocalInvocationID.x;
    threads = gl_WorkGroupSize.x;
    words = (pc.num_items + 31u) / 32u;
    const uint n = pc.num_items;
    load_center();
    float best = SCORE_NONE;
    uint best_j = INDEX_NONE;

#if DIVGPU_FP16_EXACT
    centroid_norms();
#if SHAPE == SHAPE_TILE_DISPATCH
    if (pc.phase == PHASE_SCAN) {
        // One tile of the filter pass; T is carried as the running minimum.
        const double lowest = reduce_min(filter_range(pc.tile_begin, pc.tile_end, 1.0 / 0.0));
        if (tid == 0u) {
            carry[seq].score = pc.tile_begin == 0u ? lowest : min(carry[seq].score, lowest);
        }
        return;
    }
    const double threshold = carry[seq].score;
#else
    double lowest = 1.0 / 0.0;
#if SHAPE == SHAPE_TILED
    for (uint begin = 0u; begin < n; begin += pc.tile_size) {
        lowest = filter_range(begin, min(begin + pc.tile_size, n), lowest);
    }
#else
    lowest = filter_range(0u, n, lowest);
#endif
    // The filter scores written above are read back by other threads below.
    memoryBarrierBuffer();
    const double threshold = reduce_min(lowest);
#endif
    decide_range(threshold, best, best_j);
    reduce_best(best, best_j);
    append(red_index[0]);

#else  // fp32 and fp16: one exact pass
#if SHAPE == SHAPE_BASELINE
    scan_range(0u, n, best, best_j);
    reduce_best(best, best_j);
    append(red_index[0]);
#elif SHAPE == SHAPE_TILED
    // The running best is kept across tiles, never reset between them.
    for (uint begin = 0u; begin < n; begin += pc.tile_size) {
        scan_range(begin, min(begin + pc.tile_size, n), best, best_j);
    }
    reduce_best(best, best_j);
    append(red_index[0]);
#else  // SHAPE_TILE_DISPATCH
    scan_range(pc.tile_begin, pc.tile_end, best, best_j);
    reduce_best(best, best_j);
    if (tid == 0u) {
        float carried = SCORE_NONE;
        uint carried_j = INDEX_NONE;
        if (pc.tile_begin != 0u) {
            carried = float(carry[seq].score);
            carried_j = carry[seq].index;
        }
        if (contract_better(red_score[0], red_index[0], carried, carried_j)) {
            carried = red_score[0];
            carried_j = red_index[0];
        }
        carry[seq].score = double(carried);
        carry[seq].index = carried_j;
        red_index[0] = carried_j;
    }
    // Orders thread 0's merged winner before every thread reads it.
    barrier();
    if (pc.tile_end == n) {
        append(red_index[0]);
    }
#endif
#endif
}
