//! Paged buffers: sparse, aliased buffers bound page by page from a device-wide pool, so one page
//! can back ranges of several buffers at once. A KV block shared by sequences is then read in
//! place by every kernel (the block table is the GPU's own page table). Pages are reference
//! counted; a range is made private again (copy-on-write) before it is written.

use std::sync::{Arc, Mutex};

use ash::vk;
use vk_mem::Alloc;

use crate::Error;
use crate::buffer::{Backing, Buffer, BufferInner, MemoryKind};
use crate::device::{Device, Shared};
use crate::error::{Result, vk_err};

/// Pages per pool chunk (one device allocation).
const CHUNK_PAGES: u64 = 256;

/// The device's page pool: chunks of device memory and the free pages in them.
#[derive(Default)]
pub(crate) struct PagePool {
    /// Bytes per page (the sparse buffers' alignment); 0 until first asked.
    page: u64,
    /// Memory types a sparse buffer accepts.
    type_bits: u32,
    chunks: Vec<(vk_mem::Allocation, vk::DeviceMemory, u64)>,
    free: Vec<u32>,
    /// Most pages handed out at once (`None`: as many as device memory holds).
    limit: Option<usize>,
}

impl PagePool {
    /// Frees every chunk.
    ///
    /// # Safety
    /// The device is idle and no page is bound or handed out any more.
    pub(crate) unsafe fn release(&mut self, allocator: &vk_mem::Allocator) {
        for (mut a, _, _) in self.chunks.drain(..) {
            // SAFETY: allocated by this allocator, no longer bound (the caller's contract).
            unsafe { allocator.free_memory(&mut a) };
        }
        self.free.clear();
    }

    /// Where page `id` lives.
    fn place(&self, id: u32) -> (vk::DeviceMemory, u64) {
        let (_, mem, off) = self.chunks[(id as u64 / CHUNK_PAGES) as usize];
        (mem, off + (id as u64 % CHUNK_PAGES) * self.page)
    }
}

/// One page of the pool; it returns to the pool when its last handle goes.
pub(crate) struct Page {
    shared: Arc<Shared>,
    id: u32,
}

impl Drop for Page {
    fn drop(&mut self) {
        if let Ok(mut p) = self.shared.pages.lock() {
            p.free.push(self.id);
        }
    }
}

/// `(page index, page)` pairs to bind (`None`: unbind) in one buffer.
type BindEntries<'p> = Vec<(usize, Option<&'p Arc<Page>>)>;

/// A paged buffer's pages: entry `i` backs bytes `i * page .. (i + 1) * page` (`None`: unbound,
/// no memory).
pub(crate) struct PageTable {
    pages: Mutex<Vec<Option<Arc<Page>>>>,
}

/// `dst`'s pages `dst_page .. dst_page + count` become `src`'s pages from `src_page` (the same
/// memory, read and written through either buffer).
#[derive(Clone, Copy, Debug)]
pub struct PageShare<'a> {
    pub src: &'a Buffer,
    pub src_page: usize,
    pub dst: &'a Buffer,
    pub dst_page: usize,
    pub count: usize,
}

/// Pages `first .. first + count` of `b` for [`Device::own_page_ranges`]: those another range
/// shares become private (`keep`: with their contents, else zeroed).
#[derive(Clone, Copy, Debug)]
pub struct PageOwn<'a> {
    pub b: &'a Buffer,
    pub first: usize,
    pub count: usize,
    pub keep: bool,
}

/// Page counts of the device's pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolPages {
    /// Pages allocated from device memory so far.
    pub total: usize,
    /// Of those, pages no buffer holds.
    pub free: usize,
    /// Most pages buffers may hold at once ([`Device::set_page_limit`]).
    pub limit: Option<usize>,
}

fn table(b: &Buffer) -> Result<&PageTable> {
    match &b.inner.backing {
        Backing::Paged(t) => Ok(t),
        Backing::Vma(_) => Err(Error::Shape(format!(
            "buffer {} is not a paged buffer",
            b.inner.label
        ))),
    }
}

type Entries = Vec<Option<Arc<Page>>>;

fn lock(t: &PageTable) -> Result<std::sync::MutexGuard<'_, Entries>> {
    t.pages
        .lock()
        .map_err(|_| Error::Recording("page table lock poisoned"))
}

