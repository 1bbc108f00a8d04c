#version 450
// The certified Gram filter (SPEC section 8), one workgroup per sequence and
// pc.steps steps per dispatch (sequences are independent: no grid sync).
//
// Each step, for every unmasked candidate j:
//   approx_j += G[previous winner][j]          f64, one G row per step
//   a_j = approx_j * inv_norm[j],  B_j = the proven bound on |score_j - a_j|
// U = min_j (a_j + B_j); the window W = { j : a_j - B_j <= U } holds the
// contract's winner and every candidate tied with it (gram.md, theorem).
// |W| = 1: that is the winner, no chain computed. |W| <= WINDOW_CAPACITY:
// rescore W with the contract's own chain (contract.glsl). Else: a full exact
// scan of the step (the fallback). The contract decides; the filter prunes.
//
// Variants (defines): DIVGPU_COLUMNS (table layout, see scan's bindings),
// DIVGPU_GRAM_CHECK (instrumented: rescore every candidate and record
// max |exact - a_j| / B_j), DIVGPU_BOUND_SCALE (the bound's factor, 1.0;
// tests shrink it), DIVGPU_GRAM_PERTURB (non-vacuity twins, 0 = off).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

#ifndef DIVGPU_GRAM_CHECK
#define DIVGPU_GRAM_CHECK 0
#endif
#ifndef DIVGPU_BOUND_SCALE
#define DIVGPU_BOUND_SCALE 1.0lf
#endif
#ifndef DIVGPU_GRAM_PERTURB
#define DIVGPU_GRAM_PERTURB 0
#endif

layout(local_size_x_id = 0) in;                       // threads per workgroup
layout(constant_id = 1) const uint MAX_DIM = 1;       // shared centroid size (>= pc.dim)
layout(constant_id = 2) const uint WINDOW_CAPACITY = 1;  // largest window rescored without the fallback

layout(push_constant) uniform Push {
    uint num_items;   // N
    uint dim;         // D
    uint first_step;  // the step this dispatch appends first (1 .. L-1)
    uint steps;       // steps this dispatch appends
    uint ring;        // slots per sequence in the winners ring
    uint block_rows;  // G rows per block of g_blocks
} pc;

#ifdef DIVGPU_COLUMNS
#define EMB_INDEX(j, d) ((d) * pc.num_items + (j))
#else
#define EMB_INDEX(j, d) ((j) * pc.dim + (d))
#endif
#define LOAD_EMB(i) emb[i]

layout(std430, set = 0, binding = 0) readonly buffer Embeddings { float emb[]; };       // the table, rows or columns
layout(std430, set = 0, binding = 1) readonly buffer InvNorms { float inv_norm[]; };    // [N], from the host
layout(std430, set = 0, binding = 2) readonly buffer RowNorms { double row_norm[]; };   // [N], upper bounds of |E_j|
layout(std430, set = 0, binding = 3) readonly buffer GBlocks { uvec2 g_block[]; };      // device addresses of G's blocks
layout(std430, set = 0, binding = 4) coherent buffer Centroids { double csum[]; };      // [S][D], f64 sums
layout(std430, set = 0, binding = 5) coherent buffer Masks { uint mask[]; };            // [S][ceil(N/32)] chosen bits
layout(std430, set = 0, binding = 6) buffer Approx { double approx[]; };                // [S][N], sum of chosen G rows
layout(std430, set = 0, binding = 7) writeonly buffer Winners { uint winners[]; };      // [S][ring]
// Per sequence: chosen_norms (T, the sum of |E_i| over the chosen items) and
// the instrumented build's max |exact - a| / B.
layout(std430, set = 0, binding = 8) coherent buffer StateF64 { double state_f64[]; };  // [S][2]
// Per sequence: the item appended last (its G row is still to add), then the
// run's counters: window sizes summed, windows of one, fallbacks, largest
// window, and the window-size histogram (HIST_BINS bins from S_HIST).
layout(std430, set = 0, binding = 9) coherent buffer StateU32 { uint state_u32[]; };    // [S][STATE_U32]

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer GRow { float g[]; };

