//! Instance, physical-device choice, logical device, queue and allocator.
//!
//! `Device` owns every instance-level and device-level handle; buffers,
//! pipelines and command recorders hold an `Arc<Device>`, so the garbage
//! collector of Lua can drop them in any order and the device goes last.

use std::ffi::{c_void, CStr};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};

use crate::error::{vk_err, Error, Result};
use super::float_controls::{self, Denormals, FloatControls};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// How long one fence wait (a submission, a transfer, the queue draining at
/// teardown) may take before the context is declared hung. A chunk is sized
/// to well under a second; minutes without completion means the device is
/// stuck, and the user gets an error instead of a frozen terminal.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The timeout a new context gets: `DIVGPU_TIMEOUT_S` (seconds, > 0) when set,
/// else `DEFAULT_TIMEOUT`. A value that is not a positive number is an error.
pub fn timeout_from_env() -> Result<Duration> {
    match std::env::var("DIVGPU_TIMEOUT_S") {
        Err(_) => Ok(DEFAULT_TIMEOUT),
        Ok(v) => timeout_from_seconds(v.trim().parse::<f64>().ok(), &format!("DIVGPU_TIMEOUT_S='{v}'")),
    }
}

/// `seconds` as a timeout; `what` names where the value came from.
pub fn timeout_from_seconds(seconds: Option<f64>, what: &str) -> Result<Duration> {
    match seconds {
        Some(s) if s > 0.0 && s.is_finite() && s <= 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(Error::Usage(format!("{what}: the timeout must be a number of seconds > 0"))),
    }
}

/// Every validation message of every context that echoes them (all but a
/// test's deliberate misuse), so a test run can fail on any of them, even
/// from a context it never saw.
static ALL_MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub fn all_validation_messages() -> Vec<String> {
    ALL_MESSAGES.lock().map(|l| l.clone()).unwrap_or_default()
}

/// Context ids, so objects of two contexts are told apart in messages.
static NEXT_CONTEXT_ID: AtomicU64 = AtomicU64::new(1);

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

/// Vulkan messages reported by the validation layer (warnings and errors).
#[derive(Default)]
pub struct Messages {
    pub list: Mutex<Vec<String>>,
    /// Print each message to stderr as it arrives (off only for a test that
    /// provokes one on purpose).
    pub echo: bool,
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: `user` is the `Messages` the `Device` keeps alive until after the
    // messenger is destroyed; `data` is valid for the duration of the call.
    let messages = unsafe { &*(user as *const Messages) };
    let text = unsafe { data.as_ref() }
        .and_then(|d| (!d.p_message.is_null()).then(|| unsafe { CStr::from_ptr(d.p_message) }))
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_default();
    let line = format!("vulkan validation [{severity:?}]: {text}");
    if messages.echo {
        eprintln!("{line}");
        if let Ok(mut all) = ALL_MESSAGES.lock() {
            all.push(line.clone());
        }
    }
    if let Ok(mut list) = messages.list.lock() {
        list.push(line);
    }
    vk::FALSE
}

/// Synchronization validation across submissions (a chunk's writes read by
/// the next chunk, an upload read by a dispatch) is a separate check of the
/// layer with no `VkValidationFeatureEnableEXT` value in 1.3.239: only the
/// layer's settings turn it on, read from `VK_LAYER_ENABLES` when the instance
/// is created. It is set once, before the first validated instance, unless
/// the user set the variable (then theirs applies).
fn enable_queue_submit_sync_validation() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("VK_LAYER_ENABLES").is_none() {
            // ':' separates the layer's list entries on Linux.
            std::env::set_var(
                "VK_LAYER_ENABLES",
                "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT:\
                 VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT",
            );
        }
    });
}

/// A Vulkan instance with its debug messenger, used both to list devices and
/// as the parent of a `Device`.
pub struct Instance {
    pub entry: ash::Entry,
    pub raw: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    pub messages: Arc<Messages>,
}

impl Instance {
    pub fn new(validation: bool) -> Result<Self> {
        Self::with_echo(validation, true)
    }

