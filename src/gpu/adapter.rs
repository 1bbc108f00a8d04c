//! The physical devices: what each is and can do (`DeviceInfo`, shown by
//! `divgpu info` and used to size batches, workgroups and shared memory),
//! the optional extensions divgpu uses, and which device a selector names.

use std::ffi::CStr;

use ash::vk;

use super::float_controls::{self, Denormals, FloatControls};
use super::instance::Instance;
use crate::error::{Error, Result};

/// What a physical device is and can do; shown by `divgpu info` and used to
/// size batches, workgroups and shared memory.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub index: usize,
    pub name: String,
    pub device_type: &'static str,
    pub vendor_id: u32,
    pub device_id: u32,
    pub driver_name: String,
    pub driver_info: String,
    pub driver_version: u32,
    pub api_version: String,
    pub max_shared_memory: u32,
    pub max_workgroup_size: u32,
    pub max_workgroup_invocations: u32,
    pub max_workgroup_count: u32,
    pub max_storage_buffer_range: u32,
    pub max_push_constants_size: u32,
    pub non_coherent_atom_size: u64,
    pub subgroup_size: u32,
    pub timestamp_period_ns: f32,
    pub timestamps: bool,
    pub storage_buffer_16bit: bool,
    pub float16: bool,
    pub float64: bool,
    pub int64: bool,
    pub int64_atomics: bool,
    pub denorm_preserve_f32: bool,
    pub denorm_flush_f32: bool,
    pub rounding_rte_f32: bool,
    /// What decides the shaders' f32 denormal mode (`float_controls.rs`).
    pub float_controls: FloatControls,
    /// How f32 denormals are handled in divgpu's shaders on this device.
    pub denormals: Denormals,
    /// Shaders can reach buffers through 64-bit device addresses (the Gram
    /// matrix is bound that way: it can exceed maxStorageBufferRange).
    pub buffer_device_address: bool,
    /// The largest single allocation the driver promises (Vulkan 1.1).
    pub max_memory_allocation_size: u64,
    /// The size of the largest device-local memory heap.
    pub device_local_bytes: u64,
    pub compute_queue_family: Option<u32>,
    /// 8-bit integers in shaders and in storage buffers (the tensor filter's slices).
    pub int8: bool,
    pub storage_buffer_8bit: bool,
    /// The Vulkan memory model (cooperative-matrix shaders declare it).
    pub vulkan_memory_model: bool,
    /// The shapes VK_KHR_cooperative_matrix offers (empty without it).
    pub cooperative_matrix: Vec<CoopMatShape>,
    /// VK_KHR_pipeline_executable_properties: the compiled pipelines'
    /// statistics (register counts, where the driver reports them).
    pub pipeline_statistics: bool,
    /// VkPhysicalDeviceIDProperties: the device's and driver's UUIDs (a
    /// scheduler's CUDA_VISIBLE_DEVICES names GPUs by such a UUID).
    pub device_uuid: [u8; 16],
    pub driver_uuid: [u8; 16],
}

/// One cooperative-matrix shape a device offers: C(MxN) += A(MxK) B(KxN).
#[derive(Clone, Debug)]
pub struct CoopMatShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub a: &'static str,
    pub b: &'static str,
    pub c: &'static str,
    pub result: &'static str,
    pub saturating: bool,
    pub scope: &'static str,
}

fn component_type_name(t: vk::ComponentTypeKHR) -> &'static str {
    match t {
        vk::ComponentTypeKHR::FLOAT16 => "f16",
        vk::ComponentTypeKHR::FLOAT32 => "f32",
        vk::ComponentTypeKHR::FLOAT64 => "f64",
        vk::ComponentTypeKHR::SINT8 => "i8",
        vk::ComponentTypeKHR::SINT16 => "i16",
        vk::ComponentTypeKHR::SINT32 => "i32",
        vk::ComponentTypeKHR::SINT64 => "i64",
        vk::ComponentTypeKHR::UINT8 => "u8",
        vk::ComponentTypeKHR::UINT16 => "u16",
        vk::ComponentTypeKHR::UINT32 => "u32",
        vk::ComponentTypeKHR::UINT64 => "u64",
        _ => "other",
    }
}

fn scope_name(s: vk::ScopeKHR) -> &'static str {
    match s {
        vk::ScopeKHR::SUBGROUP => "subgroup",
        vk::ScopeKHR::WORKGROUP => "workgroup",
        vk::ScopeKHR::DEVICE => "device",
        vk::ScopeKHR::QUEUE_FAMILY => "queue family",
        _ => "other",
    }
}

fn device_type_name(t: vk::PhysicalDeviceType) -> &'static str {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual",
        vk::PhysicalDeviceType::CPU => "cpu",
        _ => "other",
    }
}

/// Preference when the user names no device: a discrete GPU first.
fn device_type_rank(t: &str) -> u32 {
    match t {
        "discrete" => 0,
        "integrated" => 1,
        "virtual" => 2,
        "cpu" => 3,
        _ => 4,
    }
}

