//! Paged KV tensors ([`Backend::alloc_kv_paged`]): sparse, aliased device buffers whose pages a
//! KV block shared by several slots occupies once, read in place by every kernel.

use vkllm_vk::{Buffer, PageShare};

use super::{Slot, VulkanBackend};
use crate::backend::{KvPageShare, KvType, Tensor};
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
    ) -> Result<Tensor, ModelError> {
        let bytes = dtype.bytes(len as u64).next_multiple_of(4).max(4);
        let buf = self.dev.create_paged_buffer("kv cache (paged)", bytes)?;
        let t = self.push(Slot::Buf { buf, host: None });
        self.record(|me, r| Ok(r.fill(me.all(t), 0)?))?;
        Ok(t)
    }

    pub(super) fn kv_share_pages_(&mut self, shares: &[KvPageShare]) -> Result<(), ModelError> {
        // The work recorded so far runs with the pages as they were.
        self.flush()?;
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

    pub(super) fn kv_own_pages_(
        &mut self,
        t: Tensor,
        first: usize,
        count: usize,
        keep: bool,
    ) -> Result<usize, ModelError> {
        let shared = self.dev.shared_pages(self.paged_buf(t)?, first, count)?;
        if shared == 0 {
            return Ok(0);
        }
        self.flush()?;
        Ok(self.dev.own_pages(self.paged_buf(t)?, first, count, keep)?)
    }
}
