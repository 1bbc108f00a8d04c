//! f32 denormal handling of a device's shaders (docs/contract.md#subnormals).
//!
//! The contract is IEEE arithmetic with gradual underflow. Where the device
//! can promise that (`shaderDenormPreserveFloat32`), every shader is given
//! the `DenormPreserve` execution mode; elsewhere the run needs the table's
//! certificate (`contract::subnormal`). Tests force the other side:
//! `DenormFlushToZero` where supported (else the same in shader code), so a
//! device that flushes is imitated on one that does not. The mode is added to the SPIR-V module here, at
//! pipeline creation, so the shipped shaders need no variants.

use ash::vk;

/// How a device's f32 denormals are handled in divgpu's shaders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denormals {
    /// `DenormPreserve` requested: the contract holds on every table.
    Preserved,
    /// The device promises nothing: runs need the table's certificate.
    NotGuaranteed,
    /// `DenormFlushToZero` requested (`denormals = "flush"`, for tests): the
    /// device is made to flush, and runs need the certificate.
    Flushed,
    /// `denormals = "flush"` on a device without that execution mode
    /// (lavapipe): the shaders flush in code (`shaders/include/flush.glsl`,
    /// compiled with DIVGPU_FLUSH_DENORMALS), and runs need the certificate.
    FlushEmulated,
}

impl Denormals {
    pub fn name(self) -> &'static str {
        match self {
            Denormals::Preserved => "preserved",
            Denormals::NotGuaranteed => "not guaranteed",
            Denormals::Flushed => "flushed (forced)",
            Denormals::FlushEmulated => "flushed (emulated in the shaders)",
        }
    }

    /// The mode as a stable key, for code to decide by (`ctx.info.denormals_mode`);
    /// `name` is the sentence for people.
    pub fn key(self) -> &'static str {
        match self {
            Denormals::Preserved => "preserved",
            Denormals::NotGuaranteed => "not_guaranteed",
            Denormals::Flushed => "flushed",
            Denormals::FlushEmulated => "flush_emulated",
        }
    }

    /// Runs need the table's certificate.
    pub fn need_certificate(self) -> bool {
        self != Denormals::Preserved
    }
}

/// The float-controls properties that decide what can be requested.
#[derive(Debug, Clone, Copy, Default)]
pub struct FloatControls {
    pub preserve: [bool; 3],     // 16, 32, 64 bits
    pub flush: [bool; 3],        // 16, 32, 64 bits
    pub independence: i32,       // VkShaderFloatControlsIndependence
}

const WIDTHS: [u32; 3] = [16, 32, 64];

/// The execution-mode widths to declare for f32 `preserve` (or flush) so that
/// `denormBehaviorIndependence` is respected, or None when it cannot be.
/// NONE: every width gets the same mode, so all three must support it;
/// 32_BIT_ONLY: 16 and 64 must agree (both declared, or neither).
pub fn widths(fc: &FloatControls, flush: bool) -> Option<Vec<u32>> {
    let ok = if flush { fc.flush } else { fc.preserve };
    if !ok[1] {
        return None;
    }
    let independence = vk::ShaderFloatControlsIndependence::from_raw(fc.independence);
    if independence == vk::ShaderFloatControlsIndependence::NONE {
        return if ok.iter().all(|&b| b) { Some(WIDTHS.to_vec()) } else { None };
    }
    if independence == vk::ShaderFloatControlsIndependence::TYPE_32_ONLY && ok[0] && ok[2] {
        return Some(WIDTHS.to_vec());
    }
    Some(vec![32])
}

// SPIR-V opcodes, capabilities and execution modes (SPIR-V 1.6 spec, 3.x).
const OP_EXTENSION: u32 = 10;
const OP_CAPABILITY: u32 = 17;
const OP_ENTRY_POINT: u32 = 15;
const OP_EXECUTION_MODE: u32 = 16;
const CAP_DENORM_PRESERVE: u32 = 4464;
const CAP_DENORM_FLUSH_TO_ZERO: u32 = 4465;
const MODE_DENORM_PRESERVE: u32 = 4459;
const MODE_DENORM_FLUSH_TO_ZERO: u32 = 4460;

