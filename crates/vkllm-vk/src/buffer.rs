//! Device buffers on vk-mem, slices of them as kernel arguments, host transfers.

use std::sync::{Arc, Mutex};

use ash::vk;
use vk_mem::Alloc;

use crate::Error;
use crate::device::{Device, Shared};
use crate::error::{Result, vk_err};

/// Where a buffer's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Device-local (weights, activations, KV cache); filled and read through staging copies.
    Device,
    /// Host-visible, mapped (staging, small step parameters written by the host).
    Host,
    /// Host-visible and mapped, in device-local memory where the device offers such (a
    /// resizable BAR): written by the host, read by kernels at device-memory speed (step inputs
    /// every workgroup reads). Host reads of it may be slow (uncached); falls back to host
    /// memory where no such type exists.
    Upload,
}

impl MemoryKind {
    /// Mapped for the host (`write_host` / `read_host` apply).
    pub fn mapped(self) -> bool {
        matches!(self, MemoryKind::Host | MemoryKind::Upload)
    }
}

/// What backs a buffer's memory.
pub(crate) enum Backing {
    /// One vk-mem allocation.
    Vma(Mutex<vk_mem::Allocation>),
    /// Pages bound one by one (a paged buffer, `paged.rs`).
    Paged(crate::paged::PageTable),
}

pub(crate) struct BufferInner {
    pub(crate) shared: Arc<Shared>,
    pub(crate) raw: vk::Buffer,
    pub(crate) backing: Backing,
    pub(crate) size: u64,
    pub(crate) kind: MemoryKind,
    pub(crate) mapped: *mut u8,
    pub(crate) label: String,
    /// This weight's resident f16 copy for prefill products (coop_dequant.rs), once made and
    /// until released under memory pressure.
    pub(crate) f16_copy: Mutex<Option<crate::coop_dequant::KeptCopy>>,
}

// SAFETY: the mapped pointer is only dereferenced in `write_host`/`read_host`, which take `&self`
// and copy whole byte ranges; the GPU side is synchronised by fences. The allocation is behind a
// mutex.
unsafe impl Send for BufferInner {}
unsafe impl Sync for BufferInner {}

impl Drop for BufferInner {
    fn drop(&mut self) {
        match &self.backing {
            Backing::Vma(alloc) => {
                if let Ok(mut a) = alloc.lock() {
                    // SAFETY: created by this allocator; Recordings that use the buffer hold a
                    // clone of the Arc, so no pending command buffer references it.
                    unsafe { self.shared.allocator.destroy_buffer(self.raw, &mut a) };
                }
            }
            // SAFETY: as above; its pages go back to the pool when the table drops.
            Backing::Paged(_) => unsafe { self.shared.raw.destroy_buffer(self.raw, None) },
        }
    }
}

/// A device buffer (cheap to clone; freed when the last clone and every recording using it
/// are gone).
#[derive(Clone)]
pub struct Buffer {
    pub(crate) inner: Arc<BufferInner>,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer({}, {} bytes, {:?})",
            self.inner.label, self.inner.size, self.inner.kind
        )
    }
}

/// A byte range of a buffer: what kernel bindings take.
#[derive(Clone, Copy, Debug)]
pub struct BufSlice<'a> {
    pub buffer: &'a Buffer,
    pub offset: u64,
    pub len: u64,
}

impl vkllm_kernels::KernelBuffer for BufSlice<'_> {
    fn byte_len(&self) -> u64 {
        self.len
    }
}

impl Buffer {
    pub fn size(&self) -> u64 {
        self.inner.size
    }
    pub fn kind(&self) -> MemoryKind {
        self.inner.kind
    }
    pub fn label(&self) -> &str {
        &self.inner.label
    }
    pub fn raw(&self) -> vk::Buffer {
        self.inner.raw
    }

