//! The queue: command pools and submission, shared by the recorder
//! (`commands`) and one-shot transfers (`transfer`). Their fence waits are
//! the device's (`Device::wait_fence`, bounded by the context's timeout); a
//! device loss marks the context dead (`Device::note`), after which its
//! objects are leaked.

use ash::vk;

use super::device::Device;
use super::fault::{take, Fault};
use crate::error::{vk_err, Error, Result};

/// A command pool and fence destroyed together, for one-shot work. After a
/// device loss or timeout they are leaked: the GPU may still use them.
pub struct CommandObjects<'a> {
    pub device: &'a Device,
    pub pool: vk::CommandPool,
    pub fence: vk::Fence,
}

impl Drop for CommandObjects<'_> {
    fn drop(&mut self) {
        if self.device.leaking() {
            return;
        }
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
    device.check_alive()?;
    if take(Fault::DeviceLostAtSubmit) {
        return Err(device.note(vk_err("vkQueueSubmit")(vk::Result::ERROR_DEVICE_LOST)));
    }
    let cmds = [cmd];
    let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
    let queue = device.queue.lock().map_err(|_| Error::Device("queue lock poisoned".into()))?;
    unsafe { device.raw.queue_submit(*queue, &submit, fence) }.map_err(|e| device.note(vk_err("vkQueueSubmit")(e)))
}