fn c_chars_to_string(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Which device to open.
#[derive(Debug, Clone)]
pub enum DeviceSelector {
    Default,
    Index(usize),
    Name(String),
}

/// The optional device extensions divgpu uses, where the device has them.
struct DeviceExtensions {
    cooperative_matrix: bool,
    pipeline_statistics: bool,
}

impl DeviceExtensions {
    fn of(instance: &ash::Instance, pd: vk::PhysicalDevice) -> Self {
        let list = unsafe { instance.enumerate_device_extension_properties(pd) }.unwrap_or_default();
        let has = |name: &CStr| list.iter().any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name));
        DeviceExtensions {
            cooperative_matrix: has(ash::khr::cooperative_matrix::NAME),
            pipeline_statistics: has(ash::khr::pipeline_executable_properties::NAME),
        }
    }
}

/// A queue family that can run compute; one without graphics is preferred
/// (an async-compute queue is usually the least contended).
fn pick_compute_family(families: &[vk::QueueFamilyProperties]) -> Option<u32> {
    let compute = |f: &vk::QueueFamilyProperties| f.queue_flags.contains(vk::QueueFlags::COMPUTE);
    families
        .iter()
        .position(|f| compute(f) && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS))
        .or_else(|| families.iter().position(compute))
        .map(|i| i as u32)
}

/// The property and feature structures of a physical device that
/// `DeviceInfo` is read from (Vulkan 1.1 and 1.2 structures chained where
/// the device has 1.2; the extensions' structures where it has them).
struct Queried {
    props: vk::PhysicalDeviceProperties,
    p11: vk::PhysicalDeviceVulkan11Properties<'static>,
    p12: vk::PhysicalDeviceVulkan12Properties<'static>,
    features: vk::PhysicalDeviceFeatures,
    f11: vk::PhysicalDeviceVulkan11Features<'static>,
    f12: vk::PhysicalDeviceVulkan12Features<'static>,
    cooperative_matrix: bool,
    pipeline_statistics: bool,
}

fn query(instance: &Instance, pd: vk::PhysicalDevice) -> Queried {
    let raw = &instance.raw;
    let props = unsafe { raw.get_physical_device_properties(pd) };
    let api = props.api_version;
    let has12 = vk::api_version_major(api) > 1 || vk::api_version_minor(api) >= 2;
    let mut p11 = vk::PhysicalDeviceVulkan11Properties::default();
    let mut p12 = vk::PhysicalDeviceVulkan12Properties::default();
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let extensions = DeviceExtensions::of(raw, pd);
    let mut f_coopmat = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut f_stats = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
    let features = if has12 {
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut p11).push_next(&mut p12);
        unsafe { raw.get_physical_device_properties2(pd, &mut p2) };
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f11).push_next(&mut f12);
        // Only the structures of extensions the device has may be chained.
        if extensions.cooperative_matrix {
            f2 = f2.push_next(&mut f_coopmat);
        }
        if extensions.pipeline_statistics {
            f2 = f2.push_next(&mut f_stats);
        }
        unsafe { raw.get_physical_device_features2(pd, &mut f2) };
        f2.features
    } else {
        unsafe { raw.get_physical_device_features(pd) }
    };
    // The chains pointed into locals: cut them before the structures leave.
    p11.p_next = std::ptr::null_mut();
    p12.p_next = std::ptr::null_mut();
    f11.p_next = std::ptr::null_mut();
    f12.p_next = std::ptr::null_mut();
    Queried {
        props,
        p11,
        p12,
        features,
        f11,
        f12,
        cooperative_matrix: f_coopmat.cooperative_matrix == vk::TRUE,
        pipeline_statistics: f_stats.pipeline_executable_info == vk::TRUE,
    }
}

/// The shapes VK_KHR_cooperative_matrix offers on `pd`.
fn cooperative_matrix_shapes(instance: &Instance, pd: vk::PhysicalDevice) -> Vec<CoopMatShape> {
    let loader = ash::khr::cooperative_matrix::Instance::new(&instance.entry, &instance.raw);
    unsafe { loader.get_physical_device_cooperative_matrix_properties(pd) }
        .unwrap_or_default()
        .iter()
        .map(|p| CoopMatShape {
            m: p.m_size,
            n: p.n_size,
            k: p.k_size,
            a: component_type_name(p.a_type),
            b: component_type_name(p.b_type),
            c: component_type_name(p.c_type),
            result: component_type_name(p.result_type),
            saturating: p.saturating_accumulation == vk::TRUE,
            scope: scope_name(p.scope),
        })
        .collect()
}

fn float_controls_of(p12: &vk::PhysicalDeviceVulkan12Properties) -> FloatControls {
    let t = |b: vk::Bool32| b == vk::TRUE;
    FloatControls {
        preserve: [
            t(p12.shader_denorm_preserve_float16),
            t(p12.shader_denorm_preserve_float32),
            t(p12.shader_denorm_preserve_float64),
        ],
        flush: [
            t(p12.shader_denorm_flush_to_zero_float16),
            t(p12.shader_denorm_flush_to_zero_float32),
            t(p12.shader_denorm_flush_to_zero_float64),
        ],
        independence: p12.denorm_behavior_independence.as_raw(),
    }
}