    /// The whole buffer.
    pub fn all(&self) -> BufSlice<'_> {
        BufSlice {
            buffer: self,
            offset: 0,
            len: self.inner.size,
        }
    }

    /// `len` bytes from `offset` (checked against the size; alignment is checked when bound).
    pub fn slice(&self, offset: u64, len: u64) -> Result<BufSlice<'_>> {
        if offset.checked_add(len).is_none_or(|e| e > self.inner.size) {
            return Err(Error::OutOfBounds {
                what: self.inner.label.clone(),
                offset,
                len,
                size: self.inner.size,
            });
        }
        Ok(BufSlice {
            buffer: self,
            offset,
            len,
        })
    }

    /// Copies `data` into a host buffer at `offset`.
    pub fn write_host(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_host(offset, data.len() as u64)?;
        // SAFETY: range checked; mapped for the buffer's lifetime; the caller synchronises with
        // GPU work through fences (every submit here waits).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.inner.mapped.add(offset as usize),
                data.len(),
            )
        };
        self.flush(offset, data.len() as u64)
    }

    /// Copies from a host buffer at `offset` into `out`.
    pub fn read_host(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check_host(offset, out.len() as u64)?;
        let sh = &self.inner.shared;
        if let Backing::Vma(alloc) = &self.inner.backing
            && let Ok(a) = alloc.lock()
        {
            sh.allocator
                .invalidate_allocation(&a, offset, out.len() as u64)
                .map_err(vk_err("vmaInvalidateAllocation"))?;
        }
        // SAFETY: as in write_host.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.inner.mapped.add(offset as usize),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }

    fn flush(&self, offset: u64, len: u64) -> Result<()> {
        let sh = &self.inner.shared;
        if let Backing::Vma(alloc) = &self.inner.backing
            && let Ok(a) = alloc.lock()
        {
            sh.allocator
                .flush_allocation(&a, offset, len)
                .map_err(vk_err("vmaFlushAllocation"))?;
        }
        Ok(())
    }

    fn check_host(&self, offset: u64, len: u64) -> Result<()> {
        if !self.inner.kind.mapped() || self.inner.mapped.is_null() {
            return Err(Error::Shape(format!(
                "buffer {} is not host-visible",
                self.inner.label
            )));
        }
        self.slice(offset, len).map(|_| ())
    }
}

impl Device {
    /// A buffer of `size` bytes (at least 4), usable as storage and transfer source/target.
    pub fn create_buffer(&self, label: &str, size: u64, kind: MemoryKind) -> Result<Buffer> {
        match self.create_buffer_once(label, size, kind) {
            // The resident f16 weight copies are a cache: memory for anything else comes first.
            Err(Error::OutOfDeviceMemory { .. }) if self.release_kept_f16() > 0 => {
                self.create_buffer_once(label, size, kind)
            }
            r => r,
        }
    }

