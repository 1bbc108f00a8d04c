//! Storage buffers in device memory, filled and read back through staging
//! buffers in host-visible memory.

use std::sync::Arc;

use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use gpu_allocator::MemoryLocation;

use super::device::Device;
use super::fault::{take, Fault};
use crate::error::{vk_err, Error, Result};

/// `offset + len` if that range lies inside a buffer of `size` bytes, else an
/// error naming the buffer (checked: an offset near 2^64 must not wrap).
pub fn checked_range(what: &str, name: &str, size: u64, offset: u64, len: u64) -> Result<u64> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(end),
        _ => Err(Error::Usage(format!(
            "{what} of {len} bytes at offset {offset} does not fit buffer '{name}' of {size} bytes"
        ))),
    }
}

/// The most bytes one region of a buffer copy moves. Mesa's lavapipe (22.3)
/// crashes in vkCmdCopyBuffer on a region of 2^31 bytes or more (a copy of
/// 2^31 - 16 bytes ran, 2^31 segfaulted); regions of 1 GiB keep every copy
/// under that on any driver, at no cost where one region would have done.
pub const MAX_COPY_REGION: u64 = 1 << 30;

/// The regions of a copy of `size` bytes from `src_offset` to `dst_offset`,
/// each at most `max_region` bytes, in order.
pub fn copy_regions(src_offset: u64, dst_offset: u64, size: u64, max_region: u64) -> Vec<vk::BufferCopy> {
    let max_region = max_region.max(1);
    let mut regions = Vec::with_capacity(size.div_ceil(max_region) as usize);
    let mut done = 0;
    while done < size {
        let len = (size - done).min(max_region);
        regions.push(vk::BufferCopy { src_offset: src_offset + done, dst_offset: dst_offset + done, size: len });
        done += len;
    }
    regions
}

/// Out of memory for buffer `name`, of `kind` memory ("device" or "host-visible").
fn out_of_memory(name: &str, size: u64, kind: &'static str) -> Error {
    Error::OutOfMemory { what: format!("allocating buffer '{name}' of {size} bytes"), kind }
}

/// What refuses a buffer before any Vulkan call: an injected fault (tests),
/// or a size past the largest allocation the driver promises (where
/// vkAllocateMemory may fail or be refused by the validation layer: said first).
fn refused_before_allocating(device: &Device, size: u64, name: &str, kind: &'static str) -> Result<()> {
    if take(Fault::OutOfMemory) {
        return Err(out_of_memory(name, size, kind));
    }
    let largest = device.info.max_memory_allocation_size;
    if largest > 0 && size > largest {
        return Err(Error::OutOfMemory {
            what: format!(
                "buffer '{name}' of {size} bytes exceeds the largest allocation of device '{}' ({largest} bytes)",
                device.info.name
            ),
            kind,
        });
    }
    Ok(())
}

/// A storage buffer's usage on `device`: read and written by shaders and
/// copies, and reached by device address where the device has them.
fn storage_usage(device: &Device) -> vk::BufferUsageFlags {
    let usage =
        vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    if device.info.buffer_device_address {
        usage | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS
    } else {
        usage
    }
}

pub struct Buffer {
    pub device: Arc<Device>,
    pub raw: vk::Buffer,
    allocation: Option<Allocation>,
    /// Memory of its own (`storage_dedicated`), freed with the buffer.
    dedicated: Option<vk::DeviceMemory>,
    pub size: u64,
    pub name: String,
    /// Host-visible buffers are read through their mapping, without staging.
    pub host_visible: bool,
}

