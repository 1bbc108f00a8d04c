//! Transfers between the host and device buffers (upload, download, fill),
//! each a one-shot submission with the barriers that order it against the
//! compute work and transfers before and after it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;
use gpu_allocator::MemoryLocation;

use super::buffer::{checked_range, copy_regions, Buffer, MAX_COPY_REGION};
use super::device::Device;
use super::queue::{create_pool_and_buffer, submit, CommandObjects};
use crate::error::{vk_err, Result};

/// Records with `record`, submits and waits (within the context's timeout):
/// for downloads and fills. After a timeout or a device loss the command
/// pool and fence are leaked (`CommandObjects`), and so are the caller's
/// buffers (`Buffer`'s Drop), since the copy may still be running.
pub fn one_shot(device: &Arc<Device>, record: impl FnOnce(vk::CommandBuffer)) -> Result<()> {
    let (pool, fence) = submit_one_shot(device, record)?;
    let objects = CommandObjects { device, pool, fence };
    device.wait_fence(objects.fence, "a transfer")
}

/// Records with `record` and submits: the pool and fence, whose owner
/// destroys them (or leaks them after a loss) once the fence has signalled.
fn submit_one_shot(device: &Arc<Device>, record: impl FnOnce(vk::CommandBuffer)) -> Result<(vk::CommandPool, vk::Fence)> {
    device.check_alive()?;
    let (pool, cmd) = create_pool_and_buffer(device)?;
    let fence = match unsafe { device.raw.create_fence(&vk::FenceCreateInfo::default(), None) } {
        Ok(f) => f,
        Err(e) => {
            unsafe { device.raw.destroy_command_pool(pool, None) };
            return Err(vk_err("vkCreateFence")(e));
        }
    };
    // Destroys both if recording or submitting fails.
    let objects = CommandObjects { device, pool, fence };
    let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
    unsafe { device.raw.begin_command_buffer(cmd, &begin) }.map_err(vk_err("vkBeginCommandBuffer"))?;
    record(cmd);
    unsafe { device.raw.end_command_buffer(cmd) }.map_err(vk_err("vkEndCommandBuffer"))?;
    submit(device, cmd, objects.fence)?;
    std::mem::forget(objects);
    Ok((pool, fence))
}

/// The test hook's delay (`divgpu.testing.delay_uploads`), in nanoseconds:
/// every upload reports itself done no sooner than this after its submission,
/// as if the copy took that long (0: off).
static UPLOAD_DELAY_NS: AtomicU64 = AtomicU64::new(0);

/// Sets the delay every later upload takes at least (tests only).
pub fn set_upload_delay(seconds: f64) -> Result<()> {
    if !(seconds.is_finite() && (0.0..=60.0).contains(&seconds)) {
        return Err(crate::error::Error::Usage(format!("delay_uploads: seconds must be within 0..60, got {seconds}")));
    }
    UPLOAD_DELAY_NS.store((seconds * 1e9) as u64, Ordering::SeqCst);
    Ok(())
}

/// An upload submitted and not yet waited for: its staging buffer, command
/// pool and fence live until the copy has finished. Dropped unfinished, it
/// waits first (within the timeout); after a loss or timeout all are leaked.
pub struct PendingUpload {
    device: Arc<Device>,
    pool: vk::CommandPool,
    fence: vk::Fence,
    staging: Option<Buffer>,
    ready_at: Instant,
    finished: bool,
}

impl PendingUpload {
    /// True once the copy has finished (and the test hook's delay passed).
    pub fn is_done(&self) -> Result<bool> {
        self.device.check_alive()?;
        if self.finished {
            return Ok(true);
        }
        let signalled = unsafe { self.device.raw.get_fence_status(self.fence) }
            .map_err(|e| self.device.note(vk_err("vkGetFenceStatus")(e)))?;
        Ok(signalled && Instant::now() >= self.ready_at)
    }

