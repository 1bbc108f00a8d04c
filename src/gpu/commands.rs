//! Command recording and submission. A `Recorder` owns one command buffer,
//! its fence and a timestamp query pair; it keeps every bind group it records
//! alive until its fence has signalled, so Lua dropping the last reference to
//! a buffer while the GPU still reads it cannot free the memory under it.
//!
//! Failures: a submit that fails for any reason but a device loss discards
//! what was recorded and leaves the recorder idle, ready to record again (the
//! driver retries nothing: the error reaches the caller). A device loss or a
//! timeout kills the whole context: every later call on it is an error, and
//! what the GPU may still use is leaked, never freed.

use std::sync::Arc;

use ash::vk;

use super::buffer::{checked_range, copy_regions, Buffer, MAX_COPY_REGION};
use super::device::Device;
use super::pipeline::BindGroup;
use super::queue::{create_pool_and_buffer, submit};
use crate::error::{vk_err, Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Recording,
    Submitted,
}

pub struct Recorder {
    device: Arc<Device>,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    queries: vk::QueryPool,
    state: State,
    /// Everything the recorded commands use, released after the fence.
    in_use: Vec<Arc<BindGroup>>,
    /// Buffers of recorded copies, released after the fence too.
    copied: Vec<Arc<Buffer>>,
    dispatches: u32,
    last_gpu_seconds: Option<f64>,
}