    /// [`Device::create_buffer`] without releasing the resident copies when memory is short.
    pub(crate) fn create_buffer_once(
        &self,
        label: &str,
        size: u64,
        kind: MemoryKind,
    ) -> Result<Buffer> {
        let size = size.max(4).next_multiple_of(4);
        if size > self.max_buffer_bytes() {
            return Err(Error::BufferRange {
                what: label.to_string(),
                len: size,
                max: self.max_buffer_bytes(),
            });
        }
        let bi = vk::BufferCreateInfo::default().size(size).usage(
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST
                | vk::BufferUsageFlags::INDIRECT_BUFFER,
        );
        let ai = match kind {
            MemoryKind::Device => vk_mem::AllocationCreateInfo {
                usage: vk_mem::MemoryUsage::AutoPreferDevice,
                ..Default::default()
            },
            MemoryKind::Host => vk_mem::AllocationCreateInfo {
                usage: vk_mem::MemoryUsage::AutoPreferHost,
                flags: vk_mem::AllocationCreateFlags::MAPPED
                    | vk_mem::AllocationCreateFlags::HOST_ACCESS_RANDOM,
                ..Default::default()
            },
            MemoryKind::Upload => vk_mem::AllocationCreateInfo {
                usage: vk_mem::MemoryUsage::AutoPreferDevice,
                flags: vk_mem::AllocationCreateFlags::MAPPED
                    | vk_mem::AllocationCreateFlags::HOST_ACCESS_SEQUENTIAL_WRITE,
                ..Default::default()
            },
        };
        let sh = &self.shared;
        // SAFETY: valid allocator and create infos.
        let (raw, alloc) =
            unsafe { sh.allocator.create_buffer(&bi, &ai) }.map_err(|r| match r {
                vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                    Error::OutOfDeviceMemory {
                        what: "buffer",
                        bytes: size,
                    }
                }
                r => vk_err("vmaCreateBuffer")(r),
            })?;
        let mapped = if kind.mapped() {
            sh.allocator.get_allocation_info(&alloc).mapped_data as *mut u8
        } else {
            std::ptr::null_mut()
        };
        Ok(Buffer {
            inner: Arc::new(BufferInner {
                shared: sh.clone(),
                raw,
                backing: Backing::Vma(Mutex::new(alloc)),
                size,
                kind,
                mapped,
                label: label.to_string(),
                f16_copy: Default::default(),
            }),
        })
    }

    /// A device buffer holding `data` (bytes of any `Pod` slice).
    pub fn buffer_from<T: bytemuck::Pod>(&self, label: &str, data: &[T]) -> Result<Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let b = self.create_buffer(label, bytes.len() as u64, MemoryKind::Device)?;
        self.upload(&b, 0, bytes)?;
        Ok(b)
    }

    /// Copies `data` into `dst` at `offset` through a staging buffer (waits for completion).
    pub fn upload(&self, dst: &Buffer, offset: u64, data: &[u8]) -> Result<()> {
        dst.slice(offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        if dst.kind().mapped() {
            return dst.write_host(offset, data);
        }
        let chunk = (64u64 << 20).min(self.max_buffer_bytes()) as usize;
        let staging =
            self.create_buffer("staging-up", chunk.min(data.len()) as u64, MemoryKind::Host)?;
        for (i, part) in data.chunks(chunk).enumerate() {
            staging.write_host(0, part)?;
            let at = offset + (i * chunk) as u64;
            self.one_shot(|dev, cb| unsafe {
                dev.cmd_copy_buffer(
                    cb,
                    staging.raw(),
                    dst.raw(),
                    &[vk::BufferCopy {
                        src_offset: 0,
                        dst_offset: at,
                        size: part.len() as u64,
                    }],
                )
            })?;
        }
        Ok(())
    }

    /// Reads `out.len()` bytes of `src` from `offset` (waits for completion).
    pub fn download(&self, src: &Buffer, offset: u64, out: &mut [u8]) -> Result<()> {
        src.slice(offset, out.len() as u64)?;
        if out.is_empty() {
            return Ok(());
        }
        if src.kind().mapped() {
            return src.read_host(offset, out);
        }
        let chunk = (64u64 << 20).min(self.max_buffer_bytes()) as usize;
        let staging = self.create_buffer(
            "staging-down",
            chunk.min(out.len()) as u64,
            MemoryKind::Host,
        )?;
        for (i, part) in out.chunks_mut(chunk).enumerate() {
            let at = offset + (i * chunk) as u64;
            let n = part.len() as u64;
            self.one_shot(|dev, cb| unsafe {
                dev.cmd_copy_buffer(
                    cb,
                    src.raw(),
                    staging.raw(),
                    &[vk::BufferCopy {
                        src_offset: at,
                        dst_offset: 0,
                        size: n,
                    }],
                )
            })?;
            staging.read_host(0, part)?;
        }
        Ok(())
    }

    /// Reads a whole buffer as `T`s.
    pub fn read_vec<T: bytemuck::Pod + bytemuck::Zeroable>(
        &self,
        src: &Buffer,
        n: usize,
    ) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); n];
        self.download(src, 0, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// Records `f` into a fresh command buffer, submits it and waits. Transfers are preceded
    /// and followed by full memory barriers so they order against all other queue work.
    pub(crate) fn one_shot(&self, f: impl FnOnce(&ash::Device, vk::CommandBuffer)) -> Result<()> {
        let dev = &self.shared.raw;
        // SAFETY: objects are created, used once and destroyed here; the submit waits.
        unsafe {
            let pool = dev
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(self.shared.queue_family)
                        .flags(vk::CommandPoolCreateFlags::TRANSIENT),
                    None,
                )
                .map_err(vk_err("vkCreateCommandPool"))?;
            let guard = scopeguard(dev, pool);
            let cb = dev
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(pool)
                        .command_buffer_count(1),
                )
                .map_err(vk_err("vkAllocateCommandBuffers"))?[0];
            dev.begin_command_buffer(
                cb,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .map_err(vk_err("vkBeginCommandBuffer"))?;
            full_barrier(dev, cb);
            f(dev, cb);
            full_barrier(dev, cb);
            host_barrier(dev, cb);
            dev.end_command_buffer(cb)
                .map_err(vk_err("vkEndCommandBuffer"))?;
            let fence = dev
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .map_err(vk_err("vkCreateFence"))?;
            let r = self.submit_and_wait(cb, fence);
            if !matches!(r, Err(Error::Timeout { .. })) {
                dev.destroy_fence(fence, None);
                drop(guard);
            } else {
                // Work may still be pending: leak the pool and fence rather than free in-use objects.
                std::mem::forget(guard);
            }
            r
        }
    }
}

