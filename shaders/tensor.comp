#version 450
// The tensor filter (method `tensor`; the proof is shaders/tensor.md, every
// name in brackets there a line here): each step, approximate scores of every
// (sequence, candidate) pair from integer slices of the centroid and the
// table, summed exactly in int32, a proven bound B̂ per sequence and step, and
// the contract's chain for the window's few candidates. Three phases a step
// (push constant `phase`), each ordered after the one before by a barrier:
//
//   PHASE_SLICE     workgroup s: c = (f32) csum (the contract's centroid), its
//                   scale and two int8 slices, the norms of the bound, B̂.
//   PHASE_PRODUCTS  workgroup (tile, s): a thread a candidate j: A_2, A_3
//                   (tensor.md section 2), â_j; the tile's two smallest â and
//                   the index of the smallest. (This is the plain-shader path,
//                   which every device runs and CI tests; a cooperative-matrix
//                   path computes the same integers on devices that have them.)
//   PHASE_DECIDE    workgroup s: the smallest â over the tiles; the window
//                   {â <= â_min + 2 B̂}: its one member, or, from â computed
//                   again in the tiles whose least â reaches it, the best of
//                   its members by the contract's chain, or a full exact scan;
//                   the winner appended to the sequence.
//
// The instrumented build (max |score - â| / B̂ over every candidate-step:
// tests/kernels/tensor_check.lua), the bound's factor (tests shrink it:
// tests/kernels/bound_scale.lua) and the twins (tests/kernels/tensor_perturb.lua)
// are source patches outside shaders/, applied at run time by device.shader.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require


layout(local_size_x_id = 0) in;                          // threads per workgroup
layout(constant_id = 1) const uint MAX_DIM = 1;          // shared centroid size (>= pc.dim)
layout(constant_id = 2) const uint WINDOW_CAPACITY = 1;  // largest window rescored without the fallback
layout(constant_id = 3) const uint SUBGROUP_SLOTS = 1;   // subgroups per workgroup, at most

layout(push_constant) uniform Push {
    uint num_items;   // N
    uint dim;         // D
    uint step;        // the step this dispatch appends (1 .. L-1)
    uint ring;        // slots per sequence in the winners ring
    uint sequences;   // S
    uint tiles;       // candidate tiles of the products: ceil(N / tile_width)
    uint tile_width;  // candidates a tile: threads here, TILE_C on tensor cores
    uint words;       // u32 words a packed slice row holds: D rounded up to 32 bytes
    uint seq_rows;    // rows a centroid slice plane holds: S rounded up to 16
    uint item_rows;   // rows a table slice plane holds: N rounded up to 16
    uint phase;
} pc;

#define EMB_INDEX(j, d) ((j) * pc.dim + (d))
#define LOAD_EMB(i) emb[i]

layout(std430, set = 0, binding = 0) readonly buffer Embeddings { float emb[]; };        // [N][D], rows
layout(std430, set = 0, binding = 1) readonly buffer InvNorm { float inv_norm[]; };     // [N]
layout(std430, set = 0, binding = 2) readonly buffer JobFactors { double job_factor[]; }; // P, Imax, Q2, Ehat, R
layout(std430, set = 0, binding = 3) readonly buffer TableSlices { uint table_slice[]; }; // [2][item_rows][words], int8 x 4
layout(std430, set = 0, binding = 4) readonly buffer Exponents { int table_exponent[]; }; // [N]: sigma_j = 2^e
layout(std430, set = 0, binding = 5) buffer Centroids { double csum[]; };                // [S][D], f64 sums
layout(std430, set = 0, binding = 6) buffer CentroidSlices { uint centroid_slice[]; };  // [2][seq_rows][words]
layout(std430, set = 0, binding = 7) buffer Masks { uint mask[]; };                     // [S][ceil(N/32)]
layout(std430, set = 0, binding = 8) writeonly buffer Winners { uint winners[]; };      // [S][ring]
// Per sequence: B̂, the centroid's exponent, 1 when it could be sliced, the
// instrumented build's max ratio.
layout(std430, set = 0, binding = 9) buffer StateF64 { double state_f64[]; };           // [S][4]
layout(std430, set = 0, binding = 10) buffer StateU32 { uint state_u32[]; };            // [S][GRAM_STATE_U32]
layout(std430, set = 0, binding = 11) buffer Partials { dvec2 partial_a[]; };           // [S][tiles]: a1, a2
layout(std430, set = 0, binding = 12) buffer PartialIndex { uint partial_j[]; };        // [S][tiles]: j of a1
layout(std430, set = 0, binding = 13) buffer AExact { double a_exact[]; };              // [S][N] (the check only)

