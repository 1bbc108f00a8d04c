//! The queue: command pools, submission and bounded fence waits, shared by
//! the recorder (`commands`) and one-shot transfers (`transfer`). Every wait
//! is bounded by the context's timeout; a device loss or a timeout marks the
//! context dead (`Device::note`), after which its objects are leaked.

use ash::vk;

use super::context::Device;
use super::fault::{take, Fault};
use crate::error::{vk_err, Error, Result};

/// Waits for `fence` at most the context's timeout. `what` names the work
/// in the timeout's message.
pub fn wait_fence(device: &Device, fence: vk::Fence, what: &'static str) -> Result<()> {
    wait_fence_at_most(device, fence, what, device.timeout)
}

/// Waits for `fence` at most `limit` (the rest of the context's timeout when
/// the caller has already polled it), reporting a timeout as the context's.
pub fn wait_fence_at_most(device: &Device, fence: vk::Fence, what: &'static str, limit: std::time::Duration) -> Result<()> {
    device.check_alive()?;
    if take(Fault::Timeout) {
        return Err(device.note(Error::Timeout { what, seconds: device.timeout.as_secs_f64() }));
    }
    if take(Fault::DeviceLostAtWait) {
        return Err(device.note(vk_err("vkWaitForFences")(vk::Result::ERROR_DEVICE_LOST)));
    }
    let ns = u64::try_from(limit.min(device.timeout).as_nanos()).unwrap_or(u64::MAX);
    match unsafe { device.raw.wait_for_fences(&[fence], true, ns) } {
        Ok(()) => Ok(()),
        Err(vk::Result::TIMEOUT) => Err(device.note(Error::Timeout { what, seconds: device.timeout.as_secs_f64() })),
        Err(e) => Err(device.note_wait_failure(vk_err("vkWaitForFences")(e))),
    }
}

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

/// Waits until everything submitted to the queue has finished, within the
/// timeout: an empty submission's fence signals after all earlier work
/// (vkQueueWaitIdle and vkDeviceWaitIdle have no timeout).
pub fn drain(device: &Device) -> Result<()> {
    let fence = unsafe { device.raw.create_fence(&vk::FenceCreateInfo::default(), None) }
        .map_err(vk_err("vkCreateFence"))?;
    let submitted = {
        let queue = device.queue.lock().map_err(|_| Error::Device("queue lock poisoned".into()))?;
        unsafe { device.raw.queue_submit(*queue, &[], fence) }.map_err(vk_err("vkQueueSubmit"))
    };
    let result = submitted.and_then(|()| wait_fence(device, fence, "the queue's last work"));
    // After a timeout or loss the fence may still be signalled later: leaked.
    if !device.leaking() {
        unsafe { device.raw.destroy_fence(fence, None) };
    }
    result
}