shared float center[MAX_DIM];
shared float red_score[gl_WorkGroupSize.x];
shared uint red_index[gl_WorkGroupSize.x];
shared double red_f64[gl_WorkGroupSize.x];
shared dvec2 red_f64x2[gl_WorkGroupSize.x];
shared uint window[WINDOW_CAPACITY];
shared uint window_count;

#include "contract.glsl"
#include "workgroup.glsl"

const uint T_NORMS = 0u, T_RATIO = 1u;                                     // state_f64 fields
const uint S_PREVIOUS = 0u, S_WINDOW_TOTAL = 1u, S_WINDOW_ONES = 2u, S_FALLBACKS = 3u, S_WINDOW_MAX = 4u;
// Histogram bins: sizes 1, 2, 3-4, 5-8, ..., 129-256, 257 and more; the last
// bin counts empty windows (impossible under the theorem; counted to show it).
const uint S_HIST = 5u, HIST_BINS = 11u, STATE_U32 = 16u;  // kernels/gram.lua mirrors these

uint window_bin(uint count) {
    if (count == 0u) return HIST_BINS - 1u;
    return min(uint(findMSB(count - 1u) + 1), HIST_BINS - 2u);  // findMSB(0) = -1
}

uint seq;
uint tid;
uint threads;
uint words;

#include "best.glsl"

bool is_masked(uint j) {
    return (mask[seq * words + j / 32u] & (1u << (j % 32u))) != 0u;
}

// G's row w: block w / block_rows, 64-bit byte offset inside it.
GRow g_row(uint w) {
    const uint64_t base = packUint2x32(g_block[w / pc.block_rows]);
    return GRow(base + uint64_t(w % pc.block_rows) * uint64_t(pc.num_items) * 4ul);
}

// The bound's per-step factors (gram.md, section 3): b_j = norm_j * k_norm + k_const.
double k_norm;
double k_const;

// Powers of two, exact in f64 (the lf suffix keeps 2^-150 out of f32).
const double U32 = 1.0lf / 16777216.0lf;             // u = 2^-24, f32 unit roundoff
const double EPS64 = 1.0lf / 4503599627370496.0lf;   // 2^-52: gamma64(n) <= n * 2^-52
const double TINY = 1.0lf / 1427247692705959881058285969449495136382746624.0lf;  // 2^-150
const double SLACK = 1.0lf + 1.0lf / 1048576.0lf;    // 1 + 2^-20: the bound's own f64 evaluation
// The absolute error of one stored G entry below the normal range: 2^-150 with
// gradual underflow; where denormals may be flushed (DIVGPU_EXACT_UNDERFLOW:
// the device does not keep them), a flushed entry or load is off by less than
// 2^-126, so G's entries are read plainly and the bound carries that instead
// of redoing every load exactly (gram.md, section 6).
#ifdef DIVGPU_EXACT_UNDERFLOW
const double G_ETA = TINY * 16777216.0lf;            // 2^-126
#else
const double G_ETA = TINY;
#endif

