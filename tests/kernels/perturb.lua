-- DIVGPU_PERTURB: the contract's non-vacuity twins (shaders/include/contract.glsl).
-- Each value changes one operation of the chain, and the parity tests must
-- see the output change. Applied to the shipped source at run time by
-- device.shader (a define of this name picks the patch); the shipped source
-- carries no trace of them. A hunk whose `find` is not found exactly once
-- is an error: the patch has drifted from the kernel.
return {
    -- Multiply and add rounded separately (unfused).
    [1] = { {
        find = [[
float chain_step(float c, float e, float acc) {
    return contract_fma(c, e, acc);
}]],
        replace = [[
float chain_step(float c, float e, float acc) {
    precise float product = c * e;
    precise float sum = acc + product;
    return sum;
}]] } },
    -- The centroid cut to half precision's 11 significant bits. (A
    -- packHalf2x16/unpackHalf2x16 round trip changed nothing on the H200's
    -- driver: it caught no difference where lavapipe's did.)
    [2] = { {
        find = "    return NARROW_F32(sum);  // with EXACT_UNDERFLOW, exact where a flushing conversion gives 0",
        replace = "    return uintBitsToFloat(floatBitsToUint(float(sum)) & 0xffffe000u);" } },
    -- Ties go to the larger index.
    [3] = { {
        find = [[
uint contract_tie_key(uint j) {
    return j;
}]],
        replace = [[
uint contract_tie_key(uint j) {
    return ~j;
}]] }, {
        find = [[
bool contract_better(float s, uint j, float best, uint best_j) {
]],
        replace = [[
bool contract_better(float s, uint j, float best, uint best_j) {
    return best_j == INDEX_NONE || s < best || (s == best && j > best_j);
]] } },
}