struct PoolGuard<'a>(&'a ash::Device, vk::CommandPool);
impl Drop for PoolGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the pool's command buffers are no longer pending (the submit waited).
        unsafe { self.0.destroy_command_pool(self.1, None) };
    }
}
fn scopeguard(dev: &ash::Device, pool: vk::CommandPool) -> PoolGuard<'_> {
    PoolGuard(dev, pool)
}

/// A memory barrier ordering every earlier compute/transfer access before every later one.
pub(crate) fn full_barrier(dev: &ash::Device, cb: vk::CommandBuffer) {
    barrier(dev, cb, false)
}

/// `full_barrier`, also making the writes visible to indirect launch sizes when `indirect`.
pub(crate) fn barrier(dev: &ash::Device, cb: vk::CommandBuffer, indirect: bool) {
    let stages = vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
    let access = vk::AccessFlags::SHADER_READ
        | vk::AccessFlags::SHADER_WRITE
        | vk::AccessFlags::TRANSFER_READ
        | vk::AccessFlags::TRANSFER_WRITE;
    let (dst_stages, dst_access) = if indirect {
        (
            stages | vk::PipelineStageFlags::DRAW_INDIRECT,
            access | vk::AccessFlags::INDIRECT_COMMAND_READ,
        )
    } else {
        (stages, access)
    };
    let mb = [vk::MemoryBarrier::default()
        .src_access_mask(access)
        .dst_access_mask(dst_access)];
    // SAFETY: cb is recording.
    unsafe {
        dev.cmd_pipeline_barrier(
            cb,
            stages,
            dst_stages,
            vk::DependencyFlags::empty(),
            &mb,
            &[],
            &[],
        )
    };
}

/// Makes earlier compute/transfer writes available to host reads (needed before the host reads
/// host-visible memory the GPU wrote, even after a fence wait).
pub(crate) fn host_barrier(dev: &ash::Device, cb: vk::CommandBuffer) {
    let mb = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::HOST_READ)];
    // SAFETY: cb is recording.
    unsafe {
        dev.cmd_pipeline_barrier(
            cb,
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::HOST,
            vk::DependencyFlags::empty(),
            &mb,
            &[],
            &[],
        )
    };
}