impl Buffer {
    pub(super) fn create(
        device: &Arc<Device>,
        size: u64,
        usage: vk::BufferUsageFlags,
        location: MemoryLocation,
        name: &str,
    ) -> Result<Buffer> {
        device.check_alive()?;
        // Vulkan forbids empty buffers; an empty table is rejected earlier, but a
        // zero-length scratch buffer must not become a driver error.
        let size = size.max(4);
        let memory = if location == MemoryLocation::GpuOnly { "device" } else { "host-visible" };
        let out_of_memory = || out_of_memory(name, size, memory);
        refused_before_allocating(device, size, name, memory)?;
        let info = vk::BufferCreateInfo::default().size(size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        let raw = unsafe { device.raw.create_buffer(&info, None) }.map_err(|e| match vk_err("vkCreateBuffer")(e) {
            Error::OutOfMemory { .. } => out_of_memory(),
            other => other,
        })?;
        let requirements = unsafe { device.raw.get_buffer_memory_requirements(raw) };
        let allocation = device.lock_allocator().and_then(|mut a| {
            a.allocate(&AllocationCreateDesc {
                name,
                requirements,
                location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            })
            .map_err(|e| match Error::from(e) {
                Error::OutOfMemory { .. } => out_of_memory(),
                other => other,
            })
        });
        let allocation = match allocation {
            Ok(a) => a,
            Err(e) => {
                unsafe { device.raw.destroy_buffer(raw, None) };
                return Err(e);
            }
        };
        let bound = unsafe { device.raw.bind_buffer_memory(raw, allocation.memory(), allocation.offset()) };
        let host_visible = location != MemoryLocation::GpuOnly;
        let buffer = Buffer {
            device: device.clone(),
            raw,
            allocation: Some(allocation),
            dedicated: None,
            size,
            name: name.to_string(),
            host_visible,
        };
        bound.map_err(vk_err("vkBindBufferMemory"))?;
        Ok(buffer)
    }

    /// A device-local storage buffer of `size` bytes (contents undefined).
    pub fn storage(device: &Arc<Device>, size: u64, name: &str) -> Result<Arc<Buffer>> {
        Ok(Arc::new(Self::create(device, size, storage_usage(device), MemoryLocation::GpuOnly, name)?))
    }

    /// A device-local storage buffer in memory of its own (vkAllocateMemory,
    /// not the allocator's blocks, and without the allocator's lock), so that
    /// a thread making large ones does not hold up the caller's other
    /// allocations meanwhile (gram's G, 64 GiB on the H200: 0.15 s this way,
    /// 1.68 s through the allocator; `ctx:begin_buffers`). Contents undefined.
    pub fn storage_dedicated(device: &Arc<Device>, size: u64, name: &str) -> Result<Arc<Buffer>> {
        device.check_alive()?;
        let size = size.max(4);
        refused_before_allocating(device, size, name, "device")?;
        let usage = storage_usage(device);
        let info = vk::BufferCreateInfo::default().size(size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        let raw = unsafe { device.raw.create_buffer(&info, None) }.map_err(vk_err("vkCreateBuffer"))?;
        // From here on, `buffer` owns what was made: an early return frees it.
        let mut buffer =
            Buffer { device: device.clone(), raw, allocation: None, dedicated: None, size, name: name.to_string(), host_visible: false };
        let requirements = unsafe { device.raw.get_buffer_memory_requirements(raw) };
        let types = unsafe { device.instance.raw.get_physical_device_memory_properties(device.physical) };
        let wanted = |t: u32, avoid: vk::MemoryPropertyFlags| {
            let flags = types.memory_types[t as usize].property_flags;
            requirements.memory_type_bits & (1 << t) != 0
                && flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
                && !flags.intersects(avoid)
        };
        // Device-local memory the host cannot see first (a ReBAR heap is small
        // and shared); never the AMD coherent kinds, which need a feature divgpu
        // does not enable.
        let amd = vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD | vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD;
        let type_index = (0..types.memory_type_count)
            .find(|&t| wanted(t, vk::MemoryPropertyFlags::HOST_VISIBLE | amd))
            .or_else(|| (0..types.memory_type_count).find(|&t| wanted(t, amd)))
            .ok_or_else(|| Error::Device(format!("buffer '{name}': no device-local memory type fits it")))?;
        let mut address = vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(raw);
        let mut allocate = vk::MemoryAllocateInfo::default()
            .allocation_size(requirements.size)
            .memory_type_index(type_index)
            .push_next(&mut dedicated);
        if device.info.buffer_device_address {
            allocate = allocate.push_next(&mut address);
        }
        let memory = unsafe { device.raw.allocate_memory(&allocate, None) }.map_err(|e| match vk_err("vkAllocateMemory")(e) {
            Error::OutOfMemory { .. } => out_of_memory(name, size, "device"),
            other => other,
        })?;
        buffer.dedicated = Some(memory);
        unsafe { device.raw.bind_buffer_memory(raw, memory, 0) }.map_err(vk_err("vkBindBufferMemory"))?;
        Ok(Arc::new(buffer))
    }

    /// A storage buffer in host-visible memory that shaders write and the host
    /// reads directly (the winners of each chunk): no staging copy, and no
    /// extra submission that would queue behind work in flight.
    pub fn readback(device: &Arc<Device>, size: u64, name: &str) -> Result<Arc<Buffer>> {
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST;
        Ok(Arc::new(Self::create(device, size, usage, MemoryLocation::GpuToCpu, name)?))
    }

    /// The buffer's 64-bit device address, for shaders that reach it through
    /// a buffer reference instead of a binding (no maxStorageBufferRange).
    pub fn device_address(&self) -> Result<u64> {
        if !self.device.info.buffer_device_address || self.host_visible {
            return Err(Error::Usage(format!(
                "buffer '{}' has no device address (device '{}' {})",
                self.name,
                self.device.info.name,
                if self.host_visible { "host-visible buffer" } else { "lacks bufferDeviceAddress" }
            )));
        }
        let info = vk::BufferDeviceAddressInfo::default().buffer(self.raw);
        Ok(unsafe { self.device.raw.get_buffer_device_address(&info) })
    }

    /// Reads a host-visible buffer through its mapping. The caller has waited
    /// for the submission that wrote it (whose end barrier makes shader
    /// writes visible to the host).
    pub fn read_mapped(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.with_mapped(offset, len, |bytes| bytes.to_vec())
    }

    /// The words of a host-visible buffer, to copy from through the mapping's
    /// pointer: other words of the buffer may be written by a submission
    /// still running (the driver's winners ring), so no Rust reference may
    /// cover the mapping. The caller has waited for the submission that wrote
    /// the words it copies; non-coherent memory is invalidated once, here.
    pub fn mapped_words(&self) -> Result<MappedWords<'_>> {
        let allocation = self
            .allocation
            .as_ref()
            .ok_or_else(|| Error::Device(format!("buffer '{}' has no memory", self.name)))?;
        self.invalidate(allocation, 0)?;
        let base = allocation
            .mapped_ptr()
            .ok_or_else(|| Error::Device(format!("buffer '{}' is not host-mapped", self.name)))?;
        Ok(MappedWords { buffer: self, base: base.as_ptr() as *const u8 })
    }

    /// Makes the device's writes visible to the host on non-coherent memory:
    /// invalidates from the atom-aligned start to the end of the memory object
    /// (VK_WHOLE_SIZE needs no size alignment).
    fn invalidate(&self, allocation: &Allocation, offset: u64) -> Result<()> {
        if !allocation.memory_properties().contains(vk::MemoryPropertyFlags::HOST_COHERENT) {
            let atom = self.device.info.non_coherent_atom_size.max(1);
            let start = (allocation.offset() + offset) / atom * atom;
            // SAFETY: the memory object lives as long as `allocation`.
            let memory = unsafe { allocation.memory() };
            let range = [vk::MappedMemoryRange::default().memory(memory).offset(start).size(vk::WHOLE_SIZE)];
            unsafe { self.device.raw.invalidate_mapped_memory_ranges(&range) }
                .map_err(vk_err("vkInvalidateMappedMemoryRanges"))?;
        }
        Ok(())
    }

    /// `f` on bytes [offset, offset + len) of a host-visible buffer's mapping,
    /// read in place (no copy); the same conditions as `read_mapped`, and no
    /// submission may be writing any of the buffer meanwhile.
    fn with_mapped<T>(&self, offset: u64, len: u64, f: impl FnOnce(&[u8]) -> T) -> Result<T> {
        let allocation = self
            .allocation
            .as_ref()
            .ok_or_else(|| Error::Device(format!("buffer '{}' has no memory", self.name)))?;
        self.invalidate(allocation, offset)?;
        let end = checked_range("read", &self.name, self.size, offset, len)?;
        let mapped = allocation
            .mapped_slice()
            .ok_or_else(|| Error::Device(format!("buffer '{}' is not host-mapped", self.name)))?;
        // The mapping is at least `size` bytes, and `end <= size`.
        mapped
            .get(offset as usize..end as usize)
            .map(f)
            .ok_or_else(|| Error::Device(format!("buffer '{}': mapping shorter than the buffer", self.name)))
    }

    pub(super) fn mapped(&mut self) -> Result<&mut [u8]> {
        let name = self.name.clone();
        self.allocation
            .as_mut()
            .and_then(|a| a.mapped_slice_mut())
            .ok_or_else(|| Error::Device(format!("staging buffer '{name}' is not host-mapped")))
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.device.leaking() {
            // Lost or hung device: the GPU may still read or write this memory,
            // so the buffer and its memory are leaked, not freed.
            std::mem::forget(self.allocation.take());
            return;
        }
        if let Some(memory) = self.dedicated.take() {
            unsafe {
                self.device.raw.destroy_buffer(self.raw, None);
                self.device.raw.free_memory(memory, None);
            }
            return;
        }
        if let Some(allocation) = self.allocation.take() {
            if let Ok(mut allocator) = self.device.allocator.lock() {
                let _ = allocator.free(allocation);
            }
        }
        unsafe { self.device.raw.destroy_buffer(self.raw, None) };
    }
}

/// A host-visible buffer's mapping, read word by word (`Buffer::mapped_words`).
pub struct MappedWords<'a> {
    buffer: &'a Buffer,
    base: *const u8,
}

