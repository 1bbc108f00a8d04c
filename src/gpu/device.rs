//! The logical device of a context: opened on the chosen physical device
//! with the features divgpu uses, its queue and memory allocator, its health
//! (alive, lost, timed out) and the bounded fence waits that watch it.
//!
//! `Device` owns every instance-level and device-level handle; buffers,
//! pipelines and command recorders hold an `Arc<Device>`, so the garbage
//! collector of Lua can drop them in any order and the device goes last.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};

use super::adapter::{self, DeviceInfo, DeviceSelector};
use super::fault::{take, Fault};
use super::float_controls::{self, Denormals};
use super::instance::Instance;
use crate::error::{vk_err, Error, Result};

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

/// Context ids, so objects of two contexts are told apart in messages.
static NEXT_CONTEXT_ID: AtomicU64 = AtomicU64::new(1);

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
            physicals.iter().enumerate().map(|(i, &pd)| adapter::describe(&instance, i, pd)).collect();
        let mut chosen = adapter::choose(&infos, selector)?;
        if force_flush {
            chosen.denormals = if float_controls::widths(&chosen.float_controls, true).is_some() {
                Denormals::Flushed
            } else {
                Denormals::FlushEmulated
            };
        }
        let queue_family = check_requirements(&chosen)?;
        let physical = physicals[chosen.index];
        let raw = create_device(&instance, physical, &chosen, queue_family)?;
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

    /// Waits for `fence` at most the context's timeout. `what` names the
    /// work in the timeout's message.
    pub fn wait_fence(&self, fence: vk::Fence, what: &'static str) -> Result<()> {
        self.wait_fence_at_most(fence, what, self.timeout)
    }

    /// Waits for `fence` at most `limit` (the rest of the context's timeout
    /// when the caller has already polled it), reporting a timeout as the
    /// context's. A device loss or a timeout marks the context dead.
    pub fn wait_fence_at_most(&self, fence: vk::Fence, what: &'static str, limit: Duration) -> Result<()> {
        self.check_alive()?;
        if take(Fault::Timeout) {
            return Err(self.note(Error::Timeout { what, seconds: self.timeout.as_secs_f64() }));
        }
        if take(Fault::DeviceLostAtWait) {
            return Err(self.note(vk_err("vkWaitForFences")(vk::Result::ERROR_DEVICE_LOST)));
        }
        let ns = u64::try_from(limit.min(self.timeout).as_nanos()).unwrap_or(u64::MAX);
        match unsafe { self.raw.wait_for_fences(&[fence], true, ns) } {
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => Err(self.note(Error::Timeout { what, seconds: self.timeout.as_secs_f64() })),
            Err(e) => Err(self.note_wait_failure(vk_err("vkWaitForFences")(e))),
        }
    }

    /// Waits until everything submitted to the queue has finished, within
    /// the timeout: an empty submission's fence signals after all earlier
    /// work (vkQueueWaitIdle and vkDeviceWaitIdle have no timeout).
    pub fn drain(&self) -> Result<()> {
        let fence = unsafe { self.raw.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(vk_err("vkCreateFence"))?;
        let submitted = {
            let queue = self.queue.lock().map_err(|_| Error::Device("queue lock poisoned".into()))?;
            unsafe { self.raw.queue_submit(*queue, &[], fence) }.map_err(vk_err("vkQueueSubmit"))
        };
        let result = submitted.and_then(|()| self.wait_fence(fence, "the queue's last work"));
        // After a timeout or loss the fence may still be signalled later: leaked.
        if !self.leaking() {
            unsafe { self.raw.destroy_fence(fence, None) };
        }
        result
    }
}

/// The queue family a context of `info` uses, or why the device cannot
/// run divgpu (no compute queue, no f64, Vulkan older than 1.2).
fn check_requirements(info: &DeviceInfo) -> Result<u32> {
    let queue_family = info
        .compute_queue_family
        .ok_or_else(|| Error::Device(format!("device '{}' has no compute queue", info.name)))?;
    if !info.float64 {
        return Err(Error::Device(format!(
            "device '{}' lacks shaderFloat64, which the fp32 contract needs for the centroid",
            info.name
        )));
    }
    let api = info.api_version.split('.').take(2).map(|p| p.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
    if api.len() < 2 || (api[0], api[1]) < (1, 2) {
        return Err(Error::Device(format!(
            "device '{}' supports Vulkan {} only; divgpu needs 1.2",
            info.name, info.api_version
        )));
    }
    Ok(queue_family)
}

/// The logical device with one queue of `queue_family` and every feature
/// divgpu uses that `info` says the device has.
fn create_device(instance: &Instance, physical: vk::PhysicalDevice, info: &DeviceInfo, queue_family: u32) -> Result<ash::Device> {
    let priorities = [1.0f32];
    let queue_info = [vk::DeviceQueueCreateInfo::default().queue_family_index(queue_family).queue_priorities(&priorities)];
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(info.storage_buffer_16bit);
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
        .shader_float16(info.float16)
        .shader_int8(info.int8)
        .storage_buffer8_bit_access(info.storage_buffer_8bit)
        .vulkan_memory_model(info.vulkan_memory_model)
        .vulkan_memory_model_device_scope(info.vulkan_memory_model)
        .buffer_device_address(info.buffer_device_address);
    let core = vk::PhysicalDeviceFeatures::default().shader_float64(true).shader_int64(info.int64);
    let mut f_coopmat = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
    let mut f_stats = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default().pipeline_executable_info(true);
    let mut extension_names = Vec::new();
    let mut features2 = vk::PhysicalDeviceFeatures2::default().features(core).push_next(&mut f11).push_next(&mut f12);
    if !info.cooperative_matrix.is_empty() {
        extension_names.push(ash::khr::cooperative_matrix::NAME.as_ptr());
        features2 = features2.push_next(&mut f_coopmat);
    }
    if info.pipeline_statistics {
        extension_names.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
        features2 = features2.push_next(&mut f_stats);
    }
    let create_info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queue_info)
        .enabled_extension_names(&extension_names)
        .push_next(&mut features2);
    unsafe { instance.raw.create_device(physical, &create_info, None) }.map_err(vk_err("vkCreateDevice"))
}

impl Drop for Device {
    fn drop(&mut self) {
        // Every object of the context holds an Arc of it, so nothing of ours
        // is in flight here; the queue is drained anyway, within the timeout
        // (vkDeviceWaitIdle has no timeout), before anything is destroyed.
        let drained = !self.leaking() && self.drain().is_ok();
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
