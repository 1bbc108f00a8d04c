// The fp32 contract of SPEC section 2, shared by every scan shape.
// Needs, declared before the include: `center[]` (shared f32 copy of the
// centroid), `inv_norm[]`, EMB_INDEX and LOAD_EMB (the table binding).
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

// DIVGPU_FMA_EMULATED is defined by the driver when the device's self-test
// found fma() unfused: the chain then uses the exact emulation instead.
#ifdef DIVGPU_FMA_EMULATED
#define contract_fma fma_emulated
#else
#define contract_fma fma
#endif

// score[j] = (sum_d fma(c[d], E[j][d], acc), d ascending) * inv_norm[j]
float contract_score(uint j, uint dim) {
    precise float acc = 0.0;
    for (uint d = 0; d < dim; ++d) {
#if DIVGPU_PERTURB == 1
        // Twin: multiply and add rounded separately (unfused).
        precise float product = center[d] * LOAD_EMB(EMB_INDEX(j, d));
        acc = acc + product;
#else
        acc = contract_fma(center[d], LOAD_EMB(EMB_INDEX(j, d)), acc);
#endif
    }
    precise float score = acc * inv_norm[j];
    return score;
}

// c[d] = (f32) csum[d], round to nearest even.
float contract_centroid(double sum) {
#if DIVGPU_PERTURB == 2
    // Twin: the centroid cut to half precision's 11 significant bits. (A
    // packHalf2x16/unpackHalf2x16 round trip changed nothing on the H200's
    // driver: it caught no difference where lavapipe's did.)
    return uintBitsToFloat(floatBitsToUint(float(sum)) & 0xffffe000u);
#else
    return float(sum);
#endif
}

// The contract's order: smaller score first; equal scores (IEEE ==) -> smaller index.
bool contract_better(float s, uint j, float best, uint best_j) {
#if DIVGPU_PERTURB == 3
    // Twin: ties go to the larger index.
    return best_j == INDEX_NONE || s < best || (s == best && j > best_j);
#else
    return s < best || (s == best && j < best_j);
#endif
}
