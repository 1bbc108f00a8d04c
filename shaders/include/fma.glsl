// A correctly rounded f32 fused multiply-add, for devices whose fma() is not
// fused (Mesa's lavapipe computes fma() as a multiply and an add).
//
// a*b is exact in f64 (two 24-bit significands make at most 48 bits). The
// sum p + c is computed in f64 and then "rounded to odd": TwoSum gives the
// exact error of the f64 sum, and when the sum is inexact and its last bit is
// even, it moves one f64 ulp towards the exact value. Rounding that to f32
// (round to nearest even) is then the correctly rounded fma, because
// 53 >= 2*24 + 2 (Boldo & Melquiond, "Emulation of FMA and correctly rounded
// sums: proved algorithms using rounding to odd", IEEE TC 2008). Plain
// double rounding without the odd step is wrong near f32 midpoints; the
// self-test has such a case.
//
// FMA_EMULATED (specialization constant 100) is set by the driver when the
// device's self-test found fma() unfused: contract.glsl's chain then uses
// this emulation instead of fma().
layout(constant_id = 100) const bool FMA_EMULATED = false;
float fma_emulated(float a, float b, float c) {
    precise double p = double(a) * double(b);
    precise double s = p + double(c);
    precise double v = s - p;
    precise double err = (p - (s - v)) + (double(c) - v);
    if (err != 0.0) {
        uvec2 bits = unpackDouble2x32(s);  // x: low word, y: high word
        if ((bits.x & 1u) == 0u) {
            if ((err > 0.0) == (s > 0.0)) {
                bits.x += 1u;  // away from zero; an even low word cannot carry
            } else {
                if (bits.x == 0u) {
                    bits.y -= 1u;  // borrow
                }
                bits.x -= 1u;
            }
            s = packDouble2x32(bits);
        }
    }
    return float(s);
}
