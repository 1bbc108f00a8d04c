//! The device profile: the facts of a context's device that every plan
//! reads, made once, when the context opens. `of` makes it the first time a
//! context asks (`device.open` asks at open) and gives the same after: its
//! limits, the arithmetic self-test (is `fma()` fused, are f32 denormals
//! kept), the loop-iteration cap (lavapipe silently stops a shader loop
//! after 65,535 iterations) and the register budget. The facts Lua measures
//! or keeps (the rates, the L2) are attached to the same profile in
//! `lua/divgpu/device_profile.lua`.

use std::sync::{Arc, Mutex, Weak};

use crate::error::{Error, Result};
use crate::gpu::adapter::CoopMatShape;
use crate::gpu::buffer::Buffer;
use crate::gpu::commands::Recorder;
use crate::gpu::device::Device;
use crate::gpu::float_controls::Denormals;
use crate::gpu::pipeline::{BindGroup, Pipeline};
use crate::gpu::selftest::{self, FmaMode};
use crate::shaders;

/// Iterations the loop probe asks for: a device that runs them all has no cap
/// divgpu's kernels could reach.
const PROBE_ITERATIONS: u32 = 1 << 20;

/// The register file a thread's work is planned against. Vulkan does not
/// report it (VK_KHR_pipeline_executable_properties reports a pipeline's use,
/// not the budget), so it is a family constant: NVIDIA's parts since Kepler
/// have 65,536 32-bit registers an SM and at most 255 a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterBudget {
    /// 32-bit registers a compute unit holds.
    pub file: u32,
    /// 32-bit registers one thread may use, at most.
    pub per_thread_max: u32,
    /// Where the figures come from (a sentence).
    pub source: &'static str,
}

/// The budget every GPU is planned by (see `RegisterBudget`).
pub const GPU_REGISTERS: RegisterBudget = RegisterBudget {
    file: 65536,
    per_thread_max: 255,
    source: "a family constant (NVIDIA: 65,536 32-bit registers an SM, 255 a thread), not read from the device",
};

/// One device's facts, made once.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceProfile {
    /// The device's name (for messages).
    pub name: String,
    /// Vulkan's device type ("cpu" for lavapipe, "discrete", ...).
    pub kind: &'static str,
    pub subgroup_size: u32,
    /// Bytes of shared (workgroup) memory.
    pub max_shared_memory: u32,
    pub max_workgroup_invocations: u32,
    pub max_workgroup_size: u32,
    pub max_workgroup_count: u32,
    pub max_storage_buffer_range: u32,
    pub max_memory_allocation_size: u64,
    /// Bytes one storage buffer may span: the smaller of
    /// maxStorageBufferRange and the largest allocation.
    pub storage_range: u64,
    /// Iterations after which the device silently stops a shader loop; None
    /// when a loop of 2^20 ran in full.
    pub loop_cap: Option<u32>,
    /// How the contract's fma is computed (the self-test).
    pub fma: FmaMode,
    /// The self-test's subnormal cases kept f32 denormals.
    pub denormals_kept: bool,
    /// The denormal mode the shaders get (DenormPreserve, flush, ...).
    pub denormals: Denormals,
    pub float64: bool,
    pub int64: bool,
    pub int8: bool,
    pub buffer_device_address: bool,
    /// The device offers cooperative-matrix shapes (tensor cores).
    pub cooperative_matrix: bool,
    /// What the tensor filter's products need (shaders/tensor_coopmat.comp):
    /// int8 16 x 16 x 32 subgroup matrices summing into int32, 8-bit storage
    /// buffers and int8 arithmetic, in subgroups of 32.
    pub int8_matrices: bool,
    /// None on a CPU device (no register file to plan by).
    pub registers: Option<RegisterBudget>,
}

impl DeviceProfile {
    /// Runs the self-test and the loop probe on `device` and reads its limits.
    pub fn make(device: &Arc<Device>) -> Result<DeviceProfile> {
        let test = selftest::run(device)?;
        let loop_cap = probe_loop_cap(device)?;
        let i = &device.info;
        Ok(DeviceProfile {
            name: i.name.clone(),
            kind: i.device_type,
            subgroup_size: i.subgroup_size,
            max_shared_memory: i.max_shared_memory,
            max_workgroup_invocations: i.max_workgroup_invocations,
            max_workgroup_size: i.max_workgroup_size,
            max_workgroup_count: i.max_workgroup_count,
            max_storage_buffer_range: i.max_storage_buffer_range,
            max_memory_allocation_size: i.max_memory_allocation_size,
            storage_range: u64::from(i.max_storage_buffer_range).min(i.max_memory_allocation_size),
            loop_cap,
            fma: test.fma,
            denormals_kept: test.denormals_kept,
            denormals: i.denormals,
            float64: i.float64,
            int64: i.int64,
            int8: i.int8,
            buffer_device_address: i.buffer_device_address,
            cooperative_matrix: !i.cooperative_matrix.is_empty(),
            int8_matrices: i.int8 && i.storage_buffer_8bit && int8_matrices(i.subgroup_size, &i.cooperative_matrix),
            registers: registers_of(i.device_type),
        })
    }
}