fn range_err(b: &Buffer, first: usize, count: usize, pages: usize) -> Error {
    Error::Shape(format!(
        "pages {first}..{} of buffer {} ({pages} pages)",
        first + count,
        b.inner.label
    ))
}

/// The pages of each `(buffer, first, count)` range that are bound (`bound`) or unbound, per
/// buffer, and how many in all.
#[allow(clippy::type_complexity)]
fn pick<'a>(
    ranges: &[(&'a Buffer, usize, usize)],
    bound: bool,
) -> Result<(Vec<(&'a Buffer, Vec<usize>)>, usize)> {
    let mut out = Vec::new();
    let mut n = 0;
    for &(b, first, count) in ranges {
        let t = lock(table(b)?)?;
        if first + count > t.len() {
            return Err(range_err(b, first, count, t.len()));
        }
        let idx: Vec<usize> = (first..first + count)
            .filter(|&i| t[i].is_some() == bound)
            .collect();
        n += idx.len();
        if !idx.is_empty() {
            out.push((b, idx));
        }
    }
    Ok((out, n))
}

impl Buffer {
    /// Pages of a paged buffer ([`Device::create_paged_buffer`]), `None` for other buffers.
    pub fn page_count(&self) -> Option<usize> {
        table(self).ok().and_then(|t| lock(t).ok().map(|p| p.len()))
    }
}

impl Device {
    /// Bytes per page of paged buffers, or `None` where the device has no sparse, aliased
    /// buffers (or they were not enabled).
    pub fn page_bytes(&self) -> Option<u64> {
        if !self.shared.paged {
            return None;
        }
        let mut pool = self.shared.pages.lock().ok()?;
        if pool.page == 0 {
            // The page size is the alignment a sparse buffer asks for: probe one.
            let (raw, req) = self.sparse_buffer(1 << 20).ok()?;
            // SAFETY: created above, never bound or used.
            unsafe { self.shared.raw.destroy_buffer(raw, None) };
            pool.page = req.alignment.max(1);
            pool.type_bits = req.memory_type_bits;
        }
        Some(pool.page)
    }

    /// The pool's pages: allocated so far, free among them, and the limit.
    pub fn pool_pages(&self) -> PoolPages {
        let none = PoolPages {
            total: 0,
            free: 0,
            limit: None,
        };
        self.shared.pages.lock().map_or(none, |p| PoolPages {
            total: p.chunks.len() * CHUNK_PAGES as usize,
            free: p.free.len(),
            limit: p.limit,
        })
    }

    /// Caps the pages paged buffers hold at once (`None`: no cap but device memory): binding
    /// more fails with [`Error::PageBudget`]. Pages already held stay.
    pub fn set_page_limit(&self, limit: Option<usize>) {
        if let Ok(mut p) = self.shared.pages.lock() {
            p.limit = limit;
        }
    }

    fn sparse_buffer(&self, size: u64) -> Result<(vk::Buffer, vk::MemoryRequirements)> {
        let bi = vk::BufferCreateInfo::default()
            .size(size)
            .flags(
                vk::BufferCreateFlags::SPARSE_BINDING
                    | vk::BufferCreateFlags::SPARSE_RESIDENCY
                    | vk::BufferCreateFlags::SPARSE_ALIASED,
            )
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            );
        let raw = &self.shared.raw;
        // SAFETY: valid device with the sparse features enabled (`paged`).
        unsafe {
            let b = raw
                .create_buffer(&bi, None)
                .map_err(vk_err("vkCreateBuffer (sparse)"))?;
            Ok((b, raw.get_buffer_memory_requirements(b)))
        }
    }

    /// A device buffer of `size` bytes (rounded up to whole pages) whose pages can be shared
    /// with other paged buffers ([`Device::share_pages`]); each page starts private and zeroed
    /// by the caller as needed (contents undefined).
    pub fn create_paged_buffer(&self, label: &str, size: u64) -> Result<Buffer> {
        self.paged_buffer(label, size, true)
    }

    /// [`Device::create_paged_buffer`] with no page bound: no memory until
    /// [`Device::bind_pages`]. A kernel must not touch an unbound page (devices need not read
    /// them as zeros).
    pub fn create_paged_buffer_unbound(&self, label: &str, size: u64) -> Result<Buffer> {
        self.paged_buffer(label, size, false)
    }

    fn paged_buffer(&self, label: &str, size: u64, resident: bool) -> Result<Buffer> {
        let page = self.page_bytes().ok_or_else(|| Error::MissingFeature {
            device: self.shared.info.name.clone(),
            feature: "sparse aliased buffers (paged KV)".into(),
        })?;
        let n = size.max(4).div_ceil(page);
        if n * page > self.max_buffer_bytes() {
            return Err(Error::BufferRange {
                what: label.to_string(),
                len: n * page,
                max: self.max_buffer_bytes(),
            });
        }
        let (raw, req) = self.sparse_buffer(n * page)?;
        let buf = Buffer {
            inner: Arc::new(BufferInner {
                shared: self.shared.clone(),
                raw,
                backing: Backing::Paged(PageTable {
                    pages: Mutex::new(Vec::new()),
                }),
                size: n * page,
                kind: MemoryKind::Device,
                mapped: std::ptr::null_mut(),
                label: label.to_string(),
                f16_copy: Default::default(),
            }),
        };
        if req.alignment != page {
            return Err(Error::Shape(format!(
                "{label}: sparse alignment {} differs from the pool's page {page}",
                req.alignment
            )));
        }
        if !resident {
            *lock(table(&buf)?)? = vec![None; n as usize];
            return Ok(buf);
        }
        let pages = self.alloc_pages(n as usize)?;
        let entries: Vec<(usize, Option<&Arc<Page>>)> = pages
            .iter()
            .enumerate()
            .map(|(i, p)| (i, Some(p)))
            .collect();
        let binds = self.binds_at(&entries)?;
        self.bind(&[(raw, binds)])?;
        *lock(table(&buf)?)? = pages.into_iter().map(Some).collect();
        Ok(buf)
    }

    /// `n` pages from the pool (growing it by whole chunks), in ascending order.
    fn alloc_pages(&self, n: usize) -> Result<Vec<Arc<Page>>> {
        let page = self.page_bytes().unwrap_or(0);
        let mut pool = self
            .shared
            .pages
            .lock()
            .map_err(|_| Error::Recording("page pool lock poisoned"))?;
        if let Some(limit) = pool.limit {
            let held = pool.chunks.len() * CHUNK_PAGES as usize - pool.free.len();
            if held + n > limit {
                return Err(Error::PageBudget {
                    want: n,
                    free: limit.saturating_sub(held),
                    limit,
                });
            }
        }
        while pool.free.len() < n {
            let req = vk::MemoryRequirements {
                size: CHUNK_PAGES * page,
                alignment: page,
                memory_type_bits: pool.type_bits,
            };
            let ci = vk_mem::AllocationCreateInfo {
                required_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL,
                ..Default::default()
            };
            // SAFETY: valid allocator; the requirements come from a sparse buffer's.
            let mut a = unsafe { self.shared.allocator.allocate_memory(&req, &ci) };
            // The resident f16 weight copies are a cache: KV pages come first.
            if matches!(a, Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY))
                && self.release_kept_f16() > 0
            {
                // SAFETY: as above.
                a = unsafe { self.shared.allocator.allocate_memory(&req, &ci) };
            }
            let a = a.map_err(|r| match r {
                vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                    Error::OutOfDeviceMemory {
                        what: "KV pages",
                        bytes: req.size,
                    }
                }
                r => vk_err("vmaAllocateMemory")(r),
            })?;
            let info = self.shared.allocator.get_allocation_info(&a);
            let first = (pool.chunks.len() as u64 * CHUNK_PAGES) as u32;
            pool.chunks.push((a, info.device_memory, info.offset));
            pool.free.extend((first..first + CHUNK_PAGES as u32).rev());
        }
        let at = pool.free.len() - n;
        let mut ids = pool.free.split_off(at);
        drop(pool);
        ids.sort_unstable();
        Ok(ids
            .into_iter()
            .map(|id| {
                Arc::new(Page {
                    shared: self.shared.clone(),
                    id,
                })
            })
            .collect())
    }

    /// Binds (or, for `None`, unbinds) page `i` of a buffer for each `(i, page)`, consecutive
    /// memory merged.
    fn binds_at(
        &self,
        entries: &[(usize, Option<&Arc<Page>>)],
    ) -> Result<Vec<vk::SparseMemoryBind>> {
        let pool = self
            .shared
            .pages
            .lock()
            .map_err(|_| Error::Recording("page pool lock poisoned"))?;
        let mut out: Vec<vk::SparseMemoryBind> = Vec::new();
        for &(i, p) in entries {
            let at = i as u64 * pool.page;
            let (mem, off) = p.map_or((vk::DeviceMemory::null(), 0), |p| pool.place(p.id));
            if let Some(last) = out.last_mut()
                && last.memory == mem
                && last.resource_offset + last.size == at
                && (mem == vk::DeviceMemory::null() || last.memory_offset + last.size == off)
            {
                last.size += pool.page;
                continue;
            }
            out.push(
                vk::SparseMemoryBind::default()
                    .resource_offset(at)
                    .size(pool.page)
                    .memory(mem)
                    .memory_offset(off),
            );
        }
        Ok(out)
    }

    /// Waits until the queue has run everything submitted to it.
    fn wait_queue_idle(&self) -> Result<()> {
        let q = self
            .shared
            .queue
            .lock()
            .map_err(|_| Error::Recording("queue lock poisoned"))?;
        // SAFETY: the queue is externally synchronised by the lock held.
        unsafe { self.shared.raw.queue_wait_idle(*q) }.map_err(vk_err("vkQueueWaitIdle"))
    }

    /// Runs sparse binds once the queue is idle, and waits for them.
    fn bind(&self, ops: &[(vk::Buffer, Vec<vk::SparseMemoryBind>)]) -> Result<()> {
        let infos: Vec<vk::SparseBufferMemoryBindInfo> = ops
            .iter()
            .filter(|(_, b)| !b.is_empty())
            .map(|(buf, b)| {
                vk::SparseBufferMemoryBindInfo::default()
                    .buffer(*buf)
                    .binds(b)
            })
            .collect();
        if infos.is_empty() {
            return Ok(());
        }
        let raw = &self.shared.raw;
        // SAFETY: the queue is idle before the binds (no submitted work reads a range being
        // rebound); the fence is waited for before it is destroyed.
        unsafe {
            let fence = raw
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .map_err(vk_err("vkCreateFence"))?;
            let r = (|| {
                let q = self
                    .shared
                    .queue
                    .lock()
                    .map_err(|_| Error::Recording("queue lock poisoned"))?;
                raw.queue_wait_idle(*q).map_err(vk_err("vkQueueWaitIdle"))?;
                let bi = vk::BindSparseInfo::default().buffer_binds(&infos);
                raw.queue_bind_sparse(*q, &[bi], fence)
                    .map_err(vk_err("vkQueueBindSparse"))?;
                drop(q);
                self.wait_fence(fence)
            })();
            if !matches!(r, Err(Error::Timeout { .. })) {
                raw.destroy_fence(fence, None);
            }
            r
        }
    }

    /// Makes each share's `dst` pages the `src` pages (both buffers paged; an unbound source
    /// page leaves the destination unbound; the pages `dst` held return to the pool unless
    /// another range still uses them). The queue is drained first; the caller records nothing
    /// that writes a shared page afterwards (see [`Device::own_pages`]).
    pub fn share_pages(&self, shares: &[PageShare<'_>]) -> Result<()> {
        let mut plan = Vec::with_capacity(shares.len());
        for s in shares {
            let src: Entries = {
                let t = lock(table(s.src)?)?;
                if s.src_page + s.count > t.len() {
                    return Err(range_err(s.src, s.src_page, s.count, t.len()));
                }
                t[s.src_page..s.src_page + s.count].to_vec()
            };
            let pages = lock(table(s.dst)?)?.len();
            if s.dst_page + s.count > pages {
                return Err(range_err(s.dst, s.dst_page, s.count, pages));
            }
            plan.push((s.dst, s.dst_page, src));
        }
        let mut ops = Vec::with_capacity(plan.len());
        for (dst, at, src) in &plan {
            let entries: Vec<(usize, Option<&Arc<Page>>)> = src
                .iter()
                .enumerate()
                .map(|(i, p)| (at + i, p.as_ref()))
                .collect();
            ops.push((dst.raw(), self.binds_at(&entries)?));
        }
        self.bind(&ops)?;
        let mut old = Vec::new();
        for (dst, at, src) in plan {
            let mut t = lock(table(dst)?)?;
            for (i, p) in src.into_iter().enumerate() {
                old.push(std::mem::replace(&mut t[at + i], p));
            }
        }
        drop(old);
        Ok(())
    }

    /// Gives each page of `b` in `first .. first + count` that another range shares a private
    /// page of its own; `keep`: with its contents copied, else zeroed (a pool page may never
    /// have been written, and kernels read whole tiles past the last position, masked). Unbound
    /// pages stay unbound. Returns how many pages were replaced. Call before recording writes
    /// to a range that may be shared.
    pub fn own_pages(&self, b: &Buffer, first: usize, count: usize, keep: bool) -> Result<usize> {
        self.own_page_ranges(&[PageOwn {
            b,
            first,
            count,
            keep,
        }])
    }

    /// [`Device::own_pages`] for many ranges (of one or several buffers) at once: three
    /// submissions in all (the kept pages copied out to a staging buffer, one sparse bind of
    /// every new page, the kept contents copied back and the others zeroed), whatever the
    /// number of pages; fails with [`Error::PageBudget`], replacing nothing, past the limit.
    pub fn own_page_ranges(&self, ranges: &[PageOwn<'_>]) -> Result<usize> {
        // (buffer, page, keep) of every shared page, each page once.
        let mut shared: Vec<(&Buffer, usize, bool)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for r in ranges {
            let t = lock(table(r.b)?)?;
            if r.first + r.count > t.len() {
                return Err(range_err(r.b, r.first, r.count, t.len()));
            }
            for i in r.first..r.first + r.count {
                if t[i].as_ref().is_some_and(|p| Arc::strong_count(p) > 1)
                    && seen.insert((r.b.raw(), i))
                {
                    shared.push((r.b, i, r.keep));
                }
            }
        }
        if shared.is_empty() {
            return Ok(0);
        }
        let fresh = self.alloc_pages(shared.len())?;
        let page = self.page_bytes().unwrap_or(0);
        // The copy out reads pages that work already submitted may still write.
        self.wait_queue_idle()?;
        let kept: Vec<(&Buffer, usize)> = shared
            .iter()
            .filter(|s| s.2)
            .map(|&(b, i, _)| (b, i))
            .collect();
        let staging = match kept.len() {
            0 => None,
            n => {
                let st = self.create_buffer(
                    "kv pages (copy on write)",
                    n as u64 * page,
                    MemoryKind::Device,
                )?;
                self.one_shot(|d, cb| {
                    for (k, &(b, i)) in kept.iter().enumerate() {
                        let region = vk::BufferCopy::default()
                            .src_offset(i as u64 * page)
                            .dst_offset(k as u64 * page)
                            .size(page);
                        // SAFETY: the page is bound and inside the buffer; the staging buffer
                        // holds every kept page.
                        unsafe { d.cmd_copy_buffer(cb, b.raw(), st.raw(), &[region]) }
                    }
                })?;
                Some(st)
            }
        };
        // One bind for every buffer's new pages.
        let mut by_buf: Vec<(vk::Buffer, BindEntries<'_>)> = Vec::new();
        for (&(b, i, _), p) in shared.iter().zip(&fresh) {
            match by_buf.iter_mut().find(|(raw, _)| *raw == b.raw()) {
                Some((_, e)) => e.push((i, Some(p))),
                None => by_buf.push((b.raw(), vec![(i, Some(p))])),
            }
        }
        let mut ops = Vec::with_capacity(by_buf.len());
        for (raw, mut entries) in by_buf {
            entries.sort_by_key(|e| e.0);
            ops.push((raw, self.binds_at(&entries)?));
        }
        self.bind(&ops)?;
        self.one_shot(|d, cb| {
            let mut k = 0;
            for &(b, i, keep) in &shared {
                if keep {
                    if let Some(st) = &staging {
                        let region = vk::BufferCopy::default()
                            .src_offset(k as u64 * page)
                            .dst_offset(i as u64 * page)
                            .size(page);
                        // SAFETY: as for the copy out; the new page is bound now.
                        unsafe { d.cmd_copy_buffer(cb, st.raw(), b.raw(), &[region]) }
                    }
                    k += 1;
                } else {
                    // SAFETY: the new page is bound and inside the buffer.
                    unsafe { d.cmd_fill_buffer(cb, b.raw(), i as u64 * page, page, 0) };
                }
            }
        })?;
        let mut old = Vec::with_capacity(shared.len());
        for (&(b, i, _), p) in shared.iter().zip(fresh) {
            old.push(lock(table(b)?)?[i].replace(p));
        }
        drop(old);
        Ok(shared.len())
    }

    /// Fills the given (bound) pages of each buffer with zeros, in one submission.
    fn zero(&self, pages: &[(&Buffer, &[usize])]) -> Result<()> {
        let page = self.page_bytes().unwrap_or(0);
        self.one_shot(|d, cb| {
            for (b, idx) in pages {
                for &i in *idx {
                    // SAFETY: the page is bound and inside the buffer.
                    unsafe { d.cmd_fill_buffer(cb, b.raw(), i as u64 * page, page, 0) };
                }
            }
        })
    }

    /// Binds a fresh, zeroed page of the pool to every unbound page of each `(buffer, first,
    /// count)` range, in one bind; returns how many. Fails with [`Error::PageBudget`] (binding
    /// nothing) when the pool's limit would be passed.
    pub fn bind_pages(&self, ranges: &[(&Buffer, usize, usize)]) -> Result<usize> {
        let (want, n) = pick(ranges, false)?;
        if n == 0 {
            return Ok(0);
        }
        let mut fresh = self.alloc_pages(n)?.into_iter();
        let mut plan = Vec::with_capacity(want.len());
        for (b, idle) in want {
            let pages: Vec<Arc<Page>> = fresh.by_ref().take(idle.len()).collect();
            plan.push((b, idle, pages));
        }
        let mut ops = Vec::with_capacity(plan.len());
        for (b, idle, pages) in &plan {
            let entries: Vec<(usize, Option<&Arc<Page>>)> =
                idle.iter().zip(pages).map(|(&i, p)| (i, Some(p))).collect();
            ops.push((b.raw(), self.binds_at(&entries)?));
        }
        self.bind(&ops)?;
        let zeros: Vec<(&Buffer, &[usize])> =
            plan.iter().map(|(b, i, _)| (*b, i.as_slice())).collect();
        self.zero(&zeros)?;
        for (b, idle, pages) in plan {
            let mut t = lock(table(b)?)?;
            for (i, p) in idle.into_iter().zip(pages) {
                t[i] = Some(p);
            }
        }
        Ok(n)
    }

    /// Unbinds every bound page of each `(buffer, first, count)` range (the memory returns to
    /// the pool unless another range still uses it); returns how many were unbound.
    pub fn release_pages(&self, ranges: &[(&Buffer, usize, usize)]) -> Result<usize> {
        let (plan, n) = pick(ranges, true)?;
        if n == 0 {
            return Ok(0);
        }
        let mut ops = Vec::with_capacity(plan.len());
        for (b, held) in &plan {
            let entries: Vec<(usize, Option<&Arc<Page>>)> =
                held.iter().map(|&i| (i, None)).collect();
            ops.push((b.raw(), self.binds_at(&entries)?));
        }
        self.bind(&ops)?;
        let mut old = Vec::with_capacity(n);
        for (b, held) in plan {
            let mut t = lock(table(b)?)?;
            for i in held {
                old.push(t[i].take());
            }
        }
        drop(old);
        Ok(n)
    }

    /// How many of `b`'s pages in `first .. first + count` another range shares.
    pub fn shared_pages(&self, b: &Buffer, first: usize, count: usize) -> Result<usize> {
        let t = lock(table(b)?)?;
        if first + count > t.len() {
            return Err(range_err(b, first, count, t.len()));
        }
        Ok(t[first..first + count]
            .iter()
            .filter(|p| p.as_ref().is_some_and(|p| Arc::strong_count(p) > 1))
            .count())
    }

    /// How many of `b`'s pages in `first .. first + count` are bound.
    pub fn bound_pages(&self, b: &Buffer, first: usize, count: usize) -> Result<usize> {
        let t = lock(table(b)?)?;
        if first + count > t.len() {
            return Err(range_err(b, first, count, t.len()));
        }
        Ok(t[first..first + count]
            .iter()
            .filter(|p| p.is_some())
            .count())
    }
}
