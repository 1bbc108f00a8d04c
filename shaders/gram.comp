#version 450
// The certified Gram filter, one workgroup per sequence and pc.steps steps
// per dispatch, with each sequence's state on chip (shaders/gram.md is the
// proof; every name in brackets there is a line here).
//
// State of a sequence, per candidate j: approx_j, the f64 sum of the chosen
// items' rows of G' (G'[i][j] = G[i][j] * inv_norm[j], built by
// gram_build.comp); +inf once j is chosen. Each thread owns the same
// candidates for the whole dispatch, in three places:
//   registers  j = tid + k * threads, k < REG_SLOTS (loops over k unrolled,
//              so the array stays in registers)
//   shared     the next pc.shared_count candidates, thread-private slots
//   global     the rest, in approx[] (only where N exceeds both)
// so no other thread ever reads a thread's approx: the state needs no barrier.
//
// One step (t items chosen, the winner of step t-1 still to apply):
//   A. add its G' row, mask it, add its row of E to the f64 centroid; each
//      thread keeps its two smallest approx (and the index of the smallest)
//      and its part of the bound's two norms; the subgroups reduce them.
//   -- barrier B1 --
//   B. every thread combines the subgroups' partials the same way: the
//      smallest a1 (at j1), the second smallest a2, the bound Bhat (one
//      per-step constant: gram.md section 4), tau = a1 + 2 Bhat.
//      a2 > tau: the window is {j1}, the winner; the next step starts at once.
//      Otherwise the window {j : approx_j <= tau} is collected (-- B2 --) and
//      rescored with the contract's chain (its first rows staged in shared
//      memory), or, over WINDOW_CAPACITY, the whole step is scanned exactly;
//      the best in the contract's order wins (-- B3 --).
// So a step whose window is one item has one barrier; any other four (the
// fourth orders the window's rows staged in shared memory before the chains).
//
// Variants (axes file): DIVGPU_COLUMNS (table layout). The instrumented
// build (rescore every candidate, record max |exact - a_j| / Bhat:
// tests/kernels/gram_check.lua), the bound's factor (tests shrink it:
// tests/kernels/bound_scale.lua), the non-vacuity twins
// (tests/kernels/gram_perturb.lua) and the bench's probes
// (bench/kernels/gram_floor.lua, gram_uniform.lua, gram_warp_uniform.lua) are
// source patches outside shaders/, applied at run time by device.shader.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require


layout(local_size_x_id = 0) in;                         // threads per workgroup (sequence)
layout(constant_id = 1) const uint MAX_DIM = 1;         // shared centroid size (>= pc.dim)
layout(constant_id = 2) const uint WINDOW_CAPACITY = 1; // largest window rescored without the fallback
layout(constant_id = 3) const uint REG_SLOTS = 1;       // candidates per thread in registers
layout(constant_id = 4) const uint SHARED_SLOTS = 1;    // size of the shared page (>= pc.shared_count, >= 1)
layout(constant_id = 5) const uint DIM_SLOTS = 1;       // centroid components per thread (ceil(D / threads))
layout(constant_id = 6) const uint SUBGROUP_SLOTS = 1;  // subgroups per workgroup, at most
layout(constant_id = 7) const uint STAGE_ROWS = 1;      // window members whose rows are staged in shared memory

layout(push_constant) uniform Push {
    uint num_items;     // N
    uint dim;           // D
    uint first_step;    // the step this dispatch appends first (1 .. L-1)
    uint steps;         // steps this dispatch appends
    uint ring;          // slots per sequence in the winners ring
    uint block_rows;    // G' rows per block of g_blocks
    uint shared_count;  // candidates in the shared page (0 .. SHARED_SLOTS)
} pc;

#ifdef DIVGPU_COLUMNS
#define EMB_INDEX(j, d) ((d) * pc.num_items + (j))
#else
#define EMB_INDEX(j, d) ((j) * pc.dim + (d))
#endif
#define LOAD_EMB(i) emb[i]