// Loads c = (f32) csum into shared memory and sets the step's bound factors;
// `chosen` items are in the sequence so far.
void load_center_and_bound(uint chosen) {
    double wc2 = 0.0lf, cs2 = 0.0lf;
    for (uint d = tid; d < pc.dim; d += threads) {
        const double s = csum[seq * pc.dim + d];
        const float c = contract_centroid(s);
        center[d] = c;
        const double wc = double(pc.dim - d) * TO_F64(c);  // exact: an integer < 2^24 times an f32
        wc2 += wc * wc;
        cs2 += s * s;
    }
    // workgroup_sum's barrier also orders the centroid writes before any scan reads them.
    const dvec2 sums = workgroup_sum2(dvec2(wc2, cs2));
    const double wc_norm = sqrt(sums.x);
    const double cs_norm = sqrt(sums.y);
    const double D = double(pc.dim), m = double(chosen);
    const double chosen_norms = state_f64[seq * 2u + T_NORMS];
    const double rho = U32 * (1.0lf + 2.0lf * D * U32);          // >= u (1+u)^(D-1)
    const double g_dim = D * EPS64;                               // >= gamma64(D): G's f64 dot product
    const double g_sum = (m - 1.0lf) * EPS64;                     // >= gamma64(m-1): f64 sums over chosen items
    const double kappa = g_sum                                    // csum
                       + g_dim + U32 * (1.0lf + g_dim)            // G: f64 dot product, f32 storage
                       + g_sum * (1.0lf + U32) * (1.0lf + g_dim); // approx's f64 sum of G entries
    k_norm = rho * wc_norm + U32 * cs_norm + kappa * chosen_norms + TINY * sqrt(D);
    k_const = D * TINY * (1.0lf + 2.0lf * D * U32) + m * G_ETA * (1.0lf + m * EPS64);
}

// a_j and its bound B_j at score level, from approx_j (gram.md, section 4).
void approx_score(uint j, double ap, out double a, out double bound) {
    const double inv = double(inv_norm[j]);
    precise double product = ap * inv;
    a = product;
    const double b = row_norm[j] * k_norm + k_const;
    bound = DIVGPU_BOUND_SCALE * SLACK * ((1.0lf + U32) * inv * b + (U32 + 2.0lf * EPS64) * abs(a) + 2.0lf * TINY);
}

// Exact scan of every unmasked candidate: the fallback (and the check).
void scan_all(inout float best, inout uint best_j) {
    for (uint j = tid; j < pc.num_items; j += threads) {
        if (is_masked(j)) continue;  // already in the sequence
        const float s = contract_score(j, pc.dim);
        if (contract_better(s, j, best, best_j)) {
            best = s;
            best_j = j;
        }
    }
}

void add_to_window(uint j) {
    const uint slot = atomicAdd(window_count, 1u);
    if (slot < WINDOW_CAPACITY) window[slot] = j;
}