    /// `echo`: print validation messages to stderr as they arrive.
    pub fn with_echo(validation: bool, echo: bool) -> Result<Self> {
        // SAFETY: loading the system Vulkan loader; its entry points are used
        // only through ash's typed wrappers.
        let entry = unsafe { ash::Entry::load() }
            .map_err(|e| Error::Loader(format!("{e} (Debian: apt-get install libvulkan1 mesa-vulkan-drivers)")))?;
        let app_name = c"divgpu";
        let app = vk::ApplicationInfo::default()
            .application_name(app_name)
            .engine_name(app_name)
            .api_version(vk::API_VERSION_1_2);
        let mut layers: Vec<*const std::ffi::c_char> = Vec::new();
        let mut extensions: Vec<*const std::ffi::c_char> = Vec::new();
        if validation {
            let available = unsafe { entry.enumerate_instance_layer_properties() }
                .map_err(vk_err("vkEnumerateInstanceLayerProperties"))?;
            let found = available.iter().any(|l| {
                l.layer_name_as_c_str().map(|n| n == VALIDATION_LAYER).unwrap_or(false)
            });
            if !found {
                return Err(Error::Device(
                    "validation was requested but VK_LAYER_KHRONOS_validation is not installed \
                     (Debian: apt-get install vulkan-validationlayers)"
                        .into(),
                ));
            }
            layers.push(VALIDATION_LAYER.as_ptr());
            extensions.push(ash::ext::debug_utils::NAME.as_ptr());
            // Synchronization validation (hazards between commands and
            // submissions) is off by default in the layer; the layer of
            // Debian 12 (1.3.239) predates VK_EXT_layer_settings, so it is
            // asked for through VK_EXT_validation_features.
            let layer_extensions = unsafe { entry.enumerate_instance_extension_properties(Some(VALIDATION_LAYER)) }
                .map_err(vk_err("vkEnumerateInstanceExtensionProperties"))?;
            let has_features = layer_extensions.iter().any(|e| {
                e.extension_name_as_c_str().map(|n| n == ash::ext::validation_features::NAME).unwrap_or(false)
            });
            if !has_features {
                return Err(Error::Device(
                    "the validation layer lacks VK_EXT_validation_features, needed for synchronization validation"
                        .into(),
                ));
            }
            extensions.push(ash::ext::validation_features::NAME.as_ptr());
            enable_queue_submit_sync_validation();
        }
        let enables = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features = vk::ValidationFeaturesEXT::default().enabled_validation_features(&enables);
        let mut create_info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions);
        if validation {
            create_info = create_info.push_next(&mut features);
        }
        let raw = unsafe { entry.create_instance(&create_info, None) }.map_err(vk_err("vkCreateInstance"))?;
        let messages = Arc::new(Messages { list: Mutex::new(Vec::new()), echo });
        let mut instance = Instance { entry, raw, debug: None, messages };
        if validation {
            let loader = ash::ext::debug_utils::Instance::new(&instance.entry, &instance.raw);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::WARNING | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                        | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                )
                .pfn_user_callback(Some(debug_callback))
                .user_data(Arc::as_ptr(&instance.messages) as *mut c_void);
            let messenger = unsafe { loader.create_debug_utils_messenger(&info, None) }
                .map_err(vk_err("vkCreateDebugUtilsMessengerEXT"))?;
            instance.debug = Some((loader, messenger));
        }
        Ok(instance)
    }

    pub fn physical_devices(&self) -> Result<Vec<vk::PhysicalDevice>> {
        unsafe { self.raw.enumerate_physical_devices() }.map_err(vk_err("vkEnumeratePhysicalDevices"))
    }

    pub fn describe(&self, index: usize, pd: vk::PhysicalDevice) -> DeviceInfo {
        let props = unsafe { self.raw.get_physical_device_properties(pd) };
        let api = props.api_version;
        let has12 = vk::api_version_major(api) > 1 || vk::api_version_minor(api) >= 2;
        let mut p11 = vk::PhysicalDeviceVulkan11Properties::default();
        let mut p12 = vk::PhysicalDeviceVulkan12Properties::default();
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let extensions = DeviceExtensions::of(&self.raw, pd);
        let mut f_coopmat = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
        let mut f_stats = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        let features = if has12 {
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut p11).push_next(&mut p12);
            unsafe { self.raw.get_physical_device_properties2(pd, &mut p2) };
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f11).push_next(&mut f12);
            // Only the structures of extensions the device has may be chained.
            if extensions.cooperative_matrix {
                f2 = f2.push_next(&mut f_coopmat);
            }
            if extensions.pipeline_statistics {
                f2 = f2.push_next(&mut f_stats);
            }
            unsafe { self.raw.get_physical_device_features2(pd, &mut f2) };
            f2.features
        } else {
            unsafe { self.raw.get_physical_device_features(pd) }
        };
        let cooperative_matrix = if f_coopmat.cooperative_matrix == vk::TRUE {
            let loader = ash::khr::cooperative_matrix::Instance::new(&self.entry, &self.raw);
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
        } else {
            Vec::new()
        };
        let t = |b: vk::Bool32| b == vk::TRUE;
        let float_controls = FloatControls {
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
        };
        let families = unsafe { self.raw.get_physical_device_queue_family_properties(pd) };
        let compute_family = pick_compute_family(&families);
        let timestamp_bits = compute_family.map(|f| families[f as usize].timestamp_valid_bits).unwrap_or(0);
        let limits = props.limits;
        let memory = unsafe { self.raw.get_physical_device_memory_properties(pd) };
        let device_local_bytes = memory.memory_heaps[..memory.memory_heap_count as usize]
            .iter()
            .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .max()
            .unwrap_or(0);
        DeviceInfo {
            index,
            name: c_chars_to_string(&props.device_name),
            device_type: device_type_name(props.device_type),
            vendor_id: props.vendor_id,
            device_id: props.device_id,
            driver_name: c_chars_to_string(&p12.driver_name),
            driver_info: c_chars_to_string(&p12.driver_info),
            driver_version: props.driver_version,
            api_version: format!(
                "{}.{}.{}",
                vk::api_version_major(api),
                vk::api_version_minor(api),
                vk::api_version_patch(api)
            ),
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
            storage_buffer_16bit: f11.storage_buffer16_bit_access == vk::TRUE,
            float16: f12.shader_float16 == vk::TRUE,
            float64: features.shader_float64 == vk::TRUE,
            int64: features.shader_int64 == vk::TRUE,
            int64_atomics: f12.shader_buffer_int64_atomics == vk::TRUE,
            denorm_preserve_f32: p12.shader_denorm_preserve_float32 == vk::TRUE,
            denorm_flush_f32: p12.shader_denorm_flush_to_zero_float32 == vk::TRUE,
            rounding_rte_f32: p12.shader_rounding_mode_rte_float32 == vk::TRUE,
            float_controls,
            denormals: if float_controls::widths(&float_controls, false).is_some() {
                Denormals::Preserved
            } else {
                Denormals::NotGuaranteed
            },
            buffer_device_address: f12.buffer_device_address == vk::TRUE,
            max_memory_allocation_size: p11.max_memory_allocation_size,
            device_local_bytes,
            compute_queue_family: compute_family,
            int8: f12.shader_int8 == vk::TRUE,
            storage_buffer_8bit: f12.storage_buffer8_bit_access == vk::TRUE,
            // Device scope too: glslang's atomics use it, and the memory model
            // without it makes them invalid.
            vulkan_memory_model: f12.vulkan_memory_model == vk::TRUE && f12.vulkan_memory_model_device_scope == vk::TRUE,
            cooperative_matrix,
            pipeline_statistics: f_stats.pipeline_executable_info == vk::TRUE,
            device_uuid: p11.device_uuid,
            driver_uuid: p11.driver_uuid,
        }
    }

    pub fn describe_all(&self) -> Result<Vec<DeviceInfo>> {
        Ok(self.physical_devices()?.into_iter().enumerate().map(|(i, pd)| self.describe(i, pd)).collect())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some((loader, messenger)) = self.debug.take() {
            unsafe { loader.destroy_debug_utils_messenger(messenger, None) };
        }
        unsafe { self.raw.destroy_instance(None) };
    }
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