layout(std430, set = 0, binding = 0) readonly buffer Embeddings { float emb[]; };       // the table, rows or columns
layout(std430, set = 0, binding = 1) readonly buffer InvNorm { float inv_norm[]; };     // [N], from the host
layout(std430, set = 0, binding = 2) readonly buffer RowNorms { double row_norm[]; };   // [N], upper bounds of |E_j|
// The job's bound factors (gram.md, section 4): P >= max_j inv_j |E_j|, Imax = max_j inv_j.
layout(std430, set = 0, binding = 3) readonly buffer JobFactors { double job_factor[]; };
layout(std430, set = 0, binding = 4) readonly buffer GBlocks { uvec2 g_block[]; };      // device addresses of G''s blocks
layout(std430, set = 0, binding = 5) buffer Centroids { double csum[]; };               // [S][D], f64 sums
layout(std430, set = 0, binding = 6) buffer Approx { double approx[]; };                // [S][N]
layout(std430, set = 0, binding = 7) writeonly buffer Winners { uint winners[]; };      // [S][ring]
// Per sequence: chosen_norms (T, the sum of the bounds nu_i over the chosen
// items) and the instrumented build's max |exact - a| / Bhat.
layout(std430, set = 0, binding = 8) buffer StateF64 { double state_f64[]; };           // [S][2]
// Per sequence: the item appended last (its G' row, mask and centroid row are
// still to apply), then the run's counters: window sizes summed, windows of
// one, fallbacks, largest window, and the window-size histogram.
layout(std430, set = 0, binding = 9) buffer StateU32 { uint state_u32[]; };             // [S][STATE_U32]

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer GRow { float g[]; };

#include "gram_state.glsl"

shared float center[MAX_DIM];                  // c = (f32) csum, for the chains
// The first STAGE_ROWS window members' rows, loaded by the whole workgroup
// before the chains (a chain from shared memory waits ~30 cycles a batch of
// loads, from L2 ~400).
shared float staged_rows[STAGE_ROWS * MAX_DIM];
shared double sh_approx[SHARED_SLOTS];         // the shared page (thread-private slots)
// The subgroups' partials of phase A, by step parity: a1, its index, a2, and
// the bound's two squared norms.
shared double red_a1[2][SUBGROUP_SLOTS];
shared uint red_j1[2][SUBGROUP_SLOTS];
shared double red_a2[2][SUBGROUP_SLOTS];
shared dvec2 red_norms[2][SUBGROUP_SLOTS];
// The window's members, their count by step parity, and the subgroups' best.
shared uint window[WINDOW_CAPACITY];
shared uint window_count[2];
shared uint red_key[SUBGROUP_SLOTS];
shared uint red_best[SUBGROUP_SLOTS];

#include "contract.glsl"

#define STAGED_VALUE(row, d) staged_rows[(row) * MAX_DIM + (d)]
CONTRACT_SCORE_FUNCTION(staged_score, STAGED_VALUE)

uint seq;
uint tid;
uint threads;

#define INF uint64BitsToDouble(0x7ff0000000000000ul)

// Powers of two, exact in f64 (the lf suffix keeps 2^-150 out of f32).
const double U32 = 1.0lf / 16777216.0lf;             // u = 2^-24, f32 unit roundoff
const double E64 = 1.0lf / 9007199254740992.0lf;     // e = 2^-53, f64 unit roundoff
const double EPS64 = 1.0lf / 4503599627370496.0lf;   // 2^-52: gamma64(n) <= n * 2^-52
const double TINY = 1.0lf / 1427247692705959881058285969449495136382746624.0lf;  // eta = 2^-150
const double SLACK = 1.0lf + 1.0lf / 1048576.0lf;    // 1 + 2^-20: the bound's own f64 evaluation
// The absolute error of one stored G' entry below the normal range: eta with
// gradual underflow; where denormals may be flushed (EXACT_UNDERFLOW:
// the device does not keep them) a flushed entry or load is off by less than
// 2^-126 (gram.md, section 6).
#define G_ETA (EXACT_UNDERFLOW ? TINY * 16777216.0lf : TINY)  // 2^-126 or eta

// G''s row w: block w / block_rows, 64-bit byte offset inside it.
GRow g_row(uint w) {
    const uint64_t base = packUint2x32(g_block[w / pc.block_rows]);
    return GRow(base + uint64_t(w % pc.block_rows) * uint64_t(pc.num_items) * 4ul);
}

// Candidates of the global page a thread loads at once.
const uint GLOBAL_BATCH = 8u;