void gram_step(uint t, bool first_of_dispatch) {
    const uint n = pc.num_items;
    const uint base = seq * n;
    load_center_and_bound(t);  // t items are chosen before step t

    // Pass A: add the previous winner's G row; U = min (a_j + B_j).
    // (Keeping each thread's few candidates for the window in local arrays,
    // instead of pass B, measured 10% slower on the H200: bench/NOTES.md.)
    GRow row = g_row(state_u32[seq * STATE_U32 + S_PREVIOUS]);
    bool add_row = true;
#if DIVGPU_GRAM_PERTURB == 2
    // Twin: the row pending from the previous dispatch is dropped.
    add_row = !first_of_dispatch;
#endif
    double lowest = uint64BitsToDouble(0x7ff0000000000000ul);
    for (uint j = tid; j < n; j += threads) {
        if (is_masked(j)) continue;  // chosen items are never candidates again
        double ap = approx[base + j];
        if (add_row) {
            ap += double(FTZ(row.g[j]));  // a flushed G entry is covered by G_ETA
            approx[base + j] = ap;
        }
        double a, bound;
        approx_score(j, ap, a, bound);
        lowest = min(lowest, a + bound);
    }
    const double upper = workgroup_min(lowest);

    // Pass B: the window { j : a_j - B_j <= U } (each thread rereads its own
    // approx_j). window_count was reset by the previous step (or at the
    // start), ordered by the barriers since.
    for (uint j = tid; j < n; j += threads) {
        if (is_masked(j)) continue;
        double a, bound;
        approx_score(j, approx[base + j], a, bound);
        if (a - bound <= upper) add_to_window(j);
    }
    // Orders the window's writes before every thread reads them.
    barrier();
    const uint count = window_count;

    uint winner;
    if (count == 1u) {
        winner = window[0];
    } else {
        float best = SCORE_NONE;
        uint best_j = INDEX_NONE;
        if (count != 0u && count <= WINDOW_CAPACITY) {
            for (uint k = tid; k < count; k += threads) {
                const uint j = window[k];
#if DIVGPU_GRAM_PERTURB == 1
                // Twin: trust the approximation, no exact rescoring.
                const float s = float(approx[base + j] * double(inv_norm[j]));
#else
                const float s = contract_score(j, pc.dim);
#endif
                if (contract_better(s, j, best, best_j)) {
                    best = s;
                    best_j = j;
                }
            }
        } else {
#if DIVGPU_GRAM_PERTURB == 3
            // Twin: an overflowing window is cut to its capacity instead of a full scan.
            for (uint k = tid; k < WINDOW_CAPACITY; k += threads) {
                const uint j = window[k];
                const float s = contract_score(j, pc.dim);
                if (contract_better(s, j, best, best_j)) {
                    best = s;
                    best_j = j;
                }
            }
#else
            // Fallback (count == 0 cannot happen under the theorem; scanning keeps it safe).
            scan_all(best, best_j);
#endif
        }
        reduce_best(best, best_j);
        winner = red_index[0];
    }

#if DIVGPU_GRAM_CHECK
    // Instrumented: |exact - a_j| / B_j over every candidate of the step.
    double worst = 0.0lf;
    for (uint j = tid; j < n; j += threads) {
        if (is_masked(j)) continue;
        double a, bound;
        approx_score(j, approx[base + j], a, bound);
        const double exact = double(contract_score(j, pc.dim));
        worst = max(worst, abs(exact - a) / bound);
    }
    worst = workgroup_max(worst);
#endif

    // Append the winner: ring slot, mask bit, state, f64 centroid sum.
    if (tid == 0u) {
        winners[seq * pc.ring + t % pc.ring] = winner;
        mask[seq * words + winner / 32u] |= 1u << (winner % 32u);
        state_u32[seq * STATE_U32 + S_PREVIOUS] = winner;
        state_u32[seq * STATE_U32 + S_WINDOW_TOTAL] += count;
        state_u32[seq * STATE_U32 + S_WINDOW_ONES] += count == 1u ? 1u : 0u;
        state_u32[seq * STATE_U32 + S_FALLBACKS] += (count == 0u || count > WINDOW_CAPACITY) ? 1u : 0u;
        state_u32[seq * STATE_U32 + S_WINDOW_MAX] = max(state_u32[seq * STATE_U32 + S_WINDOW_MAX], count);
        state_u32[seq * STATE_U32 + S_HIST + window_bin(count)] += 1u;
        state_f64[seq * 2u + T_NORMS] += row_norm[winner];
#if DIVGPU_GRAM_CHECK
        state_f64[seq * 2u + T_RATIO] = max(state_f64[seq * 2u + T_RATIO], worst);
#endif
    }
    for (uint d = tid; d < pc.dim; d += threads) {
        csum[seq * pc.dim + d] += TO_F64(LOAD_EMB(EMB_INDEX(winner, d)));
    }
    // Every thread has read window_count above (count); the next step's window starts empty.
    barrier();
    if (tid == 0u) window_count = 0u;
    // Orders this step's mask, state and centroid writes before the next
    // step's reads (by other threads), red_index[0]'s read before its reuse,
    // and the window reset before the next step counts.
    memoryBarrierBuffer();
    barrier();
}

void main() {
    seq = gl_WorkGroupID.x;
    tid = gl_LocalInvocationID.x;
    threads = gl_WorkGroupSize.x;
    words = (pc.num_items + 31u) / 32u;
    if (tid == 0u) window_count = 0u;
    // Orders the reset before the first step counts.
    barrier();
    for (uint k = 0u; k < pc.steps; ++k) {
        gram_step(pc.first_step + k, k == 0u);
    }
}