#include "gram_state.glsl"

const uint PHASE_SLICE = 0u, PHASE_PRODUCTS = 1u, PHASE_DECIDE = 2u;
const uint F_BOUND = 0u, F_EXPONENT = 1u, F_SLICEABLE = 2u, F_RATIO = 3u, STATE_F64 = 4u;
#define INF uint64BitsToDouble(0x7ff0000000000000ul)

shared float center[MAX_DIM];
shared double red_f64[SUBGROUP_SLOTS];
shared dvec4 red_norms[SUBGROUP_SLOTS];
shared dvec2 red_norms2[SUBGROUP_SLOTS];
shared double red_a1[SUBGROUP_SLOTS];
shared double red_a2[SUBGROUP_SLOTS];
shared uint red_j1[SUBGROUP_SLOTS];
shared uint red_key[SUBGROUP_SLOTS];
shared uint red_best[SUBGROUP_SLOTS];
shared uint window[WINDOW_CAPACITY];
shared uint window_count;
// The tiles whose least â reaches τ: each holds a member of the window, so
// more than WINDOW_CAPACITY of them means the fallback.
shared uint reaching[WINDOW_CAPACITY];
shared uint reaching_count;

#include "contract.glsl"

uint tid;
uint threads;

// Powers of two, exact in f64.
const double U32 = 1.0lf / 16777216.0lf;             // u = 2^-24
const double E64 = 1.0lf / 9007199254740992.0lf;     // e = 2^-53
const double TINY = 1.0lf / 1427247692705959881058285969449495136382746624.0lf;  // eta = 2^-150
const double SLACK = 1.0lf + 1.0lf / 1048576.0lf;    // 1 + 2^-20

uint words32() { return (pc.num_items + 31u) / 32u; }

bool is_masked(uint s, uint j) {
    return (mask[s * words32() + j / 32u] & (1u << (j % 32u))) != 0u;
}

double workgroup_max(double x) {
    x = subgroupMax(x);
    if (subgroupElect()) red_f64[gl_SubgroupID] = x;
    // Orders each subgroup's partial before every thread folds them.
    barrier();
    double m = 0.0lf;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) m = max(m, red_f64[g]);
    // Orders the reads of red_f64 before its next reuse.
    barrier();
    return m;
}

// ---- PHASE_SLICE ----

// The slice scale's exponent s of a vector whose largest |value| is m > 0:
// the smallest with m * 128 <= 127 * 2^s (tensor.md section 1), both sides
// exact in f64, so the host (src/contract/tensor.rs) gets the same s.
int slice_exponent(double m) {
    int e;
    frexp(m, e);  // m = f 2^e, f in [0.5, 1)
    return (m * 128.0lf <= 127.0lf * ldexp(1.0lf, e)) ? e : e + 1;
}

// One int8 as the low byte of a u32 (two's complement).
uint byte_of(double q) { return uint(int(q)) & 0xffu; }