// The candidates of the shared and global pages: this thread's q-th of each.
uint shared_j(uint q) { return REG_SLOTS * threads + tid + q * threads; }
uint global_first() { return REG_SLOTS * threads + pc.shared_count; }

// ---- the thread's state, for the dispatch ----
double ap[REG_SLOTS];        // register page: approx of j = tid + k * threads
double cs[DIM_SLOTS];        // the f64 centroid sum of d = tid + i * threads
double chosen_norms;         // T (the same in every thread)
// Phase A's running minima over this thread's candidates.
double a1, a2;
uint j1;

void consider(double a, uint j) {
    if (a < a2) {
        if (a < a1) {
            a2 = a1;
            a1 = a;
            j1 = j;
        } else {
            a2 = a;  // a == a1 too: a tie leaves a2 = a1, and the window is not one item
        }
    }
}

// Adds G' row `row` (unless `add` is false: a twin) to every candidate of
// this thread, masks `w`, and takes the running minima.
void add_row_and_scan(GRow row, uint w, bool add) {
    const uint n = pc.num_items;
    a1 = INF;
    a2 = INF;
    j1 = INDEX_NONE;
    // Every load of the register page first, then the arithmetic: the loads
    // do not wait on each other.
    float g[REG_SLOTS];
    [[unroll]] for (uint k = 0u; k < REG_SLOTS; ++k) {
        const uint j = tid + k * threads;
        g[k] = (add && j < n) ? row.g[j] : 0.0;
    }
    [[unroll]] for (uint k = 0u; k < REG_SLOTS; ++k) {
        const uint j = tid + k * threads;
        if (j == w) ap[k] = INF;                   // chosen: never a candidate again
        ap[k] += double(FTZ(g[k]));                // inf + x = inf; a flushed entry is covered by G_ETA
        consider(ap[k], j);
    }
    for (uint q = 0u; tid + q * threads < pc.shared_count; ++q) {
        const uint j = shared_j(q);
        double a = sh_approx[tid + q * threads];
        if (j == w) a = INF;
        if (add) a += double(FTZ(row.g[j]));
        sh_approx[tid + q * threads] = a;
        consider(a, j);
    }
    // The global page, GLOBAL_BATCH candidates at a time with their loads
    // issued together (one at a time, each step would wait on every load).
    const uint base = seq * n;
    for (uint j0 = global_first() + tid; j0 < n; j0 += GLOBAL_BATCH * threads) {
        double a[GLOBAL_BATCH];
        float gb[GLOBAL_BATCH];
        [[unroll]] for (uint b = 0u; b < GLOBAL_BATCH; ++b) {
            const uint j = j0 + b * threads;
            a[b] = j < n ? approx[base + j] : INF;
            gb[b] = (add && j < n) ? row.g[j] : 0.0;
        }
        [[unroll]] for (uint b = 0u; b < GLOBAL_BATCH; ++b) {
            const uint j = j0 + b * threads;
            if (j < n) {  // (no `break` in an unrolled loop: NVIDIA's compiler then keeps it rolled)
                if (j == w) a[b] = INF;
                a[b] += double(FTZ(gb[b]));
                approx[base + j] = a[b];
                consider(a[b], j);
            }
        }
    }
}

// Adds row w of E to the f64 centroid, writes c = (f32) csum to `center`,
// and returns this thread's parts of |w o c|^2 and |csum|^2 (gram.md [wc], [cs]).
dvec2 add_to_centroid(uint w) {
    dvec2 norms = dvec2(0.0lf);
    [[unroll]] for (uint i = 0u; i < DIM_SLOTS; ++i) {
        const uint d = tid + i * threads;
        if (d < pc.dim) {
            cs[i] += TO_F64(LOAD_EMB(EMB_INDEX(w, d)));
            const float c = contract_centroid(cs[i]);
            center[d] = c;
            const double wc = double(pc.dim - d) * TO_F64(c);  // exact: an integer < 2^24 times an f32
            norms += dvec2(wc * wc, cs[i] * cs[i]);
        }
    }
    return norms;
}

