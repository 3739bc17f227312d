//! Paged KV layers ([`KvSharing::InPlace`]): a full-attention layer's K and V tensors are paged
//! ([`Backend::alloc_kv_paged`]), and a slot given another's prefix takes that slot's whole
//! blocks in place (the same pages, one copy in memory, read by both slots' attention) and
//! copies only the rows past the last whole block. Before a slot writes rows, the blocks it
//! writes become its own again (copy-on-write; `own_from`). Sliding-window rings are copied.

use crate::backend::{Backend, KvPageOp, KvPageOwn, KvPageShare, KvType, KvTypes, Tensor};
use crate::error::ModelError;
use crate::kv_cache::{KvCache, KvLayer, KvSharing};

/// The largest block worth paging: a prefix shorter than a block shares nothing.
const MAX_BLOCK: usize = 1024;

/// KV page ops and row copies gathered over a cache's layers and run as one op of each kind
/// ([`KvCache::copy_prefix`], [`KvCache::copy_layer_rows_into`]): shares, then copy-on-write,
/// then binds (on demand), then the copies of rows past the shared blocks. Each page op waits
/// for the GPU to be idle and re-maps pages, so one per kind beats one per layer.
#[derive(Default)]
pub struct KvPagePlan {
    shares: Vec<KvPageShare>,
    pub(crate) owns: Vec<KvPageOwn>,
    binds: Vec<(Tensor, usize, usize)>,
    /// (source, offset, destination, offset, values, type) of each copy.
    copies: Vec<(Tensor, usize, Tensor, usize, usize, KvType)>,
    /// Rows shared in place (most over the layers).
    shared: usize,
}

impl KvPagePlan {
    /// Runs the ops; returns the rows shared in place (most over the layers).
    pub fn run<B: Backend>(self, b: &mut B) -> Result<usize, ModelError> {
        if !self.shares.is_empty() {
            b.kv_pages(KvPageOp::Share(&self.shares))?;
        }
        if !self.owns.is_empty() {
            b.kv_pages(KvPageOp::Own(&self.owns))?;
        }
        if !self.binds.is_empty() {
            b.kv_pages(KvPageOp::Bind(&self.binds))?;
        }
        for (src, so, dst, d_o, len, ty) in self.copies {
            b.copy_kv(src, so, dst, d_o, len, ty)?;
        }
        Ok(self.shared)
    }

