//! The device self-test of docs/contract.md#rules-for-implementations: one tiny dispatch whose inputs give
//! different answers fused and unfused (and exercise the other roundings the
//! contract relies on), compared bit for bit with the host.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::buffer::Buffer;
use crate::gpu::commands::Recorder;
use crate::gpu::device::Device;
use crate::gpu::float_controls::Denormals;
use crate::gpu::pipeline::{BindGroup, Pipeline};
use crate::shaders;

/// Result words per case: fma, a*b, (f32)x, x+y (two words), emulated fma.
const WORDS: usize = 6;

/// Cases: (a, b, c) for fma and a*b, (x, y) for f64 add and f64 -> f32.
fn cases() -> (Vec<[f32; 3]>, Vec<[f64; 2]>) {
    let one_ulp = f32::EPSILON; // 2^-23
    let mut f = vec![
        // (1+2^-23)^2 = 1 + 2^-22 + 2^-46: fused keeps the 2^-46, unfused loses it.
        [1.0 + one_ulp, 1.0 + one_ulp, -(1.0 + 2.0 * one_ulp)],
        [0.1, 0.2, -0.02],
        [3.0, 1.0 / 3.0, -1.0],
        // (1+2^-12)^2 = 1 + 2^-11 + 2^-24 is an f32 midpoint; + 2^-60 puts the
        // exact sum just above it. Plain double rounding lands on the midpoint
        // and rounds to even (down); the fused result rounds up.
        [1.0 + 2f32.powi(-12), 1.0 + 2f32.powi(-12), 2f32.powi(-60)],
        [-(1.0 + 2f32.powi(-12)), 1.0 + 2f32.powi(-12), -(2f32.powi(-60))],
        // Exact cancellation gives +0.
        [2.0, -0.5, 1.0],
    ];
    let mut d = vec![
        [1.0 + 2f64.powi(-24), 0.0],                   // exact tie: rounds to even (1.0)
        [1.0 + 2f64.powi(-24) + 2f64.powi(-40), 0.0],  // just above the tie: rounds up
        [1e16, 1.0],
        [0.1, 0.2],
    ];
    // Deterministic pseudo-random cases of the magnitudes the contract sees.
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    for _ in 0..61 {
        f.push([next() as f32, next() as f32, next() as f32 * 0.5]);
        d.push([next() * 40.0, next()]);
    }
    // Subnormal cases, last (SUBNORMAL_CASES of them): results (and one
    // input) below 2^-126. A device that flushes f32 denormals gives 0 here.
    let s = |e: i32| 2f32.powi(e);
    f.extend([[s(-70), s(-70), 0.0], [1.0, s(-130), 0.0], [s(-63), -s(-64) * 1.5, s(-127)]]);
    d.extend([[2f64.powi(-140), 0.0], [-(2f64.powi(-149)), 0.0], [2f64.powi(-127) * 1.25, 0.0]]);
    (f, d)
}

/// The last cases of `cases()` whose results are f32 subnormals.
const SUBNORMAL_CASES: usize = 3;

/// How the contract's fused multiply-add is computed on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FmaMode {
    /// `fma()` is fused and correctly rounded.
    Hardware,
    /// `fma()` is not fused; the exact f64 emulation (`shaders/include/fma.glsl`) is.
    Emulated,
}

impl FmaMode {
    pub fn name(self) -> &'static str {
        match self {
            FmaMode::Hardware => "hardware",
            FmaMode::Emulated => "emulated",
        }
    }
}

/// What the self-test found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelfTest {
    pub fma: FmaMode,
    /// The subnormal cases gave subnormals (false: they were flushed to 0).
    pub denormals_kept: bool,
}

pub fn run(device: &Arc<Device>) -> Result<SelfTest> {
    let (f, d) = cases();
    let n = f.len().min(d.len());
    // FLUSH_DENORMALS (shaders/include/flush.glsl, specialization constant 102):
    // a context imitating a flushing device tests the imitation.
    let flush = u32::from(device.info.denormals == Denormals::FlushEmulated);
    let shader = shaders::shipped("selftest")?;
    let pipeline = Pipeline::new(device, "selftest", shader.spirv, &[(102, flush)], None)?;
    let f_bytes: Vec<u8> = f[..n].iter().flatten().flat_map(|x| x.to_le_bytes()).collect();
    let d_bytes: Vec<u8> = d[..n].iter().flatten().flat_map(|x| x.to_le_bytes()).collect();
    let f_buf = Buffer::storage(device, f_bytes.len() as u64, "selftest f32 inputs")?;
    let d_buf = Buffer::storage(device, d_bytes.len() as u64, "selftest f64 inputs")?;
    let out = Buffer::storage(device, (n * WORDS * 4) as u64, "selftest results")?;
    f_buf.upload(0, &f_bytes)?;
    d_buf.upload(0, &d_bytes)?;
    let group = BindGroup::new(&pipeline, vec![f_buf, d_buf, out.clone()], Vec::new())?;
    let mut rec = Recorder::new(device)?;
    rec.dispatch(&group, &(n as u32).to_le_bytes(), [n.div_ceil(64) as u32, 1, 1])?;
    rec.submit()?;
    rec.wait()?;
    let bytes = out.download(0, (n * WORDS * 4) as u64)?;
    let got: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let name = &device.info.name;
    let fail = |what: &str, i: usize, expected: u32, actual: u32| {
        Error::Device(format!(
            "device '{name}' failed the arithmetic self-test: {what} (case {i}: expected bits {expected:#010x}, got {actual:#010x}); \
             it cannot run the bit-exact fp32 contract"
        ))
    };
    let mut hardware_fma = true;
    let mut denormals_kept = true;
    for i in 0..n {
        let subnormal_case = i >= n - SUBNORMAL_CASES;
        let [a, b, c] = f[i];
        let [x, y] = d[i];
        let sum = (x + y).to_bits();
        let r = &got[WORDS * i..WORDS * (i + 1)];
        let fused = a.mul_add(b, c).to_bits();
        let checks = [
            ("f32 multiply is not correctly rounded", (a * b).to_bits(), r[1]),
            ("f64 -> f32 conversion does not round to nearest even", (x as f32).to_bits(), r[2]),
            ("f64 add is not correctly rounded", sum as u32, r[3]),
            ("f64 add is not correctly rounded", (sum >> 32) as u32, r[4]),
            ("neither fma() nor its f64 emulation is correctly rounded", fused, r[5]),
        ];
        for (what, expected, actual) in checks {
            // A subnormal flushed to (signed) zero is recorded, not an error:
            // such a device runs only tables with the certificate.
            let flushed = subnormal_case && actual & 0x7fff_ffff == 0 && expected & 0x7fff_ffff != 0;
            if flushed && what != "f64 add is not correctly rounded" {
                denormals_kept = false;
            } else if expected != actual {
                return Err(fail(what, i, expected, actual));
            }
        }
        if subnormal_case && r[0] & 0x7fff_ffff == 0 && fused & 0x7fff_ffff != 0 {
            denormals_kept = false;
        } else {
            hardware_fma &= r[0] == fused;
        }
    }
    if !denormals_kept && device.info.denormals == Denormals::Preserved {
        return Err(Error::Device(format!(
            "device '{name}' failed the arithmetic self-test: it flushed f32 denormals although DenormPreserve \
             was requested (shaderDenormPreserveFloat32 = true); it cannot run the bit-exact fp32 contract"
        )));
    }
    let fma = if hardware_fma { FmaMode::Hardware } else { FmaMode::Emulated };
    Ok(SelfTest { fma, denormals_kept })
}