// The step's bound Bhat on |score_j - approx_j| for every unmasked j
// (gram.md, section 4), from the two norms' squares, m = t chosen items.
double step_bound(dvec2 norm2, uint m_items) {
    const double wc_norm = sqrt(norm2.x);
    const double cs_norm = sqrt(norm2.y);
    const double D = double(pc.dim), m = double(m_items);
    const double P = job_factor[0], IMAX = job_factor[1];
    const double rho = U32 * (1.0lf + 2.0lf * D * U32);          // >= u (1+u)^(D-1)
    const double g_dim = D * EPS64;                               // >= gamma64(D): G's f64 dot product
    const double g_sum = (m - 1.0lf) * EPS64;                     // >= gamma64(m-1): f64 sums over chosen items
    const double kappa_g = g_dim + E64 * (1.0lf + g_dim)          // G: f64 dot product, times inv_j in f64,
                         + U32 * (1.0lf + E64) * (1.0lf + g_dim)  //    stored as f32
                         + g_sum * (1.0lf + U32) * (1.0lf + E64) * (1.0lf + g_dim);  // approx's f64 sum
    const double kappa = g_sum + kappa_g;                         // ... and the f64 centroid
    const double g_abs = m * G_ETA * (1.0lf + g_sum);             // G' entries below the normal range
    const double chain = rho * wc_norm + U32 * cs_norm + TINY * sqrt(D);
    const double err = P * (chain + kappa * chosen_norms) + IMAX * D * TINY * (1.0lf + 2.0lf * D * U32) + g_abs;
    const double amax = P * (cs_norm + kappa * chosen_norms) + g_abs;  // >= |approx_j|
    return SLACK * ((1.0lf + U32) * err + U32 * amax + TINY);
}

// The contract's order as one u32 per score (contract_key) and the index.
void reduce_best(uint key, uint j, out uint best_key, out uint best_j) {
    const uint k = subgroupMin(key);
    const uint b = subgroupMin(key == k ? contract_tie_key(j) : 0xffffffffu);
    if (subgroupElect()) {
        red_key[gl_SubgroupID] = k;
        red_best[gl_SubgroupID] = b;
    }
    // Orders the subgroups' best before every thread combines them.
    barrier();
    best_key = 0xffffffffu;
    uint tie = 0xffffffffu;
    for (uint s = 0u; s < gl_NumSubgroups; ++s) {
        if (red_key[s] < best_key || (red_key[s] == best_key && red_best[s] < tie)) {
            best_key = red_key[s];
            tie = red_best[s];
        }
    }
    best_j = contract_tie_key(tie);  // its own inverse
}

// The rare paths (the fallback scan, the instrumented check) visit every
// candidate of this thread with a plain loop, which cannot index the
// register page: they read the page's copy in approx[], written here first
// (one store a slot; the unrolled chains they would otherwise need cost
// registers in every step).
void spill_register_page() {
    const uint n = pc.num_items;
    [[unroll]] for (uint k = 0u; k < REG_SLOTS; ++k) {
        const uint j = tid + k * threads;
        if (j < n) approx[seq * n + j] = ap[k];
    }
}

// This thread's candidate `q` (registers first, then the shared page, then
// global memory) and its approx; false past its last.
bool candidate(uint q, out uint j, out double a) {
    const uint n = pc.num_items;
    const uint reg = q, sh = q - REG_SLOTS;
    if (reg < REG_SLOTS) {
        j = tid + reg * threads;
        if (j >= n) return false;
        a = approx[seq * n + j];
        return true;
    }
    if (tid + sh * threads < pc.shared_count) {
        j = shared_j(sh);
        a = sh_approx[tid + sh * threads];
        return true;
    }
    const uint shared_mine = (pc.shared_count + threads - 1u - tid) / threads;  // this thread's shared slots
    j = global_first() + tid + (sh - shared_mine) * threads;
    if (j >= n) return false;
    a = approx[seq * n + j];
    return true;
}

// Exact scores of every unmasked candidate of this thread: the fallback.
void scan_all(inout uint best_key, inout uint best_j) {
    spill_register_page();
    uint j;
    double a;
    for (uint q = 0u; candidate(q, j, a); ++q) {
        if (a == INF) continue;  // chosen (padding slots are never visited)
        const uint key = contract_key(contract_score(j, pc.dim));
        if (key < best_key || (key == best_key && contract_tie_key(j) < contract_tie_key(best_j))) {
            best_key = key;
            best_j = j;
        }
    }
}

void add_to_window(uint j, double a, uint parity) {
    const uint slot = atomicAdd(window_count[parity], 1u);
    if (slot < WINDOW_CAPACITY) {
        window[slot] = j;
    }
}