impl Recorder {
    pub fn new(device: &Arc<Device>) -> Result<Recorder> {
        device.check_alive()?;
        let (pool, cmd) = create_pool_and_buffer(device)?;
        let mut recorder = Recorder {
            device: device.clone(),
            pool,
            cmd,
            fence: vk::Fence::null(),
            queries: vk::QueryPool::null(),
            state: State::Idle,
            in_use: Vec::new(),
            copied: Vec::new(),
            dispatches: 0,
            last_gpu_seconds: None,
        };
        recorder.fence = unsafe { device.raw.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(vk_err("vkCreateFence"))?;
        if device.info.timestamps {
            let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(2);
            recorder.queries =
                unsafe { device.raw.create_query_pool(&info, None) }.map_err(vk_err("vkCreateQueryPool"))?;
        }
        Ok(recorder)
    }

    fn ensure_recording(&mut self) -> Result<()> {
        self.device.check_alive()?;
        match self.state {
            State::Recording => Ok(()),
            State::Submitted => Err(Error::Usage("recorder is still in flight: call wait() before recording again".into())),
            State::Idle => {
                let d = &self.device.raw;
                unsafe { d.reset_command_pool(self.pool, vk::CommandPoolResetFlags::empty()) }
                    .map_err(vk_err("vkResetCommandPool"))?;
                let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
                unsafe { d.begin_command_buffer(self.cmd, &begin) }.map_err(vk_err("vkBeginCommandBuffer"))?;
                if self.queries != vk::QueryPool::null() {
                    unsafe { d.cmd_reset_query_pool(self.cmd, self.queries, 0, 2) };
                    unsafe { d.cmd_write_timestamp(self.cmd, vk::PipelineStageFlags::TOP_OF_PIPE, self.queries, 0) };
                }
                // Writes of earlier submissions (another recorder's chunk, an
                // upload, a fill) before this one's shaders read or write:
                // a chunk need not end with a barrier of its own.
                let barrier = [vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
                    .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
                unsafe {
                    d.cmd_pipeline_barrier(
                        self.cmd,
                        vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::DependencyFlags::empty(),
                        &barrier,
                        &[],
                        &[],
                    )
                };
                self.state = State::Recording;
                self.dispatches = 0;
                Ok(())
            }
        }
    }

    /// Records one dispatch. `push` must be exactly the shader's push block.
    pub fn dispatch(&mut self, group: &Arc<BindGroup>, push: &[u8], groups: [u32; 3]) -> Result<()> {
        let pipeline = &group.pipeline;
        self.device.check_same(&pipeline.device, &format!("bind group of shader '{}'", pipeline.name))?;
        let expected = pipeline.reflection.push_constant_size as usize;
        if push.len() != expected {
            return Err(Error::Usage(format!(
                "shader '{}' declares {expected} bytes of push constants, but the dispatch pushes {} bytes",
                pipeline.name,
                push.len()
            )));
        }
        let max = self.device.info.max_workgroup_count;
        if groups.iter().any(|&g| g == 0 || g > max) {
            return Err(Error::Usage(format!(
                "dispatch of shader '{}' with {groups:?} workgroups: each count must be 1..={max}",
                pipeline.name
            )));
        }
        self.ensure_recording()?;
        let d = &self.device.raw;
        unsafe { d.cmd_bind_pipeline(self.cmd, vk::PipelineBindPoint::COMPUTE, pipeline.raw) };
        unsafe {
            d.cmd_bind_descriptor_sets(self.cmd, vk::PipelineBindPoint::COMPUTE, pipeline.layout, 0, &[group.set], &[])
        };
        if !push.is_empty() {
            unsafe { d.cmd_push_constants(self.cmd, pipeline.layout, vk::ShaderStageFlags::COMPUTE, 0, push) };
        }
        unsafe { d.cmd_dispatch(self.cmd, groups[0], groups[1], groups[2]) };
        if !self.in_use.iter().any(|g| Arc::ptr_eq(g, group)) {
            self.in_use.push(group.clone());
        }
        self.dispatches += 1;
        Ok(())
    }

    /// A global memory barrier from compute-shader writes to `dst_access` in `dst_stage`.
    /// One global memory barrier from (stage, access) to (stage, access).
    fn memory_barrier(
        &self,
        src_stage: vk::PipelineStageFlags,
        src_access: vk::AccessFlags,
        dst_stage: vk::PipelineStageFlags,
        dst_access: vk::AccessFlags,
    ) {
        let barrier = [vk::MemoryBarrier::default().src_access_mask(src_access).dst_access_mask(dst_access)];
        unsafe {
            self.device.raw.cmd_pipeline_barrier(self.cmd, src_stage, dst_stage, vk::DependencyFlags::empty(), &barrier, &[], &[])
        };
    }

    /// A buffer a recorded copy or update touches stays alive until the
    /// submission is waited for.
    fn keep_until_waited(&mut self, buffer: &Arc<Buffer>) {
        if !self.copied.iter().any(|c| Arc::ptr_eq(c, buffer)) {
            self.copied.push(buffer.clone());
        }
    }

    fn shader_write_barrier(&self, dst_stage: vk::PipelineStageFlags, dst_access: vk::AccessFlags) {
        self.memory_barrier(vk::PipelineStageFlags::COMPUTE_SHADER, vk::AccessFlags::SHADER_WRITE, dst_stage, dst_access);
    }

    /// Orders every earlier shader write before every later shader read/write.
    pub fn barrier(&mut self) -> Result<()> {
        self.ensure_recording()?;
        self.shader_write_barrier(
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
        );
        Ok(())
    }

    /// Records a write of `bytes` (at most 65,536, a multiple of 4) into the
    /// device-local `dst` at `offset` (vkCmdUpdateBuffer: the data travels in
    /// the command buffer, no staging buffer, no allocation), ordered after
    /// every earlier shader access and before every later one.
    pub fn update(&mut self, dst: &Arc<Buffer>, offset: u64, bytes: &[u8]) -> Result<()> {
        self.device.check_same(&dst.device, &format!("buffer '{}'", dst.name))?;
        if dst.host_visible {
            return Err(Error::Usage(format!("update of buffer '{}': it is host-visible (write it directly)", dst.name)));
        }
        let len = bytes.len() as u64;
        if len > 65536 || len % 4 != 0 || offset % 4 != 0 {
            return Err(Error::Usage(format!(
                "update of buffer '{}': {len} bytes at offset {offset}; at most 65536, both multiples of 4",
                dst.name
            )));
        }
        checked_range("update", &dst.name, dst.size, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        self.ensure_recording()?;
        let shader = vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
        let (compute, transfer) = (vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::TRANSFER);
        self.memory_barrier(compute, shader, transfer, vk::AccessFlags::TRANSFER_WRITE);
        unsafe { self.device.raw.cmd_update_buffer(self.cmd, dst.raw, offset, bytes) };
        self.memory_barrier(transfer, vk::AccessFlags::TRANSFER_WRITE, compute, shader);
        self.keep_until_waited(dst);
        Ok(())
    }

    /// Records a copy of `size` bytes from `src` at `src_offset` to `dst` at
    /// `dst_offset` (e.g. a snapshot of counters the shaders keep, taken at
    /// the end of a chunk into a host-visible buffer read after the wait).
    /// Barriers on both sides order it after every earlier shader or
    /// transfer write, and its write before later shaders, transfers and
    /// host reads (a later read of `src` needs only the execution order).
    pub fn copy(&mut self, src: &Arc<Buffer>, src_offset: u64, dst: &Arc<Buffer>, dst_offset: u64, size: u64) -> Result<()> {
        self.device.check_same(&src.device, &format!("buffer '{}'", src.name))?;
        self.device.check_same(&dst.device, &format!("buffer '{}'", dst.name))?;
        if src.host_visible {
            return Err(Error::Usage(format!(
                "copy from buffer '{}': a host-visible buffer cannot be a copy source (read it with read())",
                src.name
            )));
        }
        checked_range("copy", &src.name, src.size, src_offset, size)?;
        checked_range("copy", &dst.name, dst.size, dst_offset, size)?;
        if size == 0 {
            return Ok(());
        }
        self.ensure_recording()?;
        let d = &self.device.raw;
        let gpu = vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
        let before = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE)];
        unsafe {
            d.cmd_pipeline_barrier(self.cmd, gpu, vk::PipelineStageFlags::TRANSFER, vk::DependencyFlags::empty(), &before, &[], &[])
        };
        let region = copy_regions(src_offset, dst_offset, size, MAX_COPY_REGION);
        unsafe { d.cmd_copy_buffer(self.cmd, src.raw, dst.raw, &region) };
        let after = [vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::TRANSFER_WRITE).dst_access_mask(
            vk::AccessFlags::SHADER_READ
                | vk::AccessFlags::SHADER_WRITE
                | vk::AccessFlags::TRANSFER_READ
                | vk::AccessFlags::TRANSFER_WRITE
                | vk::AccessFlags::HOST_READ,
        )];
        unsafe {
            d.cmd_pipeline_barrier(
                self.cmd,
                vk::PipelineStageFlags::TRANSFER,
                gpu | vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &after,
                &[],
                &[],
            )
        };
        self.keep_until_waited(src);
        self.keep_until_waited(dst);
        Ok(())
    }