    /// Waits for the copy, at most `limit` (and the context's timeout); the
    /// staging buffer is freed then.
    pub fn wait_at_most(&mut self, limit: Duration) -> Result<()> {
        if self.finished {
            return self.device.check_alive();
        }
        self.device.wait_fence_at_most(self.fence, "an upload", limit)?;
        let now = Instant::now();
        if now < self.ready_at {
            std::thread::sleep(self.ready_at - now);
        }
        self.finished = true;
        self.staging = None;
        Ok(())
    }

    pub fn timeout(&self) -> Duration {
        self.device.timeout
    }
}

impl Drop for PendingUpload {
    fn drop(&mut self) {
        if !self.finished && self.device.wait_fence(self.fence, "an upload").is_err() {
            // The copy may still read the staging buffer: leak it with the rest.
            std::mem::forget(self.staging.take());
            return;
        }
        drop(CommandObjects { device: &self.device, pool: self.pool, fence: self.fence });
    }
}

type Scope = (vk::PipelineStageFlags, vk::AccessFlags);

/// A global memory barrier between two scopes of one command buffer.
fn barrier(device: &Device, cmd: vk::CommandBuffer, src: Scope, dst: Scope) {
    let barrier = [vk::MemoryBarrier::default().src_access_mask(src.1).dst_access_mask(dst.1)];
    unsafe { device.raw.cmd_pipeline_barrier(cmd, src.0, dst.0, vk::DependencyFlags::empty(), &barrier, &[], &[]) };
}

const fn or_stage(a: vk::PipelineStageFlags, b: vk::PipelineStageFlags) -> vk::PipelineStageFlags {
    vk::PipelineStageFlags::from_raw(a.as_raw() | b.as_raw())
}
const fn or_access(a: vk::AccessFlags, b: vk::AccessFlags) -> vk::AccessFlags {
    vk::AccessFlags::from_raw(a.as_raw() | b.as_raw())
}

const GPU_STAGES: vk::PipelineStageFlags =
    or_stage(vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::TRANSFER);
/// Every earlier GPU write to a buffer: a shader's or a transfer's. (Earlier
/// reads need only the execution dependency on their stages.)
const EARLIER_WRITES: Scope = (GPU_STAGES, or_access(vk::AccessFlags::SHADER_WRITE, vk::AccessFlags::TRANSFER_WRITE));
/// Every later GPU access: shaders and transfers, reads and writes.
const LATER_ACCESS: Scope = (
    GPU_STAGES,
    or_access(
        or_access(vk::AccessFlags::SHADER_READ, vk::AccessFlags::SHADER_WRITE),
        or_access(vk::AccessFlags::TRANSFER_READ, vk::AccessFlags::TRANSFER_WRITE),
    ),
);
const TRANSFER_READ: Scope = (vk::PipelineStageFlags::TRANSFER, vk::AccessFlags::TRANSFER_READ);
const TRANSFER_WRITE: Scope = (vk::PipelineStageFlags::TRANSFER, vk::AccessFlags::TRANSFER_WRITE);
const HOST_READ: Scope = (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ);

/// `dst.copy_from_slice(src)` on every core, in pieces of 16 MiB (a table of
/// gigabytes goes to the staging memory at the host's bandwidth, not one core's).
pub fn parallel_copy(dst: &mut [u8], src: &[u8]) {
    use rayon::prelude::*;
    const PIECE: usize = 16 << 20;
    dst.par_chunks_mut(PIECE).zip(src.par_chunks(PIECE)).for_each(|(d, s)| d.copy_from_slice(s));
}

impl Buffer {
    /// Copies `bytes` into this buffer at `offset` (through a staging buffer).
    pub fn upload(self: &Arc<Self>, offset: u64, bytes: &[u8]) -> Result<()> {
        match self.begin_upload(offset, bytes)? {
            Some(mut pending) => pending.wait_at_most(self.device.timeout),
            None => Ok(()),
        }
    }