/// `spirv` with the denormal capability and one execution mode per entry
/// point and width. Modules older than SPIR-V 1.4 also get the
/// SPV_KHR_float_controls extension. Err on a malformed module.
pub fn with_denorm_mode(spirv: &[u32], flush: bool, widths: &[u32]) -> Result<Vec<u32>, String> {
    if spirv.len() < 5 || spirv[0] != 0x0723_0203 {
        return Err("not a SPIR-V module (bad magic number)".into());
    }
    let (cap, mode) = if flush {
        (CAP_DENORM_FLUSH_TO_ZERO, MODE_DENORM_FLUSH_TO_ZERO)
    } else {
        (CAP_DENORM_PRESERVE, MODE_DENORM_PRESERVE)
    };
    // Walk the instructions: remember where capabilities end and collect entry points.
    let mut at = 5;
    let mut after_capabilities = 5;
    let mut after_modes = None;
    let mut entries = Vec::new();
    while at < spirv.len() {
        let count = (spirv[at] >> 16) as usize;
        let op = spirv[at] & 0xffff;
        if count == 0 || at + count > spirv.len() {
            return Err(format!("malformed SPIR-V instruction at word {at}"));
        }
        // Operands read below must exist: a caller's SPIR-V may be malformed.
        let needs = match op {
            OP_CAPABILITY => 2,
            OP_ENTRY_POINT => 3,
            _ => 1,
        };
        if count < needs {
            return Err(format!("malformed SPIR-V instruction at word {at} (opcode {op}, {count} words)"));
        }
        match op {
            OP_CAPABILITY => {
                if spirv[at + 1] == cap {
                    return Ok(spirv.to_vec()); // already requested by the shader itself
                }
                after_capabilities = at + count;
            }
            OP_ENTRY_POINT => {
                entries.push(spirv[at + 2]);
                after_modes = Some(at + count);
            }
            OP_EXECUTION_MODE => after_modes = Some(at + count),
            _ if after_modes.is_some() => break, // the execution modes section is over
            _ => {}
        }
        at += count;
    }
    let after_modes = after_modes.ok_or("the SPIR-V module has no entry point")?;
    let mut out = Vec::with_capacity(spirv.len() + 8 + 4 * entries.len() * widths.len());
    out.extend_from_slice(&spirv[..after_capabilities]);
    out.extend_from_slice(&[(2 << 16) | OP_CAPABILITY, cap]);
    if spirv[1] < 0x0001_0400 {
        let mut name = b"SPV_KHR_float_controls".to_vec();
        name.resize((name.len() / 4 + 1) * 4, 0); // nul-terminated, padded to words
        out.push(((1 + name.len() as u32 / 4) << 16) | OP_EXTENSION);
        out.extend(name.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
    }
    out.extend_from_slice(&spirv[after_capabilities..after_modes]);
    for &entry in &entries {
        for &w in widths {
            out.extend_from_slice(&[(4 << 16) | OP_EXECUTION_MODE, entry, mode, w]);
        }
    }
    out.extend_from_slice(&spirv[after_modes..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_the_capability_and_one_mode_per_width() {
        // Header, OpCapability Shader, OpMemoryModel, OpEntryPoint GLCompute %4 "m",
        // OpExecutionMode %4 LocalSize 1 1 1, OpReturn (stands for the rest).
        let module = vec![
            0x0723_0203, 0x0001_0500, 0, 10, 0,
            (2 << 16) | OP_CAPABILITY, 1,
            (3 << 16) | 14, 0, 1,
            (4 << 16) | OP_ENTRY_POINT, 5, 4, 0x6d,
            (6 << 16) | OP_EXECUTION_MODE, 4, 17, 1, 1, 1,
            (1 << 16) | 253,
        ];
        let out = with_denorm_mode(&module, false, &[16, 32]).expect("patched");
        assert_eq!(&out[5..9], &[(2 << 16) | OP_CAPABILITY, 1, (2 << 16) | OP_CAPABILITY, CAP_DENORM_PRESERVE]);
        let modes = &out[out.len() - 9..out.len() - 1];
        assert_eq!(modes, &[(4 << 16) | OP_EXECUTION_MODE, 4, MODE_DENORM_PRESERVE, 16,
                            (4 << 16) | OP_EXECUTION_MODE, 4, MODE_DENORM_PRESERVE, 32]);
        assert_eq!(out[out.len() - 1], (1 << 16) | 253);
        assert!(with_denorm_mode(&module[..7], false, &[32]).is_err(), "a module without an entry point");
        let mut short = module.clone();
        short[10] = (1 << 16) | OP_ENTRY_POINT; // an entry point without its operands
        assert!(with_denorm_mode(&short, false, &[32]).is_err(), "a truncated entry point");
    }
}