    pub fn dispatch_count(&self) -> u32 {
        self.dispatches
    }

    pub fn submit(&mut self) -> Result<()> {
        self.device.check_alive()?;
        if self.state != State::Recording {
            return Err(Error::Usage(match self.state {
                State::Submitted => "recorder is already in flight: call wait() before submitting again".into(),
                _ => "nothing recorded to submit".into(),
            }));
        }
        let submitted = self.end_and_submit();
        if submitted.is_err() && !self.device.leaking() {
            // Nothing reached the queue (vkQueueSubmit leaves no trace when it
            // fails for any reason but a device loss): discard the commands,
            // and the recorder records afresh on its next use.
            self.state = State::Idle;
            self.in_use.clear();
            self.copied.clear();
            self.dispatches = 0;
        }
        submitted
    }

    fn end_and_submit(&mut self) -> Result<()> {
        // Makes this submission's shader writes visible to host reads of
        // host-visible buffers once the fence has signalled.
        self.shader_write_barrier(vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ);
        let d = &self.device.raw;
        if self.queries != vk::QueryPool::null() {
            unsafe { d.cmd_write_timestamp(self.cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.queries, 1) };
        }
        unsafe { d.end_command_buffer(self.cmd) }.map_err(vk_err("vkEndCommandBuffer"))?;
        unsafe { d.reset_fences(&[self.fence]) }.map_err(vk_err("vkResetFences"))?;
        submit(&self.device, self.cmd, self.fence)?;
        self.state = State::Submitted;
        Ok(())
    }

    /// The context's limit on every wait.
    pub fn timeout(&self) -> std::time::Duration {
        self.device.timeout
    }

    pub fn is_done(&self) -> Result<bool> {
        self.device.check_alive()?;
        if self.state != State::Submitted {
            return Ok(true);
        }
        unsafe { self.device.raw.get_fence_status(self.fence) }
            .map_err(|e| self.device.note(vk_err("vkGetFenceStatus")(e)))
    }

    /// Waits for the submission, at most the context's timeout; returns its
    /// GPU time in seconds (None when the queue has no timestamps).
    pub fn wait(&mut self) -> Result<Option<f64>> {
        self.wait_at_most(self.device.timeout)
    }

    /// `wait`, bounded by `limit` instead of the whole timeout: the driver
    /// polls several devices' fences and waits only for the rest of it.
    pub fn wait_at_most(&mut self, limit: std::time::Duration) -> Result<Option<f64>> {
        if self.state != State::Submitted {
            self.device.check_alive()?;
            return Ok(self.last_gpu_seconds);
        }
        // On a timeout or loss the state stays Submitted and the context is
        // dead: the bind groups in `in_use` are leaked with it.
        self.device.wait_fence_at_most(self.fence, "a submission", limit)?;
        self.state = State::Idle;
        self.in_use.clear();
        self.copied.clear();
        self.last_gpu_seconds = None;
        if self.queries != vk::QueryPool::null() {
            // The fence has signalled, so the results are available: no
            // WAIT flag (an unbounded wait) is needed.
            let mut stamps = [0u64; 2];
            unsafe {
                self.device.raw.get_query_pool_results(self.queries, 0, &mut stamps, vk::QueryResultFlags::TYPE_64)
            }
            .map_err(|e| self.device.note(vk_err("vkGetQueryPoolResults")(e)))?;
            let ticks = stamps[1].wrapping_sub(stamps[0]);
            self.last_gpu_seconds = Some(ticks as f64 * self.device.info.timestamp_period_ns as f64 * 1e-9);
        }
        Ok(self.last_gpu_seconds)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Only our own fence is waited for (within the timeout): the buffers
        // this submission reads must stay alive until it has finished.
        if self.state == State::Submitted && !self.device.leaking() {
            let _ = self.device.wait_fence(self.fence, "a submission");
        }
        if self.device.leaking() {
            // Lost or hung: the command buffer and what it uses may still be
            // in use by the GPU. Leaked on purpose (the bind groups' own Drop
            // leaks them too).
            std::mem::forget(std::mem::take(&mut self.in_use));
            std::mem::forget(std::mem::take(&mut self.copied));
            return;
        }
        self.in_use.clear();
        self.copied.clear();
        let d = &self.device.raw;
        if self.queries != vk::QueryPool::null() {
            unsafe { d.destroy_query_pool(self.queries, None) };
        }
        unsafe { d.destroy_fence(self.fence, None) };
        unsafe { d.destroy_command_pool(self.pool, None) };
    }
}