    /// Starts copying `bytes` into this buffer at `offset`: the bytes are in
    /// the staging buffer and the copy submitted when this returns; the copy
    /// is finished when the returned upload says so (None: nothing to copy).
    pub fn begin_upload(self: &Arc<Self>, offset: u64, bytes: &[u8]) -> Result<Option<PendingUpload>> {
        self.begin_upload_with(offset, bytes.len(), |staged| parallel_copy(staged, bytes))
    }

    /// As `begin_upload`, for `len` bytes that `fill` writes straight into the
    /// staging buffer (a table by rows or by columns, without a copy of it first).
    pub fn begin_upload_with(
        self: &Arc<Self>,
        offset: u64,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<PendingUpload>> {
        checked_range("upload", &self.name, self.size, offset, len as u64)?;
        if len == 0 {
            return Ok(None);
        }
        let mut staging = Self::create(
            &self.device,
            len as u64,
            vk::BufferUsageFlags::TRANSFER_SRC,
            MemoryLocation::CpuToGpu,
            "staging upload",
        )?;
        // Host writes to the mapping need no barrier: vkQueueSubmit makes
        // them visible to the commands it submits.
        fill(&mut staging.mapped()?[..len]);
        let region = copy_regions(0, offset, len as u64, MAX_COPY_REGION);
        let (pool, fence) = submit_one_shot(&self.device, |cmd| {
            // Earlier shader or transfer access to the destination before the copy writes it.
            barrier(&self.device, cmd, EARLIER_WRITES, TRANSFER_WRITE);
            unsafe { self.device.raw.cmd_copy_buffer(cmd, staging.raw, self.raw, &region) };
            // The copy's writes before later shaders (and transfers) use them.
            barrier(&self.device, cmd, TRANSFER_WRITE, LATER_ACCESS);
        })?;
        let delay = Duration::from_nanos(UPLOAD_DELAY_NS.load(Ordering::SeqCst));
        Ok(Some(PendingUpload {
            device: self.device.clone(),
            pool,
            fence,
            staging: Some(staging),
            ready_at: Instant::now() + delay,
            finished: false,
        }))
    }

    /// Reads `len` bytes from `offset` back to the host.
    pub fn download(self: &Arc<Self>, offset: u64, len: u64) -> Result<Vec<u8>> {
        checked_range("download", &self.name, self.size, offset, len)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        if self.host_visible {
            return self.read_mapped(offset, len);
        }
        let staging = Self::create(
            &self.device,
            len,
            vk::BufferUsageFlags::TRANSFER_DST,
            MemoryLocation::GpuToCpu,
            "staging download",
        )?;
        let region = copy_regions(offset, 0, len, MAX_COPY_REGION);
        one_shot(&self.device, |cmd| {
            // Shader (or transfer) writes to the source before the copy reads it.
            barrier(&self.device, cmd, EARLIER_WRITES, TRANSFER_READ);
            unsafe { self.device.raw.cmd_copy_buffer(cmd, self.raw, staging.raw, &region) };
            // The copy's writes to the staging buffer before the host reads it.
            barrier(&self.device, cmd, TRANSFER_WRITE, HOST_READ);
        })?;
        // read_mapped invalidates the range first if the memory is not coherent.
        staging.read_mapped(0, len)
    }

    /// Sets every 32-bit word of the buffer to `word`.
    pub fn fill(self: &Arc<Self>, word: u32) -> Result<()> {
        one_shot(&self.device, |cmd| {
            // Earlier shader or transfer access before the fill writes the buffer.
            barrier(&self.device, cmd, EARLIER_WRITES, TRANSFER_WRITE);
            unsafe { self.device.raw.cmd_fill_buffer(cmd, self.raw, 0, vk::WHOLE_SIZE, word) };
            // The fill's writes before later shaders (and transfers) use them.
            barrier(&self.device, cmd, TRANSFER_WRITE, LATER_ACCESS);
        })
    }
}
