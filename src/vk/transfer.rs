//! Transfers between the host and device buffers (upload, download, fill),
//! each a one-shot submission with the barriers that order it against the
//! compute work before and after it.

use std::sync::Arc;

use ash::vk;
use gpu_allocator::MemoryLocation;

use super::buffer::Buffer;
use super::context::Device;
use super::queue::{create_pool_and_buffer, submit, wait_fence, CommandObjects, DEFAULT_WAIT_LIMIT};
use crate::error::{vk_err, Error, Result};

/// Records with `record`, submits and waits: for uploads and downloads.
pub fn one_shot(device: &Arc<Device>, record: impl FnOnce(vk::CommandBuffer)) -> Result<()> {
    let (pool, cmd) = create_pool_and_buffer(device)?;
    let fence = match unsafe { device.raw.create_fence(&vk::FenceCreateInfo::default(), None) } {
        Ok(f) => f,
        Err(e) => {
            unsafe { device.raw.destroy_command_pool(pool, None) };
            return Err(vk_err("vkCreateFence")(e));
        }
    };
    let objects = CommandObjects { device, pool, fence };
    let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
    unsafe { device.raw.begin_command_buffer(cmd, &begin) }.map_err(vk_err("vkBeginCommandBuffer"))?;
    record(cmd);
    unsafe { device.raw.end_command_buffer(cmd) }.map_err(vk_err("vkEndCommandBuffer"))?;
    submit(device, cmd, objects.fence)?;
    wait_fence(device, objects.fence, DEFAULT_WAIT_LIMIT)
}


/// A memory barrier between two stages of one command buffer.
fn barrier(device: &Device, cmd: vk::CommandBuffer, src: (vk::PipelineStageFlags, vk::AccessFlags),
           dst: (vk::PipelineStageFlags, vk::AccessFlags)) {
    let barrier = [vk::MemoryBarrier::default().src_access_mask(src.1).dst_access_mask(dst.1)];
    unsafe { device.raw.cmd_pipeline_barrier(cmd, src.0, dst.0, vk::DependencyFlags::empty(), &barrier, &[], &[]) };
}

const SHADER: (vk::PipelineStageFlags, vk::AccessFlags) =
    (vk::PipelineStageFlags::COMPUTE_SHADER, vk::AccessFlags::from_raw(vk::AccessFlags::SHADER_READ.as_raw() | vk::AccessFlags::SHADER_WRITE.as_raw()));
const TRANSFER_READ: (vk::PipelineStageFlags, vk::AccessFlags) = (vk::PipelineStageFlags::TRANSFER, vk::AccessFlags::TRANSFER_READ);
const TRANSFER_WRITE: (vk::PipelineStageFlags, vk::AccessFlags) = (vk::PipelineStageFlags::TRANSFER, vk::AccessFlags::TRANSFER_WRITE);
const HOST_READ: (vk::PipelineStageFlags, vk::AccessFlags) = (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ);

impl Buffer {
    /// Copies `bytes` into this buffer at `offset` (through a staging buffer).
    pub fn upload(self: &Arc<Self>, offset: u64, bytes: &[u8]) -> Result<()> {
        if offset + bytes.len() as u64 > self.size {
            return Err(Error::Usage(format!(
                "upload of {} bytes at offset {offset} overflows buffer '{}' of {} bytes",
                bytes.len(),
                self.name,
                self.size
            )));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        let mut staging = Self::create(
            &self.device,
            bytes.len() as u64,
            vk::BufferUsageFlags::TRANSFER_SRC,
            MemoryLocation::CpuToGpu,
            "staging upload",
        )?;
        staging.mapped()?[..bytes.len()].copy_from_slice(bytes);
        let region = [vk::BufferCopy { src_offset: 0, dst_offset: offset, size: bytes.len() as u64 }];
        one_shot(&self.device, |cmd| {
            // Earlier shader access to the destination before the copy writes it.
            barrier(&self.device, cmd, SHADER, TRANSFER_WRITE);
            unsafe { self.device.raw.cmd_copy_buffer(cmd, staging.raw, self.raw, &region) };
            // The copy's writes before later shaders read them.
            barrier(&self.device, cmd, TRANSFER_WRITE, SHADER);
        })
    }

    /// Reads `len` bytes from `offset` back to the host.
    pub fn download(self: &Arc<Self>, offset: u64, len: u64) -> Result<Vec<u8>> {
        if offset + len > self.size {
            return Err(Error::Usage(format!(
                "download of {len} bytes at offset {offset} overflows buffer '{}' of {} bytes",
                self.name, self.size
            )));
        }
        if len == 0 {
            return Ok(Vec::new());
        }
        if self.host_visible {
            return self.read_mapped(offset, len);
        }
        let mut staging = Self::create(
            &self.device,
            len,
            vk::BufferUsageFlags::TRANSFER_DST,
            MemoryLocation::GpuToCpu,
            "staging download",
        )?;
        let region = [vk::BufferCopy { src_offset: offset, dst_offset: 0, size: len }];
        one_shot(&self.device, |cmd| {
            // Shader writes to the source before the copy reads it.
            barrier(&self.device, cmd, SHADER, TRANSFER_READ);
            unsafe { self.device.raw.cmd_copy_buffer(cmd, self.raw, staging.raw, &region) };
            // The copy's writes to the staging buffer before the host reads it.
            barrier(&self.device, cmd, TRANSFER_WRITE, HOST_READ);
        })?;
        Ok(staging.mapped()?[..len as usize].to_vec())
    }

    /// Sets every 32-bit word of the buffer to `word`.
    pub fn fill(self: &Arc<Self>, word: u32) -> Result<()> {
        one_shot(&self.device, |cmd| {
            // Earlier shader access before the fill writes the buffer.
            barrier(&self.device, cmd, SHADER, TRANSFER_WRITE);
            unsafe { self.device.raw.cmd_fill_buffer(cmd, self.raw, 0, vk::WHOLE_SIZE, word) };
            // The fill's writes before later shaders read them.
            barrier(&self.device, cmd, TRANSFER_WRITE, SHADER);
        })
    }
}