impl MappedWords<'_> {
    /// Copies `dst.len()` words from word `word_offset` (checked against the
    /// buffer's size, without wrapping).
    pub fn copy(&self, word_offset: u64, dst: &mut [u32]) -> Result<()> {
        let b = self.buffer;
        let len = (dst.len() as u64).checked_mul(4).ok_or_else(|| Error::Usage("copy of too many words".into()))?;
        let offset = word_offset.checked_mul(4).ok_or_else(|| Error::Usage("word offset overflows".into()))?;
        checked_range("read", &b.name, b.size, offset, len)?;
        // SAFETY: offset + len <= size (checked above) lies within the mapping,
        // which lives as long as the buffer's allocation, borrowed here; `dst`
        // is ours and does not overlap it. Unaligned reads: the mapping's
        // alignment is not assumed.
        unsafe {
            let src = self.base.add(offset as usize);
            for (i, w) in dst.iter_mut().enumerate() {
                *w = std::ptr::read_unaligned(src.add(4 * i) as *const u32);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_regions, MAX_COPY_REGION};

    #[test]
    fn copy_regions_cover_the_range_in_order_none_over_the_limit() {
        for (size, max) in [(0u64, 4u64), (1, 4), (4, 4), (5, 4), (13, 4), (3 << 30, MAX_COPY_REGION), ((2 << 30) + 7, MAX_COPY_REGION)] {
            let regions = copy_regions(100, 7, size, max);
            assert_eq!(regions.len() as u64, size.div_ceil(max), "{size} by {max}");
            let mut next = 0;
            for r in &regions {
                assert!(r.size > 0 && r.size <= max, "{size} by {max}: a region of {}", r.size);
                assert_eq!((r.src_offset, r.dst_offset), (100 + next, 7 + next), "{size} by {max}");
                next += r.size;
            }
            assert_eq!(next, size, "{size} by {max}: the regions cover {next} bytes");
        }
    }

    #[test]
    fn a_copy_of_2_gib_or_more_is_split_below_2_gib() {
        // (lavapipe crashed on one region of 2^31 bytes; see MAX_COPY_REGION.)
        assert!(copy_regions(0, 0, 1 << 31, MAX_COPY_REGION).iter().all(|r| r.size < 1 << 31));
        assert_eq!(copy_regions(0, 0, (1 << 30) - 1, MAX_COPY_REGION).len(), 1, "a small copy stays one region");
    }
}
