// Gradual underflow in code (specialization constant EXACT_UNDERFLOW, id 101), for devices that do not
// promise to keep f32 denormals (the H200 flushes them) running a table
// without the subnormal certificate (src/contract/subnormal.rs): the f32
// operations of the contract run in hardware, and whenever an operand or the
// result is below 2^-126 (where a flushing device may differ) the operation
// is redone exactly here, from the operands' bits, in f64 arithmetic and
// integer operations that no f32 flush mode touches. f64 values here are
// multiples of 2^-298 or zero, far above f64's subnormal range.
// Off (the default), TO_F64 and NARROW_F32 are plain conversions (the driver
// folds the branch away). Needs flush.glsl first.
layout(constant_id = 101) const bool EXACT_UNDERFLOW = false;
#define MIN_NORMAL uintBitsToFloat(0x00800000u)  // 2^-126
const double P32 = 1.0lf / 4294967296.0lf;               // 2^-32, exact
const double TWO_M149 = P32 * P32 * P32 * P32 / 2097152.0lf;  // 2^-149, the f32 subnormal spacing

bool is_subnormal(float x) {
    const uint b = floatBitsToUint(x);
    return (b & 0x7f800000u) == 0u && (b & 0x7fffffffu) != 0u;
}

// x as f64, exactly, even where the device would flush a subnormal input.
double exact_f64(float x) {
    const uint b = floatBitsToUint(x);
    if ((b & 0x7f800000u) != 0u) return double(x);  // normal: the conversion is exact and flushes nothing
    const double m = double(b & 0x007fffffu) * TWO_M149;
    return (b & 0x80000000u) != 0u ? -m : m;
}

// The f32 nearest (ties to even) to s + e, with gradual underflow, built from
// bits. Needs |e| <= ulp64(s) / 2 (TwoSum's error term, or 0).
float round_f32_gradual(double s, double e) {
    if (s == 0.0lf) return float(s);  // an exact zero (TwoSum gives e = 0 then)
    int ex;
    frexp(abs(s), ex);  // |s| = m 2^ex, m in [0.5, 1)
    // The f32 spacing at |s|: 2^(ex - 24) among normals, 2^-149 below 2^-126.
    const double q = ex - 24 < -149 ? TWO_M149 : ldexp(1.0lf, ex - 24);
    precise double t = s / q;   // exact: q is a power of two
    precise double te = e / q;
    double n = roundEven(t);
    if (t - floor(t) == 0.5lf && te != 0.0lf) n = te > 0.0lf ? ceil(t) : floor(t);  // a tie only in s
    if (q == TWO_M149) {
        // Subnormal (or 2^-126 itself): the bits are the sign and n.
        return uintBitsToFloat((s < 0.0lf ? 0x80000000u : 0u) | uint(abs(n)));
    }
    return float(n * q);  // exact, normal: the conversion neither rounds nor flushes
}

// fma(a, b, c) with gradual underflow.
float fma_gradual(float a, float b, float c) {
    precise double p = exact_f64(a) * exact_f64(b);  // exact: 48 significant bits
    const double c64 = exact_f64(c);
    precise double s = p + c64;                       // TwoSum: s + e = p + c exactly
    precise double bv = s - p;
    precise double e = (p - (s - bv)) + (c64 - bv);
    return round_f32_gradual(s, e);
}

// a * b with gradual underflow.
float mul_gradual(float a, float b) {
    return round_f32_gradual(exact_f64(a) * exact_f64(b), 0.0lf);  // the product is exact in f64
}

// (f32) s with gradual underflow.
float narrow_gradual(double s) {
    return round_f32_gradual(s, 0.0lf);
}
// f32 -> f64: exactly with EXACT_UNDERFLOW, else as the device does it
// (flushing too, in flush.glsl's imitation).
double to_f64(float x) {
    if (EXACT_UNDERFLOW) return exact_f64(x);
    return double(FTZ(x));
}

// (f32) x: with gradual underflow under EXACT_UNDERFLOW, else as the device does it.
float narrow_f32(double x) {
    if (EXACT_UNDERFLOW) return abs(x) < double(MIN_NORMAL) ? narrow_gradual(x) : float(x);
    return FTZ(float(x));
}
#define TO_F64(x) to_f64(x)
#define NARROW_F32(x) narrow_f32(x)