void slice_centroid() {
    const uint s = gl_WorkGroupID.x;
    const uint D = pc.dim;
    double biggest = 0.0lf;
    for (uint d = tid; d < D; d += threads) biggest = max(biggest, abs(TO_F64(contract_centroid(csum[s * D + d]))));
    biggest = workgroup_max(biggest);
    const bool sliceable = biggest > 0.0lf;
    const int exponent = sliceable ? slice_exponent(biggest) : 0;
    // The cut, in f64 (every step exact: tensor.md section 1), four dimensions a word.
    dvec4 norms = dvec4(0.0lf);   // |w o c|^2, |c|^2, |p_2|^2, (unused)
    dvec2 parts = dvec2(0.0lf);   // |ĉ|^2, |δc|^2
    for (uint w = tid; w < pc.words; w += threads) {
        uint packed1 = 0u, packed2 = 0u;
        for (uint b = 0u; b < 4u; ++b) {
            const uint d = 4u * w + b;
            if (d >= D || !sliceable) continue;
            const double c = TO_F64(contract_centroid(csum[s * D + d]));
            double r = ldexp(c, -exponent);
            double y = r * 128.0lf;
            const double q1 = roundEven(y);
            r = y - q1;
            y = r * 128.0lf;
            const double q2 = roundEven(y);
            r = y - q2;
            packed1 |= byte_of(q1) << (8u * b);
            packed2 |= byte_of(q2) << (8u * b);
            const double approx = ldexp(q1 * 128.0lf + q2, exponent - 14);
            const double remainder = ldexp(r, exponent - 14);
            const double wc = double(D - d) * c;  // exact: an integer < 2^24 times an f32
            norms += dvec4(wc * wc, c * c, q2 * q2, 0.0lf);
            parts += dvec2(approx * approx, remainder * remainder);
        }
        const uint row = s * pc.words + w, plane = pc.seq_rows * pc.words;
        centroid_slice[row] = packed1;
        centroid_slice[plane + row] = packed2;
    }
    norms = subgroupAdd(norms);
    parts = subgroupAdd(parts);
    if (subgroupElect()) {
        red_norms[gl_SubgroupID] = norms;
        red_norms2[gl_SubgroupID] = parts;
    }
    // Orders the subgroups' norms before thread 0 folds them.
    barrier();
    if (tid == 0u) {
        norms = dvec4(0.0lf);
        parts = dvec2(0.0lf);
        for (uint g = 0u; g < gl_NumSubgroups; ++g) {
            norms += red_norms[g];
            parts += red_norms2[g];
        }
        const double sigma = ldexp(1.0lf, exponent);
        const double Dd = double(D);
        const double P = job_factor[0], IMAX = job_factor[1], Q2 = job_factor[2];
        const double EHAT = job_factor[3], R = job_factor[4];
        const double rho = U32 * (1.0lf + 2.0lf * Dd * U32);                        // >= u (1+u)^(D-1)
        const double p2 = sigma * sqrt(norms.z);
        const double c_hat = sqrt(parts.x), c_rem = sqrt(parts.y);
        const double dropped = ldexp(p2 * Q2, -28);                                   // (a)
        const double err = P * rho * sqrt(norms.x) + IMAX * Dd * TINY * (1.0lf + 2.0lf * Dd * U32)  // (c)
                         + dropped + c_hat * R + c_rem * EHAT + c_rem * R;            // (a), (b)
        const double amax = (1.0lf + E64) * (P * sqrt(norms.y) + err);
        const double bound = SLACK * ((1.0lf + U32) * err + (U32 + 2.0lf * E64) * amax + TINY);
        state_f64[s * STATE_F64 + F_BOUND] = bound;
        state_f64[s * STATE_F64 + F_EXPONENT] = double(exponent);
        state_f64[s * STATE_F64 + F_SLICEABLE] = sliceable ? 1.0lf : 0.0lf;
    }
}

// ---- PHASE_PRODUCTS ----

// The i-th int8 of a packed word, sign-extended.
int lane(uint word, uint i) { return bitfieldExtract(int(word), int(8u * i), 8); }

// â_j for sequence s (tensor.md section 2): the two exact int32 sums, then
// one f64 rounding.
double approx(uint s, uint j) {
    const uint cplane = pc.seq_rows * pc.words, tplane = pc.item_rows * pc.words;
    const uint crow = s * pc.words, trow = j * pc.words;
    int a2 = 0, a3 = 0;
    for (uint w = 0u; w < pc.words; ++w) {
        const uint p1 = centroid_slice[crow + w], p2 = centroid_slice[cplane + crow + w];
        const uint q1 = table_slice[trow + w], q2 = table_slice[tplane + trow + w];
        [[unroll]] for (uint i = 0u; i < 4u; ++i) {
            const int x1 = lane(p1, i), x2 = lane(p2, i);
            const int y1 = lane(q1, i), y2 = lane(q2, i);
            a2 += x1 * y1;
            a3 += x1 * y2 + x2 * y1;
        }
    }
    // Exact in f64: a multiple of 2^-21 below 2^18 (tensor.md section 2).
    const double t = double(a2) * (1.0lf / 16384.0lf) + double(a3) * (1.0lf / 2097152.0lf);
    const int e = int(state_f64[s * STATE_F64 + F_EXPONENT]) + table_exponent[j];
    return ldexp(t, e) * double(inv_norm[j]);
}