/// What a context has been through: once its device is lost or a wait timed
/// out, the GPU may still be using anything the context owns, so every
/// object of the context is leaked instead of freed, and every later call
/// that would reach the GPU is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Alive = 0,
    Lost = 1,
    TimedOut = 2,
    /// A fence wait failed otherwise (out of memory...): the state of the
    /// work is unknown, so the context is treated as lost.
    WaitFailed = 3,
}

/// The logical device and everything that lives as long as it.
pub struct Device {
    /// Unique in the process: objects of two contexts cannot be mixed.
    pub id: u64,
    /// The limit of every fence wait of this context.
    pub timeout: Duration,
    health: AtomicU8,
    pub raw: ash::Device,
    pub physical: vk::PhysicalDevice,
    pub queue: Mutex<vk::Queue>,
    pub queue_family: u32,
    pub allocator: ManuallyDrop<Mutex<Allocator>>,
    pub info: DeviceInfo,
    /// Dropped last: the instance must outlive the device.
    pub instance: ManuallyDrop<Instance>,
}

impl Device {
    /// `timeout` bounds every fence wait; `force_flush` makes the shaders
    /// flush f32 denormals (tests imitate a device like the H200 with it).
    pub fn open(
        selector: &DeviceSelector,
        validation: bool,
        echo: bool,
        timeout: Duration,
        force_flush: bool,
    ) -> Result<Arc<Device>> {
        let instance = Instance::with_echo(validation, echo)?;
        let physicals = instance.physical_devices()?;
        if physicals.is_empty() {
            return Err(Error::Device(
                "no Vulkan device found (for a CPU device: apt-get install mesa-vulkan-drivers)".into(),
            ));
        }
        let infos: Vec<DeviceInfo> =
            physicals.iter().enumerate().map(|(i, &pd)| instance.describe(i, pd)).collect();
        let names = || infos.iter().map(|i| format!("{}: {}", i.index, i.name)).collect::<Vec<_>>().join(", ");
        let chosen = match selector {
            DeviceSelector::Index(i) => infos.get(*i).ok_or_else(|| {
                Error::Usage(format!("device index {i} is out of range; devices are {}", names()))
            })?,
            DeviceSelector::Name(name) => {
                let needle = name.to_lowercase();
                infos.iter().find(|i| i.name.to_lowercase().contains(&needle)).ok_or_else(|| {
                    Error::Usage(format!("no device name contains '{name}'; devices are {}", names()))
                })?
            }
            DeviceSelector::Default => infos
                .iter()
                .min_by_key(|i| (device_type_rank(i.device_type), i.index))
                .ok_or_else(|| Error::Device("no Vulkan device".into()))?,
        }
        .clone();
        let mut chosen = chosen;
        if force_flush {
            chosen.denormals = if float_controls::widths(&chosen.float_controls, true).is_some() {
                Denormals::Flushed
            } else {
                Denormals::FlushEmulated
            };
        }
        let physical = physicals[chosen.index];
        let queue_family = chosen
            .compute_queue_family
            .ok_or_else(|| Error::Device(format!("device '{}' has no compute queue", chosen.name)))?;
        if !chosen.float64 {
            return Err(Error::Device(format!(
                "device '{}' lacks shaderFloat64, which the fp32 contract needs for the centroid",
                chosen.name
            )));
        }
        let api_ok = chosen.api_version.split('.').take(2).map(|p| p.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
        if api_ok.len() < 2 || (api_ok[0], api_ok[1]) < (1, 2) {
            return Err(Error::Device(format!(
                "device '{}' supports Vulkan {} only; divgpu needs 1.2",
                chosen.name, chosen.api_version
            )));
        }

        let priorities = [1.0f32];
        let queue_info = [vk::DeviceQueueCreateInfo::default().queue_family_index(queue_family).queue_priorities(&priorities)];
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(chosen.storage_buffer_16bit);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
            .shader_float16(chosen.float16)
            .shader_int8(chosen.int8)
            .storage_buffer8_bit_access(chosen.storage_buffer_8bit)
            .vulkan_memory_model(chosen.vulkan_memory_model)
            .vulkan_memory_model_device_scope(chosen.vulkan_memory_model)
            .buffer_device_address(chosen.buffer_device_address);
        let core = vk::PhysicalDeviceFeatures::default().shader_float64(true).shader_int64(chosen.int64);
        let mut f_coopmat = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut f_stats = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default().pipeline_executable_info(true);
        let mut extension_names = Vec::new();
        let mut features2 = vk::PhysicalDeviceFeatures2::default().features(core).push_next(&mut f11).push_next(&mut f12);
        if !chosen.cooperative_matrix.is_empty() {
            extension_names.push(ash::khr::cooperative_matrix::NAME.as_ptr());
            features2 = features2.push_next(&mut f_coopmat);
        }
        if chosen.pipeline_statistics {
            extension_names.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
            features2 = features2.push_next(&mut f_stats);
        }
        let create_info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
            .enabled_extension_names(&extension_names)
            .push_next(&mut features2);
        let raw = unsafe { instance.raw.create_device(physical, &create_info, None) }
            .map_err(vk_err("vkCreateDevice"))?;
        let queue = unsafe { raw.get_device_queue(queue_family, 0) };
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.raw.clone(),
            device: raw.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: chosen.buffer_device_address,
            allocation_sizes: Default::default(),
        });
        let allocator = match allocator {
            Ok(a) => a,
            Err(e) => {
                unsafe { raw.destroy_device(None) };
                return Err(e.into());
            }
        };
        Ok(Arc::new(Device {
            id: NEXT_CONTEXT_ID.fetch_add(1, Ordering::Relaxed),
            timeout,
            health: AtomicU8::new(Health::Alive as u8),
            raw,
            physical,
            queue: Mutex::new(queue),
            queue_family,
            allocator: ManuallyDrop::new(Mutex::new(allocator)),
            info: chosen,
            instance: ManuallyDrop::new(instance),
        }))
    }

    /// Validation-layer messages seen so far on this device's instance.
    pub fn validation_messages(&self) -> Vec<String> {
        self.instance.messages.list.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// "context #3 (llvmpipe ...)", for messages about objects of two contexts.
    pub fn label(&self) -> String {
        format!("context #{} ({})", self.id, self.info.name)
    }

    /// An error unless `other` is this context: a buffer, pipeline or bind
    /// group of one context used with another would be undefined behaviour.
    pub fn check_same(&self, other: &Device, what: &str) -> Result<()> {
        if self.id == other.id {
            return Ok(());
        }
        Err(Error::Usage(format!(
            "{what} belongs to {}, not to {}: objects of two contexts cannot be mixed",
            other.label(),
            self.label()
        )))
    }

    pub fn health(&self) -> Health {
        match self.health.load(Ordering::Acquire) {
            0 => Health::Alive,
            1 => Health::Lost,
            2 => Health::TimedOut,
            _ => Health::WaitFailed,
        }
    }

    /// True once the context is dead: its objects are leaked, not freed.
    pub fn leaking(&self) -> bool {
        self.health() != Health::Alive
    }

    /// Marks the context dead if `e` is a device loss or a timeout, and
    /// returns `e`; used where such errors surface (submit, waits).
    pub fn note(&self, e: Error) -> Error {
        let state = match e {
            Error::DeviceLost { .. } => Health::Lost,
            Error::Timeout { .. } => Health::TimedOut,
            _ => return e,
        };
        let _ = self.health.compare_exchange(Health::Alive as u8, state as u8, Ordering::AcqRel, Ordering::Acquire);
        e
    }

    /// Marks the context dead after a fence wait failed in another way than
    /// a loss or a timeout (the work's state is unknown); returns `e`.
    pub fn note_wait_failure(&self, e: Error) -> Error {
        let e = self.note(e);
        let _ = self.health.compare_exchange(
            Health::Alive as u8,
            Health::WaitFailed as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        e
    }

    /// An error if the context is dead (before anything that reaches the GPU).
    pub fn check_alive(&self) -> Result<()> {
        match self.health() {
            Health::Alive => Ok(()),
            Health::Lost => Err(Error::Dead("GPU device loss")),
            Health::TimedOut => Err(Error::Dead("GPU timeout")),
            Health::WaitFailed => Err(Error::Dead("failed wait for the GPU")),
        }
    }

    pub fn lock_allocator(&self) -> Result<std::sync::MutexGuard<'_, Allocator>> {
        self.allocator.lock().map_err(|_| Error::Device("allocator lock poisoned by an earlier panic".into()))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Every object of the context holds an Arc of it, so nothing of ours
        // is in flight here; the queue is drained anyway, within the timeout
        // (vkDeviceWaitIdle has no timeout), before anything is destroyed.
        let drained = !self.leaking() && super::queue::drain(self).is_ok();
        if !drained {
            // Lost or hung: the GPU may still use this memory. The allocator,
            // device and instance are leaked on purpose (ManuallyDrop fields
            // are simply not dropped); a new context starts from scratch.
            return;
        }
        // Teardown order: allocator, device, then the instance (with its
        // debug messenger).
        unsafe { ManuallyDrop::drop(&mut self.allocator) };
        unsafe { self.raw.destroy_device(None) };
        unsafe { ManuallyDrop::drop(&mut self.instance) };
    }
}