    /// Rows `r_src..r_src + n` of layer `l` of `src` into rows `r_dst..` of layer `d` of `dst`
    /// (global rows), as copies after the page ops.
    fn copy_rows(
        &mut self,
        src: &KvCache,
        l: &KvLayer,
        r_src: usize,
        d: &KvLayer,
        r_dst: usize,
        n: usize,
    ) {
        if n == 0 {
            return;
        }
        let kv_dim = src.kv_dim;
        let (so, d_o, len) = (r_src * kv_dim, r_dst * kv_dim, n * kv_dim);
        self.copies.push((l.k, so, d.k, d_o, len, src.dtype));
        self.copies.push((l.v, so, d.v, d_o, len, src.v_dtype));
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

pub(crate) fn lcm(a: usize, b: usize) -> usize {
    a / gcd(a as u64, b as u64) as usize * b
}

/// Rows per shared block and bytes per page for rows of `kv_dim` values of `types` on `b`: the
/// fewest rows whose keys and values are whole pages each; `(0, 0)` (rows are copied) where the
/// backend has no paged KV tensors or the block would exceed [`MAX_BLOCK`] or `capacity`.
pub(crate) fn block_rows<B: Backend>(
    b: &B,
    kv_dim: usize,
    capacity: usize,
    types: KvTypes,
) -> (usize, u64) {
    match b.kv_page_bytes().filter(|&p| p > 0) {
        Some(page) => match block_for(page, kv_dim, capacity, types) {
            0 => (0, 0),
            block => (block, page),
        },
        None => (0, 0),
    }
}

/// [`block_rows`]'s block for pages of `page` bytes (0: none).
fn block_for(page: u64, kv_dim: usize, capacity: usize, types: KvTypes) -> usize {
    let rows_for = |t: KvType| (page / gcd(page, t.bytes(kv_dim as u64))) as usize;
    let block = lcm(rows_for(types.k), rows_for(types.v));
    if block > MAX_BLOCK || block > capacity {
        0
    } else {
        block
    }
}

impl KvCache {
    /// How prefixes are given to other slots.
    pub fn sharing(&self) -> KvSharing {
        match (self.block > 0, self.on_demand) {
            (true, true) => KvSharing::OnDemand,
            (true, false) => KvSharing::InPlace,
            _ => KvSharing::Copy,
        }
    }

    /// Binds memory (zeroed) to slot `slot`'s blocks holding rows `r0..r1` of every paged layer
    /// where they have none ([`KvSharing::OnDemand`]; nothing to do otherwise); fails with
    /// [`ModelError::KvPagesFull`], binding nothing, past the backend's page limit. Returns the
    /// pages bound.
    pub fn bind_rows<B: Backend>(
        &self,
        b: &mut B,
        slot: usize,
        r0: usize,
        r1: usize,
    ) -> Result<usize, ModelError> {
        let ranges = self.slot_ranges(slot, r0.div_euclid(self.block.max(1)), r1, true);
        if ranges.is_empty() {
            return Ok(0);
        }
        b.kv_pages(KvPageOp::Bind(&ranges))
    }

    /// Unbinds slot `slot`'s blocks from the first wholly at or past row `from` on (their memory
    /// returns to the pool unless another slot or the store shares it); on demand only.
    /// Returns the pages unbound.
    pub fn release_rows<B: Backend>(
        &self,
        b: &mut B,
        slot: usize,
        from: usize,
    ) -> Result<usize, ModelError> {
        let first = from.div_ceil(self.block.max(1));
        let ranges = self.slot_ranges(slot, first, usize::MAX, false);
        if ranges.is_empty() {
            return Ok(0);
        }
        b.kv_pages(KvPageOp::Release(&ranges))
    }

    /// The page ranges of slot `slot`'s blocks `first_block..` up to row `r1` (`round_up`: the
    /// block holding row `r1 - 1` included) in every paged layer; none unless on demand.
    fn slot_ranges(
        &self,
        slot: usize,
        first_block: usize,
        r1: usize,
        round_up: bool,
    ) -> Vec<(Tensor, usize, usize)> {
        if !self.on_demand || slot >= self.slots {
            return Vec::new();
        }
        let bl = self.block;
        let mut out = Vec::new();
        for l in self.layers.iter().filter(|l| l.paged) {
            let blocks = l.stride / bl;
            let last = match round_up {
                true => r1.div_ceil(bl),
                false => r1 / bl,
            }
            .min(blocks);
            if first_block >= last {
                continue;
            }
            let base = slot * l.stride;
            for (t, p0, np) in self.pages(l, base + first_block * bl, base + last * bl) {
                out.push((t, p0, np));
            }
        }
        out
    }

    /// Layer `l`'s K and V pages holding global rows `r0..r1` (whole blocks): (tensor, first
    /// page, pages).
    fn pages(&self, l: &KvLayer, r0: usize, r1: usize) -> [(Tensor, usize, usize); 2] {
        let at = |t: KvType, r: usize| (t.bytes((r * self.kv_dim) as u64) / self.page) as usize;
        let p = |t: Tensor, ty: KvType| (t, at(ty, r0), at(ty, r1) - at(ty, r0));
        [p(l.k, self.dtype), p(l.v, self.v_dtype)]
    }

    /// Global rows `r_src..r_src + n` of layer `l` into rows `r_dst..` of layer `d` of `dst`,
    /// gathered into `plan`: the whole blocks shared where both layers page alike, the blocks
    /// of the rest made `dst`'s own (and bound, on demand) and those rows copied. Returns the
    /// rows shared.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan_rows(
        &self,
        plan: &mut KvPagePlan,
        l: &KvLayer,
        r_src: usize,
        dst: &KvCache,
        d: &KvLayer,
        r_dst: usize,
        n: usize,
    ) -> usize {
        let full = self.share_plan(l, r_src, dst, d, r_dst, n, &mut plan.shares);
        plan.shared = plan.shared.max(full);
        dst.own_ranges(d, r_dst + full, r_dst + n, &mut plan.owns);
        dst.plan_binds(d, r_dst + full, r_dst + n, plan);
        plan.copy_rows(self, l, r_src + full, d, r_dst + full, n - full);
        full
    }

    /// On demand: binds of global rows `r0..r1` (whole blocks) of paged layer `l` into `plan`.
    fn plan_binds(&self, l: &KvLayer, r0: usize, r1: usize, plan: &mut KvPagePlan) {
        if self.on_demand && l.paged && r0 < r1 {
            let bl = self.block;
            plan.binds
                .extend(self.pages(l, r0 / bl * bl, r1.div_ceil(bl) * bl));
        }
    }

    /// The shares giving global rows `r_src..` of layer `l` to rows `r_dst..` of layer `d` of
    /// `dst` in place, as many whole blocks of the `n` rows as both layers page alike (both
    /// starts on a block), appended to `out`; returns the rows shared.
    #[allow(clippy::too_many_arguments)]
    fn share_plan(
        &self,
        l: &KvLayer,
        r_src: usize,
        dst: &KvCache,
        d: &KvLayer,
        r_dst: usize,
        n: usize,
        out: &mut Vec<KvPageShare>,
    ) -> usize {
        let alike = l.paged
            && d.paged
            && self.block == dst.block
            && self.page == dst.page
            && self.kv_dim == dst.kv_dim
            && (self.dtype, self.v_dtype) == (dst.dtype, dst.v_dtype)
            && r_src.is_multiple_of(self.block)
            && r_dst.is_multiple_of(self.block);
        let full = if alike { n / dst.block * dst.block } else { 0 };
        if full > 0 {
            let src = self.pages(l, r_src, r_src + full);
            let to = dst.pages(d, r_dst, r_dst + full);
            out.extend(src.iter().zip(&to).map(|(s, t)| KvPageShare {
                src: s.0,
                src_page: s.1,
                dst: t.0,
                dst_page: t.1,
                count: t.2,
            }));
        }
        full
    }

    /// Before slot `slot` writes its rows from `row` on (a prompt keeping its first `row`
    /// positions): the paged layers' blocks from the one holding `row` become the slot's own
    /// (that block with its rows before `row`). Nothing to do for copied layers. Returns the
    /// pages that were shared and are now copies of the slot's own.
    pub fn own_from<B: Backend>(
        &self,
        b: &mut B,
        slot: usize,
        row: usize,
    ) -> Result<usize, ModelError> {
        let mut ranges = Vec::new();
        for l in &self.layers {
            let base = slot * l.stride;
            self.own_ranges(l, base + row.min(l.stride), base + l.stride, &mut ranges);
        }
        if ranges.is_empty() {
            return Ok(0);
        }
        b.kv_pages(KvPageOp::Own(&ranges))
    }

    /// The ranges making global rows `r0..r1` of layer `l` private before they are written,
    /// appended to `out`: blocks wholly inside without their contents, partly covered ones with
    /// them (unbound blocks stay unbound).
    pub(crate) fn own_ranges(&self, l: &KvLayer, r0: usize, r1: usize, out: &mut Vec<KvPageOwn>) {
        if !l.paged || r0 >= r1 {
            return;
        }
        let bl = self.block;
        let (first, last) = (r0 / bl, r1.div_ceil(bl));
        let (whole0, whole1) = (r0.div_ceil(bl), r1 / bl);
        let runs = if whole0 < whole1 {
            vec![
                (first, whole0, true),
                (whole0, whole1, false),
                (whole1, last, true),
            ]
        } else {
            vec![(first, last, true)]
        };
        for (b0, b1, keep) in runs {
            if b0 >= b1 {
                continue;
            }
            for (t, first, count) in self.pages(l, b0 * bl, b1 * bl) {
                out.push(KvPageOwn {
                    t,
                    first,
                    count,
                    keep,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_the_fewest_rows_of_whole_pages() {
        let f16 = KvTypes::new(KvType::F16, KvType::F16).unwrap();
        let q8 = KvTypes::new(KvType::Q8_0, KvType::Q8_0).unwrap();
        let mixed = KvTypes::new(KvType::Q8_0, KvType::Q4_0).unwrap();
        // Llama-3.1-8B (8 KV heads of 128): 2 KiB f16 rows, 32 per 64 KiB page.
        assert_eq!(block_for(65536, 1024, 32768, f16), 32);
        // SmolLM2 (3 heads of 64): 384-byte rows; 512 rows are 3 pages.
        assert_eq!(block_for(65536, 192, 2048, f16), 512);
        assert_eq!(block_for(4096, 192, 2048, f16), 32);
        // q8_0: 68 bytes per 64 values, 1,088 per 8B row: 1,024 rows are 17 pages.
        assert_eq!(block_for(65536, 1024, 32768, q8), 1024);
        assert_eq!(block_for(65536, 1024, 32768, mixed), 1024);
        // Blocks past MAX_BLOCK or the context: nothing is paged.
        assert_eq!(block_for(65536, 1024, 512, q8), 0);
        assert_eq!(block_for(65536, 192 + 64, 1 << 20, q8), 0);
        assert_eq!((lcm(4, 6), lcm(32, 128), lcm(7, 1)), (12, 128, 7));
    }

    #[test]
    fn the_cpu_backend_pages_and_blocks_past_the_capacity_copy() {
        let mut b = crate::CpuBackend::new();
        let f16 = KvTypes::new(KvType::F16, KvType::F16).unwrap();
        // 64 f16 values: 128-byte rows, 32 per 4 KiB page.
        assert_eq!(block_rows(&b, 64, 256, f16), (32, 4096));
        let kv = KvCache::alloc_sharing(&mut b, &[None], (64, 256, 16, 2), f16, KvSharing::InPlace)
            .unwrap();
        assert_eq!((kv.block, kv.sharing()), (32, KvSharing::InPlace));
        assert!(kv.layers[0].paged);
        // A context shorter than a block: nothing is paged.
        let kv = KvCache::alloc_sharing(&mut b, &[None], (64, 16, 16, 2), f16, KvSharing::InPlace)
            .unwrap();
        assert_eq!((kv.block, kv.sharing()), (0, KvSharing::Copy));
        assert!(!kv.layers[0].paged);
    }
}