/// Whether subgroups of `subgroup_size` with these shapes can run the
/// tensor filter's products: int8 16 x 16 x 32 into int32, in subgroups of 32.
fn int8_matrices(subgroup_size: u32, shapes: &[CoopMatShape]) -> bool {
    let shape = |c: &CoopMatShape| {
        (c.m, c.n, c.k) == (16, 16, 32)
            && (c.a, c.b, c.c, c.result) == ("i8", "i8", "i32", "i32")
            && c.scope == "subgroup"
    };
    subgroup_size == 32 && shapes.iter().any(shape)
}

/// The profiles made so far, by device; a dropped device's entry goes at the
/// next insertion. (Kept here, not in `Device`: `device.rs` imports nothing
/// that needs a device.)
static PROFILES: Mutex<Vec<(Weak<Device>, Arc<DeviceProfile>)>> = Mutex::new(Vec::new());

fn registry() -> Result<std::sync::MutexGuard<'static, Vec<(Weak<Device>, Arc<DeviceProfile>)>>> {
    PROFILES.lock().map_err(|_| Error::Device("the device profiles' lock was poisoned".into()))
}

/// The profile of `device`: made the first time it is asked for (the
/// self-test and the loop probe run then), the same after.
pub fn of(device: &Arc<Device>) -> Result<Arc<DeviceProfile>> {
    let found = registry()?.iter().find(|(d, _)| d.as_ptr() == Arc::as_ptr(device)).map(|(_, p)| p.clone());
    if let Some(p) = found {
        return Ok(p);
    }
    let made = Arc::new(DeviceProfile::make(device)?);
    let mut all = registry()?;
    all.retain(|(d, _)| d.strong_count() > 0);
    if let Some((_, p)) = all.iter().find(|(d, _)| d.as_ptr() == Arc::as_ptr(device)) {
        return Ok(p.clone());
    }
    all.push((Arc::downgrade(device), made.clone()));
    Ok(made)
}

/// The register budget of a device of Vulkan type `kind`.
pub fn registers_of(kind: &str) -> Option<RegisterBudget> {
    (kind != "cpu").then_some(GPU_REGISTERS)
}

/// Dispatches `shaders/loop_probe.comp` for PROBE_ITERATIONS iterations and
/// reads how many ran: the cap, or None when all did.
fn probe_loop_cap(device: &Arc<Device>) -> Result<Option<u32>> {
    let shader = shaders::shipped("loop_probe")?;
    let pipeline = Pipeline::new(device, "loop_probe", shader.spirv, &[], None)?;
    let out = Buffer::storage(device, 4, "loop probe")?;
    let group = BindGroup::new(&pipeline, vec![out.clone()], Vec::new())?;
    let mut rec = Recorder::new(device)?;
    rec.dispatch(&group, &PROBE_ITERATIONS.to_le_bytes(), [1, 1, 1])?;
    rec.submit()?;
    rec.wait()?;
    let bytes = out.download(0, 4)?;
    let ran = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    Ok((ran < PROBE_ITERATIONS).then_some(ran))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_device_has_no_register_budget_and_a_gpu_the_family_constant() {
        assert_eq!(registers_of("cpu"), None);
        assert_eq!(registers_of("discrete"), Some(GPU_REGISTERS));
        assert_eq!(GPU_REGISTERS.file, 65536);
    }

    fn shape(k: u32, a: &'static str, scope: &'static str) -> CoopMatShape {
        CoopMatShape { m: 16, n: 16, k, a, b: a, c: "i32", result: "i32", saturating: false, scope }
    }

    #[test]
    fn int8_matrices_need_the_int8_16x16x32_shape_in_subgroups_of_32() {
        let h200 = [shape(16, "f16", "subgroup"), shape(32, "i8", "subgroup")];
        assert!(int8_matrices(32, &h200));
        // Twins: each part of the rule missing.
        assert!(!int8_matrices(8, &h200), "subgroups of 8");
        assert!(!int8_matrices(32, &[shape(16, "f16", "subgroup")]), "no int8 shape");
        assert!(!int8_matrices(32, &[shape(32, "u8", "subgroup")]), "unsigned operands");
        assert!(!int8_matrices(32, &[shape(32, "i8", "workgroup")]), "another scope");
        assert!(!int8_matrices(32, &[]), "no shapes");
    }
}