void products() {
    const uint s = gl_WorkGroupID.y, tile = gl_WorkGroupID.x;
    const uint j = tile * threads + tid;  // pc.tile_width == threads on this path
    double a = INF;
    if (j < pc.num_items && !is_masked(s, j)) a = approx(s, j);
    // The tile's two smallest and the index of the smallest (as gram.comp).
    const double m1 = subgroupMin(a);
    const uvec4 at_min = subgroupBallot(a == m1);
    const uint holder = subgroupBallotFindLSB(at_min);
    double second = subgroupMin(gl_SubgroupInvocationID == holder ? INF : a);
    if (subgroupBallotBitCount(at_min) > 1u) second = m1;
    // (A min, not subgroupBroadcast: its lane is chosen at run time; gram.comp.)
    const uint holder_j = subgroupMin(gl_SubgroupInvocationID == holder ? j : 0xffffffffu);
    if (subgroupElect()) {
        red_a1[gl_SubgroupID] = m1;
        red_a2[gl_SubgroupID] = second;
        red_j1[gl_SubgroupID] = holder_j;
    }
    // Orders the subgroups' minima before thread 0 folds them.
    barrier();
    if (tid == 0u) {
        double a1 = INF, a2 = INF;
        uint j1 = INDEX_NONE;
        for (uint g = 0u; g < gl_NumSubgroups; ++g) {
            if (red_a1[g] < a1) {
                a2 = min(a1, red_a2[g]);
                a1 = red_a1[g];
                j1 = red_j1[g];
            } else {
                a2 = min(a2, red_a1[g]);
            }
        }
        partial_a[s * pc.tiles + tile] = dvec2(a1, a2);
        partial_j[s * pc.tiles + tile] = j1;
    }
}

// ---- PHASE_DECIDE ----

void better(uint key, uint j, inout uint best_key, inout uint best_j) {
    if (key < best_key || (key == best_key && contract_tie_key(j) < contract_tie_key(best_j))) {
        best_key = key;
        best_j = j;
    }
}

// The workgroup's best (key, index) in the contract's order.
uint reduce_best(uint key, uint j) {
    const uint k = subgroupMin(key);
    const uint b = subgroupMin(key == k ? contract_tie_key(j) : 0xffffffffu);
    if (subgroupElect()) {
        red_key[gl_SubgroupID] = k;
        red_best[gl_SubgroupID] = b;
    }
    // Orders the subgroups' best before every thread folds them.
    barrier();
    uint best_key = 0xffffffffu, tie = 0xffffffffu;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) {
        if (red_key[g] < best_key || (red_key[g] == best_key && red_best[g] < tie)) {
            best_key = red_key[g];
            tie = red_best[g];
        }
    }
    return contract_tie_key(tie);
}

uint window_bin(uint count) {
    if (count == 0u) return GRAM_HIST_BINS - 1u;
    return min(uint(findMSB(count - 1u) + 1), GRAM_HIST_BINS - 2u);
}

// The window W = {j : â_j <= tau} (tensor.md section 6): the tiles whose
// least â is at most tau hold every member, so their â are computed again
// (the same integers as the products phase, on either path) and the members
// collected; window_count past WINDOW_CAPACITY means the fallback.
void collect_window(uint s, double tau, uint j1) {
    for (uint t = tid; t < pc.tiles; t += threads) {
        if (partial_a[s * pc.tiles + t].x <= tau) {
            const uint slot = atomicAdd(reaching_count, 1u);
            if (slot < WINDOW_CAPACITY) reaching[slot] = t;
        }
    }
    // Orders the reaching tiles and their count before every thread reads them.
    barrier();
    const uint tiles = reaching_count;
    if (tiles > WINDOW_CAPACITY) {
        if (tid == 0u) window_count = tiles;  // at least one member a tile: over the capacity
    } else {
        for (uint m = tid; m < tiles * pc.tile_width; m += threads) {
            const uint j = reaching[m / pc.tile_width] * pc.tile_width + m % pc.tile_width;
            if (j < pc.num_items && !is_masked(s, j) && approx(s, j) <= tau) {
                const uint slot = atomicAdd(window_count, 1u);
                if (slot < WINDOW_CAPACITY) window[slot] = j;
            }
        }
    }
    // Orders the window's members and count before every thread reads them.
    barrier();
}

