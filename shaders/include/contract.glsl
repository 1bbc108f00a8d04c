// The fp32 contract of docs/contract.md#fp32-chain, shared by every scan shape.
// Needs, declared before the include: `center[]` (shared f32 copy of the
// centroid), `inv_norm[]`, EMB_INDEX and LOAD_EMB (the table binding);
// a kernel with a chain of its own (gemm.comp) defines CONTRACT_NO_TABLE_SCORE
// and needs only `inv_norm[]`.
//
// What varies by device or table is a specialization constant, so one module
// serves every device: FMA_EMULATED (fma.glsl), EXACT_UNDERFLOW
// (underflow.glsl), FLUSH_DENORMALS (flush.glsl). The tests' non-vacuity
// twins are source patches kept outside shaders/ (tests/kernels/).

#define SCORE_NONE uintBitsToFloat(0x7f800000u)  // +inf: loses to every real score
const uint INDEX_NONE = 0xffffffffu;

#include "fma.glsl"
#include "flush.glsl"
#extension GL_EXT_control_flow_attributes : enable
#include "underflow.glsl"

// The chain's fma and multiply: fma() or, where the device's fma() is not
// fused (FMA_EMULATED), its exact emulation; with EXACT_UNDERFLOW
// (underflow.glsl) an operation whose operand or result is below 2^-126 is
// redone exactly; FLUSH_DENORMALS (flush.glsl) imitates a flushing device in
// tests. Off, each switch is a branch the driver folds away.
float contract_fma(float a, float b, float c) {
    precise float r;
    if (FMA_EMULATED) {
        r = fma_emulated(FTZ(a), FTZ(b), FTZ(c));
    } else {
        r = fma(FTZ(a), FTZ(b), FTZ(c));
    }
    r = FTZ(r);
    if (EXACT_UNDERFLOW) {
        if (abs(r) < MIN_NORMAL || is_subnormal(a) || is_subnormal(b) || is_subnormal(c)) r = fma_gradual(a, b, c);
    }
    return r;
}

float contract_mul(float a, float b) {
    precise float r = FTZ(a) * FTZ(b);
    r = FTZ(r);
    if (EXACT_UNDERFLOW) {
        if (abs(r) < MIN_NORMAL || is_subnormal(a) || is_subnormal(b)) r = mul_gradual(a, b);
    }
    return r;
}

// One step of the chain: acc + c * e with one rounding (fused).
float chain_step(float c, float e, float acc) {
    return contract_fma(c, e, acc);
}

// Loads of the chain issued this many at a time, ahead of their fmas: the
// fmas stay one chain, d ascending (the contract's order); only the loads
// move, so a load's latency is paid once a batch instead of once an fma.
#define CHAIN_BATCH 8u

// A chain over d ascending, score = (sum_d fma(c[d], E[j][d], acc)) * inv_norm[j],
// with the row's values given by ROW_VALUE(d): the one definition of the
// contract's arithmetic, instantiated for each place a kernel reads rows from
// (the table: contract_score; gram.comp: rows staged in shared memory).
#define CONTRACT_SCORE_FUNCTION(NAME, ROW_VALUE) \
float NAME(uint j, uint row, uint dim) { \
    precise float acc = 0.0; \
    uint d = 0u; \
    for (; d + CHAIN_BATCH <= dim; d += CHAIN_BATCH) { \
        float e[CHAIN_BATCH], c[CHAIN_BATCH]; \
        [[unroll]] for (uint k = 0u; k < CHAIN_BATCH; ++k) { \
            e[k] = ROW_VALUE(row, d + k); \
            c[k] = center[d + k]; \
        } \
        [[unroll]] for (uint k = 0u; k < CHAIN_BATCH; ++k) acc = chain_step(c[k], e[k], acc); \
    } \
    for (; d < dim; ++d) acc = chain_step(center[d], ROW_VALUE(row, d), acc); \
    return contract_mul(acc, inv_norm[j]); \
}

#ifndef CONTRACT_NO_TABLE_SCORE
#define TABLE_VALUE(row, d) LOAD_EMB(EMB_INDEX(row, d))
CONTRACT_SCORE_FUNCTION(contract_score_of_row, TABLE_VALUE)

// score[j] = (sum_d fma(c[d], E[j][d], acc), d ascending) * inv_norm[j]
float contract_score(uint j, uint dim) {
    return contract_score_of_row(j, j, dim);
}
#endif

// c[d] = (f32) csum[d], round to nearest even.
float contract_centroid(double sum) {
    return NARROW_F32(sum);  // with EXACT_UNDERFLOW, exact where a flushing conversion gives 0
}

// An order-preserving map of f32 scores to u32 (-0 counts as +0; no NaN
// occurs): a < b as scores exactly when score_key(a) < score_key(b). Integer
// operations, which no f32 flush mode touches.
uint score_key(float x) {
    uint b = floatBitsToUint(x);
    if ((b & 0x7fffffffu) == 0u) b = 0u;
    return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}

// The contract's order as integers, for kernels that reduce with subgroup
// operations: (contract_key(s), contract_tie_key(j)) compared
// lexicographically as u32 is exactly contract_better below. contract_tie_key
// is its own inverse.
uint contract_key(float s) {
    if (EXACT_UNDERFLOW) return score_key(s);  // by bits: subnormal scores keep their order
    return score_key(FTZ(s));  // as the device (or flush.glsl's imitation) compares
}

uint contract_tie_key(uint j) {
    return j;
}

// The contract's order: smaller score first; equal scores (IEEE ==) -> smaller index.
bool contract_better(float s, uint j, float best, uint best_j) {
    if (EXACT_UNDERFLOW) {
        // Scores may be subnormal: compare their bits, which no flush mode
        // touches (an order-preserving map of f32 to u32; -0 counts as +0).
        const uint ks = score_key(s), kb = score_key(best);
        return ks < kb || (ks == kb && j < best_j);
    }
    return FTZ(s) < FTZ(best) || (FTZ(s) == FTZ(best) && j < best_j);
}
