// Imitation of a device that flushes f32 denormals (inputs and results), as
// the H200 does (shaderDenormPreserveFloat32 = false): defined by the driver
// (DIVGPU_FLUSH_DENORMALS) only for a context opened with denormals = "flush"
// on a device without the DenormFlushToZero execution mode (lavapipe), so
// that the tests can run the flush-to-zero path there. Bit operations, so no
// compiler can fold them away.
#ifdef DIVGPU_FLUSH_DENORMALS
float ftz(float x) {
    const uint bits = floatBitsToUint(x);
    return (bits & 0x7f800000u) == 0u ? uintBitsToFloat(bits & 0x80000000u) : x;
}
#define FTZ(x) ftz(x)
#else
#define FTZ(x) (x)
#endif