void decide() {
    const uint s = gl_WorkGroupID.x;
    const uint n = pc.num_items;
    // The smallest â over the tiles, and the second smallest.
    double a1 = INF, a2 = INF;
    uint j1 = INDEX_NONE;
    for (uint t = tid; t < pc.tiles; t += threads) {
        const dvec2 p = partial_a[s * pc.tiles + t];
        if (p.x < a1) {
            a2 = min(a1, p.y);
            a1 = p.x;
            j1 = partial_j[s * pc.tiles + t];
        } else {
            a2 = min(a2, p.x);
        }
    }
    {
        const double m1 = subgroupMin(a1);
        const uvec4 at_min = subgroupBallot(a1 == m1);
        const uint holder = subgroupBallotFindLSB(at_min);
        double second = subgroupMin(gl_SubgroupInvocationID == holder ? a2 : a1);
        if (subgroupBallotBitCount(at_min) > 1u) second = m1;
        // (A min, not subgroupBroadcast: its lane is chosen at run time; gram.comp.)
        const uint holder_j = subgroupMin(gl_SubgroupInvocationID == holder ? j1 : 0xffffffffu);
        if (subgroupElect()) {
            red_a1[gl_SubgroupID] = m1;
            red_a2[gl_SubgroupID] = second;
            red_j1[gl_SubgroupID] = holder_j;
        }
    }
    for (uint d = tid; d < pc.dim; d += threads) center[d] = contract_centroid(csum[s * pc.dim + d]);
    if (tid == 0u) {
        window_count = 0u;
        reaching_count = 0u;
    }
    // Orders the subgroups' minima, the centroid and the counts' reset before every thread reads them.
    barrier();
    a1 = INF;
    a2 = INF;
    j1 = INDEX_NONE;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) {
        if (red_a1[g] < a1) {
            a2 = min(a1, red_a2[g]);
            a1 = red_a1[g];
            j1 = red_j1[g];
        } else {
            a2 = min(a2, red_a1[g]);
        }
    }
    const double bound = state_f64[s * STATE_F64 + F_BOUND];
    const bool sliceable = state_f64[s * STATE_F64 + F_SLICEABLE] != 0.0lf;
    const double tau = a1 + 2.0lf * bound;
    uint winner, count;
    if (sliceable && a2 > tau) {
        winner = j1;  // the window is {j1}: no chain
        count = 1u;
    } else {
        if (sliceable) collect_window(s, tau, j1);
        count = sliceable ? window_count : 0u;
        uint best_key = 0xffffffffu, best_j = INDEX_NONE;
        if (count != 0u && count <= WINDOW_CAPACITY) {
            for (uint m = tid; m < count; m += threads) {
                const uint j = window[m];
                better(contract_key(contract_score(j, pc.dim)), j, best_key, best_j);
            }
        } else {
            // The fallback: the whole step, exactly.
            for (uint j = tid; j < n; j += threads) {
                if (!is_masked(s, j)) better(contract_key(contract_score(j, pc.dim)), j, best_key, best_j);
            }
        }
        winner = reduce_best(best_key, best_j);
    }
    // Append the winner: ring slot, mask bit, counters, f64 centroid sum.
    if (tid == 0u) {
        const uint st = s * GRAM_STATE_U32;
        winners[s * pc.ring + pc.step % pc.ring] = winner;
        mask[s * words32() + winner / 32u] |= 1u << (winner % 32u);
        state_u32[st + GRAM_S_WINDOW_TOTAL] += count;
        state_u32[st + GRAM_S_WINDOW_ONES] += count == 1u ? 1u : 0u;
        state_u32[st + GRAM_S_FALLBACKS] += (count == 0u || count > WINDOW_CAPACITY) ? 1u : 0u;
        state_u32[st + GRAM_S_WINDOW_MAX] = max(state_u32[st + GRAM_S_WINDOW_MAX], count);
        state_u32[st + GRAM_S_HIST + window_bin(count)] += 1u;
    }
    for (uint d = tid; d < pc.dim; d += threads) csum[s * pc.dim + d] += TO_F64(LOAD_EMB(EMB_INDEX(winner, d)));
}

void main() {
    tid = gl_LocalInvocationID.x;
    threads = gl_WorkGroupSize.x;
    if (pc.phase == PHASE_SLICE) slice_centroid();
    else if (pc.phase == PHASE_PRODUCTS) products();
    else decide();
}