// Appends this thread's window members {j : approx_j <= tau} to `window`.
void collect_window(double tau, uint parity) {
    const uint n = pc.num_items;
    [[unroll]] for (uint k = 0u; k < REG_SLOTS; ++k) {
        if (ap[k] <= tau) add_to_window(tid + k * threads, ap[k], parity);
    }
    for (uint q = 0u; tid + q * threads < pc.shared_count; ++q) {
        const double a = sh_approx[tid + q * threads];
        if (a <= tau) add_to_window(shared_j(q), a, parity);
    }
    for (uint j = global_first() + tid; j < n; j += threads) {
        const double a = approx[seq * n + j];
        if (a <= tau) add_to_window(j, a, parity);
    }
}


// ---- loading and saving the state around a dispatch ----
void load_state() {
    const uint n = pc.num_items;
    [[unroll]] for (uint k = 0u; k < REG_SLOTS; ++k) {
        const uint j = tid + k * threads;
        ap[k] = j < n ? approx[seq * n + j] : INF;  // padding: never a candidate
    }
    for (uint q = 0u; tid + q * threads < pc.shared_count; ++q) {
        sh_approx[tid + q * threads] = approx[seq * n + shared_j(q)];
    }
    [[unroll]] for (uint i = 0u; i < DIM_SLOTS; ++i) {
        const uint d = tid + i * threads;
        cs[i] = d < pc.dim ? csum[seq * pc.dim + d] : 0.0lf;
    }
    chosen_norms = state_f64[seq * GRAM_STATE_F64 + GRAM_T_NORMS];
}

void save_state() {
    const uint n = pc.num_items;
    [[unroll]] for (uint k = 0u; k < REG_SLOTS; ++k) {
        const uint j = tid + k * threads;
        if (j < n) approx[seq * n + j] = ap[k];
    }
    for (uint q = 0u; tid + q * threads < pc.shared_count; ++q) {
        approx[seq * n + shared_j(q)] = sh_approx[tid + q * threads];
    }
    [[unroll]] for (uint i = 0u; i < DIM_SLOTS; ++i) {
        const uint d = tid + i * threads;
        if (d < pc.dim) csum[seq * pc.dim + d] = cs[i];
    }
}

uint window_bin(uint count) {
    if (count == 0u) return GRAM_HIST_BINS - 1u;
    return min(uint(findMSB(count - 1u) + 1), GRAM_HIST_BINS - 2u);  // findMSB(0) = -1
}

