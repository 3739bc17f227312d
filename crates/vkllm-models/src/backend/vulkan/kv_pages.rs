//! Paged KV tensors ([`Backend::alloc_kv_paged`]): sparse, aliased device buffers whose pages a
//! KV block shared by several slots occupies once, read in place by every kernel, and bound on
//! demand where the cache asks ([`KvPageOp`]).
//!
//! [`Backend::alloc_kv_paged`]: crate::backend::Backend::alloc_kv_paged

use vkllm_vk::{Buffer, PageOwn, PageShare};

use super::{Slot, VulkanBackend};
use crate::backend::{KvPageOp, KvPageOwn, KvPageShare, KvType, Tensor};
use crate::error::ModelError;

impl VulkanBackend {
    fn paged_buf(&self, t: Tensor) -> Result<&Buffer, ModelError> {
        match self.slots.get(t.index()) {
            Some(Slot::Buf { buf, .. }) if buf.page_count().is_some() => Ok(buf),
            _ => Err(ModelError::Config {
                field: "kv pages".into(),
                msg: format!("tensor {t:?} is not a paged KV tensor"),
            }),
        }
    }

    pub(super) fn kv_page_bytes_(&self) -> Option<u64> {
        self.dev.page_bytes()
    }

    pub(super) fn alloc_kv_paged_(
        &mut self,
        len: usize,
        dtype: KvType,
        resident: bool,
    ) -> Result<Tensor, ModelError> {
        let bytes = dtype.bytes(len as u64).next_multiple_of(4).max(4);
        if !resident {
            let buf = self
                .dev
                .create_paged_buffer_unbound("kv cache (paged)", bytes)?;
            return Ok(self.push(Slot::Buf { buf, host: None }));
        }
        let buf = self.dev.create_paged_buffer("kv cache (paged)", bytes)?;
        let t = self.push(Slot::Buf { buf, host: None });
        self.record(|me, r| Ok(r.fill(me.all(t), 0)?))?;
        Ok(t)
    }

    /// Caps the pages of paged KV tensors at those held now plus `bytes` more (`None`: device
    /// memory is the only cap); returns the pages allowed in all, and past it
    /// [`KvPageOp::Bind`] fails with [`ModelError::KvPagesFull`].
    pub fn set_kv_page_budget(&mut self, bytes: Option<u64>) -> Option<usize> {
        let page = self.dev.page_bytes()?;
        let p = self.dev.pool_pages();
        let limit = bytes.map(|b| p.total - p.free + (b / page) as usize);
        self.dev.set_page_limit(limit);
        limit
    }

    /// Device bytes the pages of paged KV tensors hold now (slots and the prefix store).
    pub(super) fn kv_paged_bytes_(&self) -> u64 {
        let p = self.dev.pool_pages();
        (p.total - p.free) as u64 * self.dev.page_bytes().unwrap_or(0)
    }

    pub(super) fn kv_pages_(&mut self, op: KvPageOp<'_>) -> Result<usize, ModelError> {
        match op {
            KvPageOp::Share(s) => self.share(s).map(|()| s.iter().map(|s| s.count).sum()),
            KvPageOp::Own(r) => self.own(r),
            KvPageOp::Bind(r) => self.bind_ranges(r),
            KvPageOp::Release(r) => self.release_ranges(r),
        }
    }

    /// Paged-KV ops that re-mapped pages so far: shares, copy-on-writes, binds and releases
    /// that found work (each waits for the GPU to be idle, so a join should take few).
    pub fn kv_page_ops(&self) -> u64 {
        self.kv_page_ops
    }

    fn share(&mut self, shares: &[KvPageShare]) -> Result<(), ModelError> {
        // The work recorded so far runs with the pages as they were.
        self.flush()?;
        self.kv_page_ops += 1;
        let mut ops = Vec::with_capacity(shares.len());
        for s in shares {
            ops.push(PageShare {
                src: self.paged_buf(s.src)?,
                src_page: s.src_page,
                dst: self.paged_buf(s.dst)?,
                dst_page: s.dst_page,
                count: s.count,
            });
        }
        Ok(self.dev.share_pages(&ops)?)
    }

    fn own(&mut self, ranges: &[KvPageOwn]) -> Result<usize, ModelError> {
        let mut want = Vec::with_capacity(ranges.len());
        for r in ranges {
            let b = self.paged_buf(r.t)?;
            if self.dev.shared_pages(b, r.first, r.count)? > 0 {
                want.push(*r);
            }
        }
        if want.is_empty() {
            return Ok(0);
        }
        self.flush()?;
        self.kv_page_ops += 1;
        let mut ops = Vec::with_capacity(want.len());
        for r in &want {
            ops.push(PageOwn {
                b: self.paged_buf(r.t)?,
                first: r.first,
                count: r.count,
                keep: r.keep,
            });
        }
        match self.dev.own_page_ranges(&ops) {
            Err(vkllm_vk::Error::PageBudget { want, free, limit }) => {
                Err(ModelError::KvPagesFull { want, free, limit })
            }
            r => Ok(r?),
        }
    }

    fn bind_ranges(&mut self, ranges: &[(Tensor, usize, usize)]) -> Result<usize, ModelError> {
        let mut want = Vec::with_capacity(ranges.len());
        for &(t, first, count) in ranges {
            if self.dev.bound_pages(self.paged_buf(t)?, first, count)? < count {
                want.push((t, first, count));
            }
        }
        if want.is_empty() {
            return Ok(0);
        }
        self.flush()?;
        self.kv_page_ops += 1;
        let mut bufs = Vec::with_capacity(want.len());
        for &(t, first, count) in &want {
            bufs.push((self.paged_buf(t)?, first, count));
        }
        match self.dev.bind_pages(&bufs) {
            Err(vkllm_vk::Error::PageBudget { want, free, limit }) => {
                Err(ModelError::KvPagesFull { want, free, limit })
            }
            // Device memory is the cap when no budget is set.
            Err(vkllm_vk::Error::OutOfDeviceMemory { .. }) => {
                let p = self.dev.pool_pages();
                let n = want.iter().map(|w| w.2).sum();
                Err(ModelError::KvPagesFull {
                    want: n,
                    free: p.free,
                    limit: p.total,
                })
            }
            r => Ok(r?),
        }
    }

    fn release_ranges(&mut self, ranges: &[(Tensor, usize, usize)]) -> Result<usize, ModelError> {
        self.flush()?;
        self.kv_page_ops += 1;
        let mut bufs = Vec::with_capacity(ranges.len());
        for &(t, first, count) in ranges {
            bufs.push((self.paged_buf(t)?, first, count));
        }
        Ok(self.dev.release_pages(&bufs)?)
    }
}
