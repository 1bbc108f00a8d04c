// The fp32 contract of docs/contract.md#fp32-chain, shared by every scan shape.
// Needs, declared before the include: `center[]` (shared f32 copy of the
// centroid), `inv_norm[]`, EMB_INDEX and LOAD_EMB (the table binding);
// a kernel with a chain of its own (gemm.comp) defines CONTRACT_NO_TABLE_SCORE
// and needs only `inv_norm[]`.
//
// DIVGPU_PERTURB (0 = off) exists only for the tests' non-vacuity twins: each
// value changes one operation of the chain, and the parity tests must see the
// output change.
#ifndef DIVGPU_PERTURB
#define DIVGPU_PERTURB 0
#endif

#define SCORE_NONE uintBitsToFloat(0x7f800000u)  // +inf: loses to every real score
const uint INDEX_NONE = 0xffffffffu;

#include "fma.glsl"
#include "flush.glsl"
#extension GL_EXT_control_flow_attributes : enable
#include "underflow.glsl"

// DIVGPU_FMA_EMULATED is defined by the driver when the device's self-test
// found fma() unfused: the chain then uses the exact emulation instead.
#ifdef DIVGPU_FMA_EMULATED
#define contract_fma_op fma_emulated
#else
#define contract_fma_op fma
#endif

// The chain's fma and multiply. With DIVGPU_EXACT_UNDERFLOW (underflow.glsl)
// an operation whose operand or result is below 2^-126 is redone exactly;
// DIVGPU_FLUSH_DENORMALS (flush.glsl) imitates a flushing device in tests.
#if defined(DIVGPU_FLUSH_DENORMALS) || defined(DIVGPU_EXACT_UNDERFLOW)
float contract_fma(float a, float b, float c) {
    precise float r = contract_fma_op(FTZ(a), FTZ(b), FTZ(c));
    r = FTZ(r);
#ifdef DIVGPU_EXACT_UNDERFLOW
    if (abs(r) < MIN_NORMAL || is_subnormal(a) || is_subnormal(b) || is_subnormal(c)) r = fma_gradual(a, b, c);
#endif
    return r;
}
#else
#define contract_fma contract_fma_op
#endif

float contract_mul(float a, float b) {
    precise float r = FTZ(a) * FTZ(b);
    r = FTZ(r);
#ifdef DIVGPU_EXACT_UNDERFLOW
    if (abs(r) < MIN_NORMAL || is_subnormal(a) || is_subnormal(b)) r = mul_gradual(a, b);
#endif
    return r;
}

// One step of the chain: acc + c * e with one rounding (fused).
#if DIVGPU_PERTURB == 1
// Twin: multiply and add rounded separately (unfused).
float chain_step(float c, float e, float acc) {
    precise float product = c * e;
    precise float sum = acc + product;
    return sum;
}
#else
#define chain_step(c, e, acc) contract_fma(c, e, acc)
#endif

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
#if DIVGPU_PERTURB == 2
    // Twin: the centroid cut to half precision's 11 significant bits. (A
    // packHalf2x16/unpackHalf2x16 round trip changed nothing on the H200's
    // driver: it caught no difference where lavapipe's did.)
    return uintBitsToFloat(floatBitsToUint(float(sum)) & 0xffffe000u);
#else
    return NARROW_F32(sum);  // with DIVGPU_EXACT_UNDERFLOW, exact where a flushing conversion gives 0
#endif
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
#ifdef DIVGPU_EXACT_UNDERFLOW
    return score_key(s);       // by bits: subnormal scores keep their order
#else
    return score_key(FTZ(s));  // as the device (or flush.glsl's imitation) compares
#endif
}

uint contract_tie_key(uint j) {
#if DIVGPU_PERTURB == 3
    return ~j;  // Twin: ties go to the larger index.
#else
    return j;
#endif
}

// The contract's order: smaller score first; equal scores (IEEE ==) -> smaller index.
bool contract_better(float s, uint j, float best, uint best_j) {
#if DIVGPU_PERTURB == 3
    // Twin: ties go to the larger index.
    return best_j == INDEX_NONE || s < best || (s == best && j > best_j);
#elif defined(DIVGPU_EXACT_UNDERFLOW)
    // Scores may be subnormal: compare their bits, which no flush mode
    // touches (an order-preserving map of f32 to u32; -0 counts as +0).
    const uint ks = score_key(s), kb = score_key(best);
    return ks < kb || (ks == kb && j < best_j);
#else
    return FTZ(s) < FTZ(best) || (FTZ(s) == FTZ(best) && j < best_j);
#endif
}