/// The size of the largest device-local memory heap.
fn device_local_bytes(instance: &Instance, pd: vk::PhysicalDevice) -> u64 {
    let memory = unsafe { instance.raw.get_physical_device_memory_properties(pd) };
    memory.memory_heaps[..memory.memory_heap_count as usize]
        .iter()
        .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .max()
        .unwrap_or(0)
}

/// What the physical device `pd` (number `index` of the instance's list) is and can do.
pub fn describe(instance: &Instance, index: usize, pd: vk::PhysicalDevice) -> DeviceInfo {
    let q = query(instance, pd);
    let (props, p11, p12, f11, f12) = (&q.props, &q.p11, &q.p12, &q.f11, &q.f12);
    let families = unsafe { instance.raw.get_physical_device_queue_family_properties(pd) };
    let compute_family = pick_compute_family(&families);
    let timestamp_bits = compute_family.map(|f| families[f as usize].timestamp_valid_bits).unwrap_or(0);
    let limits = &props.limits;
    let float_controls = float_controls_of(p12);
    let api = props.api_version;
    let yes = |b: vk::Bool32| b == vk::TRUE;
    DeviceInfo {
        index,
        name: c_chars_to_string(&props.device_name),
        device_type: device_type_name(props.device_type),
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        driver_name: c_chars_to_string(&p12.driver_name),
        driver_info: c_chars_to_string(&p12.driver_info),
        driver_version: props.driver_version,
        api_version: format!("{}.{}.{}", vk::api_version_major(api), vk::api_version_minor(api), vk::api_version_patch(api)),
        max_shared_memory: limits.max_compute_shared_memory_size,
        max_workgroup_size: limits.max_compute_work_group_size[0],
        max_workgroup_invocations: limits.max_compute_work_group_invocations,
        max_workgroup_count: limits.max_compute_work_group_count[0],
        max_storage_buffer_range: limits.max_storage_buffer_range,
        max_push_constants_size: limits.max_push_constants_size,
        non_coherent_atom_size: limits.non_coherent_atom_size,
        subgroup_size: p11.subgroup_size,
        timestamp_period_ns: limits.timestamp_period,
        timestamps: timestamp_bits > 0,
        storage_buffer_16bit: yes(f11.storage_buffer16_bit_access),
        float16: yes(f12.shader_float16),
        float64: yes(q.features.shader_float64),
        int64: yes(q.features.shader_int64),
        int64_atomics: yes(f12.shader_buffer_int64_atomics),
        denorm_preserve_f32: yes(p12.shader_denorm_preserve_float32),
        denorm_flush_f32: yes(p12.shader_denorm_flush_to_zero_float32),
        rounding_rte_f32: yes(p12.shader_rounding_mode_rte_float32),
        denormals: if float_controls::widths(&float_controls, false).is_some() {
            Denormals::Preserved
        } else {
            Denormals::NotGuaranteed
        },
        float_controls,
        buffer_device_address: yes(f12.buffer_device_address),
        max_memory_allocation_size: p11.max_memory_allocation_size,
        device_local_bytes: device_local_bytes(instance, pd),
        compute_queue_family: compute_family,
        int8: yes(f12.shader_int8),
        storage_buffer_8bit: yes(f12.storage_buffer8_bit_access),
        // Device scope too: glslang's atomics use it, and the memory model
        // without it makes them invalid.
        vulkan_memory_model: yes(f12.vulkan_memory_model) && yes(f12.vulkan_memory_model_device_scope),
        cooperative_matrix: if q.cooperative_matrix { cooperative_matrix_shapes(instance, pd) } else { Vec::new() },
        pipeline_statistics: q.pipeline_statistics,
        device_uuid: p11.device_uuid,
        driver_uuid: p11.driver_uuid,
    }
}

/// Every physical device of the instance, in its order.
pub fn describe_all(instance: &Instance) -> Result<Vec<DeviceInfo>> {
    Ok(instance.physical_devices()?.into_iter().enumerate().map(|(i, pd)| describe(instance, i, pd)).collect())
}

/// The device `selector` names among `infos`: an index, a substring of its
/// name (any case), or by default a discrete GPU first. One that is not
/// there is a failure of the machine, not a misuse (`Error::Device`).
pub fn choose(infos: &[DeviceInfo], selector: &DeviceSelector) -> Result<DeviceInfo> {
    let names = || infos.iter().map(|i| format!("{}: {}", i.index, i.name)).collect::<Vec<_>>().join(", ");
    let chosen = match selector {
        DeviceSelector::Index(i) => infos
            .get(*i)
            .ok_or_else(|| Error::Device(format!("device index {i} is out of range; devices are {}", names())))?,
        DeviceSelector::Name(name) => {
            let needle = name.to_lowercase();
            infos
                .iter()
                .find(|i| i.name.to_lowercase().contains(&needle))
                .ok_or_else(|| Error::Device(format!("no device name contains '{name}'; devices are {}", names())))?
        }
        DeviceSelector::Default => infos
            .iter()
            .min_by_key(|i| (device_type_rank(i.device_type), i.index))
            .ok_or_else(|| Error::Device("no Vulkan device".into()))?,
    };
    Ok(chosen.clone())
}
