// Imitation of a device that flushes f32 denormals (inputs and results), as
// the H200 does (shaderDenormPreserveFloat32 = false): switched on by the
// driver (specialization constant FLUSH_DENORMALS, id 102) only for a context
// opened with denormals = "flush" on a device without the DenormFlushToZero
// execution mode (lavapipe), so that the tests can run the flush-to-zero path
// there. Bit operations, so no compiler can fold them away; off, the driver
// folds the branch and FTZ(x) is x.
layout(constant_id = 102) const bool FLUSH_DENORMALS = false;
float ftz(float x) {
    if (!FLUSH_DENORMALS) return x;
    const uint bits = floatBitsToUint(x);
    return (bits & 0x7f800000u) == 0u ? uintBitsToFloat(bits & 0x80000000u) : x;
}
#define FTZ(x) ftz(x)
