//! The queue: command pools, submission and bounded fence waits, shared by
//! the recorder (`commands`) and one-shot transfers (`transfer`).

use std::time::{Duration, Instant};

use ash::vk;

use super::context::Device;
use crate::error::{vk_err, Error, Result};

/// How long a single wait may take before the run is declared hung. A chunk is
/// sized to well under a second; minutes without completion means the device
/// is stuck, and the user gets an error instead of a frozen terminal.
pub const DEFAULT_WAIT_LIMIT: Duration = Duration::from_secs(600);

pub fn wait_fence(device: &Device, fence: vk::Fence, limit: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let r = unsafe { device.raw.wait_for_fences(&[fence], true, 1_000_000_000) };
        match r {
            Ok(()) => return Ok(()),
            Err(vk::Result::TIMEOUT) if start.elapsed() < limit => continue,
            Err(vk::Result::TIMEOUT) => {
                return Err(Error::Device(format!(
                    "the GPU did not finish a submission within {} s (device hung?)",
                    limit.as_secs()
                )))
            }
            Err(e) => return Err(vk_err("vkWaitForFences")(e)),
        }
    }
}

/// A command pool and fence destroyed together, for one-shot work.
pub struct CommandObjects<'a> {
    pub device: &'a Device,
    pub pool: vk::CommandPool,
    pub fence: vk::Fence,
}

impl Drop for CommandObjects<'_> {
    fn drop(&mut self) {
        unsafe { self.device.raw.destroy_fence(self.fence, None) };
        unsafe { self.device.raw.destroy_command_pool(self.pool, None) };
    }
}

pub fn create_pool_and_buffer(device: &Device) -> Result<(vk::CommandPool, vk::CommandBuffer)> {
    let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(device.queue_family);
    let pool = unsafe { device.raw.create_command_pool(&pool_info, None) }.map_err(vk_err("vkCreateCommandPool"))?;
    let alloc = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    match unsafe { device.raw.allocate_command_buffers(&alloc) } {
        Ok(b) => Ok((pool, b[0])),
        Err(e) => {
            unsafe { device.raw.destroy_command_pool(pool, None) };
            Err(vk_err("vkAllocateCommandBuffers")(e))
        }
    }
}

pub fn submit(device: &Device, cmd: vk::CommandBuffer, fence: vk::Fence) -> Result<()> {
    let cmds = [cmd];
    let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
    let queue = device.queue.lock().map_err(|_| Error::Device("queue lock poisoned".into()))?;
    unsafe { device.raw.queue_submit(*queue, &submit, fence) }.map_err(vk_err("vkQueueSubmit"))
}