void main() {
    seq = gl_WorkGroupID.x;
    tid = gl_LocalInvocationID.x;
    threads = gl_WorkGroupSize.x;
    const uint state = seq * GRAM_STATE_U32;
    load_state();
    uint w = state_u32[state + GRAM_S_PREVIOUS];
    // Thread 0 counts the dispatch's windows; they are added to state_u32 at the end.
    uint window_total = 0u, window_ones = 0u, fallbacks = 0u, window_max = state_u32[state + GRAM_S_WINDOW_MAX];
    uint hist[GRAM_HIST_BINS];
    [[unroll]] for (uint b = 0u; b < GRAM_HIST_BINS; ++b) hist[b] = 0u;
    if (tid == 0u) {
        window_count[0] = 0u;
        window_count[1] = 0u;
    }
    // Orders the counters' reset before the first step counts.
    barrier();

    for (uint k = 0u; k < pc.steps; ++k) {
        const uint t = pc.first_step + k;
        const uint parity = t & 1u;

        // ---- phase A: apply w (the winner of step t - 1) ----
        bool add = true;
        add_row_and_scan(g_row(w), w, add);
        const dvec2 norms = add_to_centroid(w);
        chosen_norms += row_norm[w];
        {
            const double m1 = subgroupMin(a1);
            const uvec4 at_min = subgroupBallot(a1 == m1);
            const uint holder = subgroupBallotFindLSB(at_min);
            // The second smallest of the subgroup: m1 again when two lanes
            // hold it, else the smallest of the other lanes' a1 and the
            // holder's a2.
            double second = subgroupMin(gl_SubgroupInvocationID == holder ? a2 : a1);
            if (subgroupBallotBitCount(at_min) > 1u) second = m1;
            const dvec2 norm_sum = subgroupAdd(norms);
            // The holder's index, by a min over the subgroup: subgroupBroadcast
            // with a lane chosen at run time needs subgroupBroadcastDynamicId,
            // a feature divgpu does not enable (undefined behaviour without it).
            // Every lane takes part: inside the elected branch below the
            // holder's lane would be inactive, and its value undefined.
            const uint holder_j = subgroupMin(gl_SubgroupInvocationID == holder ? j1 : 0xffffffffu);
            if (subgroupElect()) {
                red_a1[parity][gl_SubgroupID] = m1;
                red_j1[parity][gl_SubgroupID] = holder_j;
                red_a2[parity][gl_SubgroupID] = second;
                red_norms[parity][gl_SubgroupID] = norm_sum;
            }
        }
        // B1: orders the subgroups' partials (and this step's centroid in
        // `center`) before every thread reads them.
        barrier();

        // ---- phase B: every thread combines the partials in the same order ----
        double best_a = INF, second_a = INF;
        uint best = INDEX_NONE;
        dvec2 norm2 = dvec2(0.0lf);
        for (uint s = 0u; s < gl_NumSubgroups; ++s) {
            const double m1 = red_a1[parity][s], m2 = red_a2[parity][s];
            if (m1 < best_a) {
                second_a = min(best_a, m2);
                best_a = m1;
                best = red_j1[parity][s];
            } else {
                second_a = min(second_a, m1);  // m1 == best_a: a tie, second = best
            }
            norm2 += red_norms[parity][s];
        }
        // The other parity's window count was last read in step t - 1, before B1.
        if (tid == 0u) window_count[parity ^ 1u] = 0u;

        uint winner, count;
        const double bound = step_bound(norm2, t);
        const double tau = best_a + 2.0lf * bound;
        if (second_a > tau) {
            winner = best;  // the window is {best}: no chain
            count = 1u;
        } else {
            collect_window(tau, parity);
            // B2: orders the window's members and count before every thread reads them.
            barrier();
            count = window_count[parity];
            uint best_key = 0xffffffffu, best_j = INDEX_NONE;
            if (count != 0u && count <= WINDOW_CAPACITY) {
                const uint staged = min(count, STAGE_ROWS);
                for (uint e = tid; e < staged * pc.dim; e += threads) {
                    const uint m = e / pc.dim, d = e - m * pc.dim;
                    staged_rows[m * MAX_DIM + d] = LOAD_EMB(EMB_INDEX(window[m], d));
                }
                // Orders the staged rows before the chains read them.
                barrier();
                for (uint m = tid; m < count; m += threads) {
                    const uint j = window[m];
                    const uint key = contract_key(m < staged ? staged_score(j, m, pc.dim) : contract_score(j, pc.dim));
                    if (key < best_key || (key == best_key && contract_tie_key(j) < contract_tie_key(best_j))) {
                        best_key = key;
                        best_j = j;
                    }
                }
            } else {
                // The fallback (count == 0 cannot happen under the theorem; scanning keeps it safe).
                scan_all(best_key, best_j);
            }
            uint chosen_key;
            reduce_best(best_key, best_j, chosen_key, winner);  // B3 inside
        }

        if (tid == 0u) {
            winners[seq * pc.ring + t % pc.ring] = winner;
            window_total += count;
            window_ones += count == 1u ? 1u : 0u;
            fallbacks += (count == 0u || count > WINDOW_CAPACITY) ? 1u : 0u;
            window_max = max(window_max, count);
            hist[window_bin(count)] += 1u;
        }
        w = winner;
    }

    save_state();
    if (tid == 0u) {
        state_u32[state + GRAM_S_PREVIOUS] = w;
        state_u32[state + GRAM_S_WINDOW_TOTAL] += window_total;
        state_u32[state + GRAM_S_WINDOW_ONES] += window_ones;
        state_u32[state + GRAM_S_FALLBACKS] += fallbacks;
        state_u32[state + GRAM_S_WINDOW_MAX] = window_max;
        [[unroll]] for (uint b = 0u; b < GRAM_HIST_BINS; ++b) state_u32[state + GRAM_S_HIST + b] += hist[b];
        state_f64[seq * GRAM_STATE_F64 + GRAM_T_NORMS] = chosen_norms;
    }
}
