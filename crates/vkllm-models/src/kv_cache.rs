//! The KV cache: per layer and slot, the keys and values of a sequence's positions. Sliding-window
//! layers keep only a ring of their window plus a prefill chunk (position `p` in row `p % ring`),
//! so their memory does not grow with the context; full-attention layers keep every position.

use crate::backend::{Backend, KeyCentre, KvRot, KvRows, KvType, KvTypes, KvView, Tensor};
use crate::error::ModelError;
use crate::kv_pages::KvPagePlan;

/// The KV caches of `slots` sequences, positions `0..capacity` each. Per layer and slot, a
/// full-attention layer keeps every position's keys and values; a sliding-window layer keeps a
/// ring of `ring` rows (its window plus a prefill chunk, so a chunk never overwrites keys its own
/// earlier queries still see), position `p` in row `p % ring`. Slot-major: slot `s` of layer `l`
/// owns rows `s * stride .. s * stride + min(capacity, ring)` of that layer's tensors.
#[derive(Clone, Debug)]
pub struct KvCache {
    pub capacity: usize,
    pub slots: usize,
    /// The K cache's type.
    pub dtype: KvType,
    /// The V cache's type.
    pub v_dtype: KvType,
    /// The parts whose units are stored rotated (the model sets it: `KvRot::for_types`).
    pub rot: KvRot,
    /// Per layer, the keys' centring (quantized K caches; empty otherwise).
    pub centre: Vec<Option<KeyCentre>>,
    pub layers: Vec<KvLayer>,
    /// Rows per block that slots share in place (paged layers, `kv_pages.rs`); 0: rows are
    /// copied.
    pub block: usize,
    /// Values per row (keys or values of one position).
    pub kv_dim: usize,
    /// Bytes per page of the paged layers (0: none).
    pub(crate) page: u64,
    /// The paged layers' pages are bound as rows are needed ([`KvCache::bind_rows`]).
    pub on_demand: bool,
}

/// How a KV cache gives one slot the prefix another holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvSharing {
    /// Rows are copied (the reference).
    #[default]
    Copy,
    /// Whole blocks are shared in place (one copy in memory, read by both slots' attention)
    /// where the backend has paged KV tensors; rows past the last whole block are copied.
    InPlace,
    /// [`KvSharing::InPlace`], and a slot's blocks take memory only once bound
    /// ([`KvCache::bind_rows`]): device memory follows the positions in use, not slots x
    /// context.
    OnDemand,
}

/// One layer of a [`KvCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayer {
    pub k: Tensor,
    pub v: Tensor,
    /// Rows a slot keeps: position `p` is row `p % ring` (`ring >= capacity`: every position).
    pub ring: usize,
    /// Rows between slots: the slot's rows rounded up to a multiple of [`KV_ROW_ALIGN`], so every
    /// slot's region starts at a bindable buffer offset.
    pub stride: usize,
    /// The layer's sliding window, if any.
    pub window: Option<usize>,
    /// Its tensors are paged: whole blocks of [`KvCache::block`] rows may be shared in place.
    pub paged: bool,
}

/// Slot regions of a KV cache start at multiples of this many rows.
pub const KV_ROW_ALIGN: usize = 128;

fn align_rows(rows: usize) -> usize {
    rows.div_ceil(KV_ROW_ALIGN) * KV_ROW_ALIGN
}

impl KvLayer {
    /// The rows a layer with `window` keeps per slot for `capacity` positions and prefill
    /// chunks of up to `chunk` tokens: `window + chunk` rounded up to [`KV_ROW_ALIGN`] when that
    /// is less than `capacity` (the ring wraps), else `capacity` (no wrap).
    pub fn ring_for(window: Option<usize>, capacity: usize, chunk: usize) -> usize {
        match window {
            Some(w) if align_rows(w + chunk.max(1)) < capacity => align_rows(w + chunk.max(1)),
            _ => capacity,
        }
    }

    /// Whether positions wrap around the ring (a sliding layer shorter than the context).
    pub fn wraps(&self, capacity: usize) -> bool {
        self.ring < capacity
    }
}

impl KvCache {
    /// Allocates the caches of a model whose layers have `windows`, `kv_dim` wide, for `slots`
    /// sequences of `capacity` positions and prefill chunks of up to `chunk` tokens; fails with
    /// [`ModelError::OutOfMemory`] when the device would be left without room for the
    /// activations and the driver (1/16 of it).
    #[allow(clippy::too_many_arguments)]
    pub fn alloc<B: Backend>(
        b: &mut B,
        windows: &[Option<usize>],
        kv_dim: usize,
        capacity: usize,
        chunk: usize,
        slots: usize,
        types: impl Into<KvTypes>,
    ) -> Result<KvCache, ModelError> {
        let shape = (kv_dim, capacity, chunk, slots);
        Self::alloc_sharing(b, windows, shape, types.into(), KvSharing::Copy)
    }

    /// [`KvCache::alloc`] for `(kv_dim, capacity, chunk, slots)`, with prefixes shared as
    /// `sharing` says: [`KvSharing::InPlace`] and [`KvSharing::OnDemand`] page the layers that
    /// keep every position when the backend can (else they copy, as [`KvSharing::Copy`]);
    /// on demand, those layers hold no memory until [`KvCache::bind_rows`] (the memory check
    /// counts only the other layers).
    pub fn alloc_sharing<B: Backend>(
        b: &mut B,
        windows: &[Option<usize>],
        (kv_dim, capacity, chunk, slots): (usize, usize, usize, usize),
        types: KvTypes,
        sharing: KvSharing,
    ) -> Result<KvCache, ModelError> {
        if capacity == 0 || slots == 0 {
            return Err(ModelError::Config {
                field: "kv cache".into(),
                msg: format!("capacity {capacity} and slots {slots} must be > 0"),
            });
        }
        let (block, page) = match sharing {
            KvSharing::InPlace | KvSharing::OnDemand => {
                crate::kv_pages::block_rows(b, kv_dim, capacity, types)
            }
            KvSharing::Copy => (0, 0),
        };
        let on_demand = block > 0 && sharing == KvSharing::OnDemand;
        let resident: Vec<Option<usize>> = match on_demand {
            // The paged layers (the full ones) take memory as they fill.
            true => windows
                .iter()
                .filter(|&&w| KvLayer::ring_for(w, capacity, chunk) < capacity)
                .copied()
                .collect(),
            false => windows.to_vec(),
        };
        let need = KvCache::bytes_for(&resident, kv_dim, capacity, chunk, slots, types);
        if let Some((free, total)) = b.memory_free()
            && need > free.saturating_sub(total / 16)
        {
            let sliding = windows.iter().filter(|w| w.is_some()).count();
            return Err(ModelError::OutOfMemory {
                what: format!(
                    "KV cache ({slots} x {capacity} positions, {}, {} layers, {sliding} of them \
                     sliding-window rings)",
                    types.name(),
                    windows.len()
                ),
                need,
                available: free.saturating_sub(total / 16),
                total,
            });
        }
        let layers = windows
            .iter()
            .map(|&window| {
                let ring = KvLayer::ring_for(window, capacity, chunk);
                let paged = block > 0 && ring >= capacity;
                let stride = if paged {
                    ring.next_multiple_of(crate::kv_pages::lcm(block, KV_ROW_ALIGN))
                } else {
                    align_rows(ring)
                };
                let len = slots * stride * kv_dim;
                let (k, v) = if paged {
                    (
                        b.alloc_kv_paged(len, types.k, !on_demand)?,
                        b.alloc_kv_paged(len, types.v, !on_demand)?,
                    )
                } else {
                    (b.alloc_kv(len, types.k)?, b.alloc_kv(len, types.v)?)
                };
                Ok(KvLayer {
                    k,
                    v,
                    ring,
                    stride,
                    window,
                    paged,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(KvCache {
            capacity,
            slots,
            dtype: types.k,
            v_dtype: types.v,
            rot: KvRot::NONE,
            centre: Vec::new(),
            layers,
            block,
            kv_dim,
            page,
            on_demand,
        })
    }

    /// Layer `l`'s caches, addressing `rows`.
    pub fn view(&self, l: usize, rows: KvRows) -> KvView {
        let layer = self.layers[l];
        KvView {
            k: layer.k,
            v: layer.v,
            capacity: self.capacity,
            stride: layer.stride,
            ring: layer.ring,
            slots: self.slots,
            dtype: self.dtype,
            v_dtype: self.v_dtype,
            rot: self.rot,
            centre: self.centre.get(l).copied().flatten(),
            rows,
        }
    }

    /// Bytes of keys and values for a model whose layers have `windows` (one per layer), each
    /// `kv_dim` wide, for `slots` sequences of `capacity` positions and prefill chunks of up to
    /// `chunk` tokens: sliding-window layers count only their ring ([`KvLayer::ring_for`]).
    pub fn bytes_for(
        windows: &[Option<usize>],
        kv_dim: usize,
        capacity: usize,
        chunk: usize,
        slots: usize,
        types: impl Into<KvTypes>,
    ) -> u64 {
        let types = types.into();
        windows
            .iter()
            .map(|&w| {
                let stride = align_rows(KvLayer::ring_for(w, capacity, chunk));
                let values = (slots * stride * kv_dim) as u64;
                types.k.bytes(values) + types.v.bytes(values)
            })
            .sum()
    }

    /// Bytes of one slot's region over every layer (K and V; `kv_dim` values a row).
    pub fn slot_bytes(&self, kv_dim: usize) -> u64 {
        self.layers
            .iter()
            .map(|l| {
                let values = (l.stride * kv_dim) as u64;
                self.dtype.bytes(values) + self.v_dtype.bytes(values)
            })
            .sum()
    }

    /// Copies slot `from`'s first `rows` positions into slot `to` of `dst` (this cache or another
    /// of the same shape), so `to` continues from position `rows` as
    /// if it had computed them: full-attention layers copy those rows, sliding-window layers
    /// their whole ring as `from` wrote it (`written`: `from`'s furthest position, see
    /// [`KvCache::reusable`]; check `rows` with it first). A device copy, ordered with the
    /// slots' other work; paged layers ([`KvSharing::InPlace`]) share their whole blocks in
    /// place instead. Returns the rows shared in place (most over the layers; 0 when copied).
    #[allow(clippy::too_many_arguments)]
    pub fn copy_prefix<B: Backend>(
        &self,
        b: &mut B,
        from: usize,
        dst: &KvCache,
        to: usize,
        rows: usize,
        written: usize,
    ) -> Result<usize, ModelError> {
        let kv_dim = self.kv_dim;
        let same_shape = dst.layers.len() == self.layers.len()
            && dst.kv_dim == kv_dim
            && dst.dtype == self.dtype
            && dst.capacity == self.capacity
            && dst
                .layers
                .iter()
                .zip(&self.layers)
                .all(|(a, b)| a.ring == b.ring);
        if !same_shape || from >= self.slots || to >= dst.slots || rows > self.capacity {
            return Err(ModelError::Config {
                field: "kv copy".into(),
                msg: format!(
                    "slot {from} of {} -> slot {to} of {} ({rows} rows of {} positions; same \
                     layers and type needed)",
                    self.slots, dst.slots, self.capacity
                ),
            });
        }
        // Paged layers: every layer's whole blocks shared in place, the slot's other blocks
        // its own again, in one op each (each op waits for the GPU and re-maps pages).
        let mut plan = KvPagePlan::default();
        for ((l, d), n) in self
            .layers
            .iter()
            .zip(&dst.layers)
            .zip(self.rows_kept(rows, written))
        {
            if from == to && l.k == d.k {
                continue;
            }
            let r_dst = to * d.stride;
            self.plan_rows(&mut plan, l, from * l.stride, dst, d, r_dst, n);
            // Paged: every row of `to` past the prefix is computed anew, so its blocks too
            // become its own.
            dst.own_ranges(d, r_dst + n, r_dst + d.stride, &mut plan.owns);
        }
        plan.run(b)
    }

    /// Per layer, the rows (from row 0) that hold a slot's first `rows` positions when
    /// forwards wrote it up to `written`: `rows` for full-attention layers, a sliding layer's
    /// ring as far as it was written (what [`KvCache::copy_prefix`] copies).
    pub fn rows_kept(&self, rows: usize, written: usize) -> Vec<usize> {
        self.layers
            .iter()
            .map(|l| {
                if l.wraps(self.capacity) {
                    l.ring.min(written.max(rows))
                } else {
                    rows
                }
            })
            .collect()
    }

    /// Copies rows `src_row..src_row + n` of layer `l` of slot `from` into rows `dst_row..` of
    /// layer `l` of slot `to` of `dst` (keys and values as stored, no ring arithmetic): the
    /// prefix store's block copies. Layers paged alike share their whole blocks in place
    /// instead; returns the rows shared. Both caches need the layer and the same types; the rows
    /// may run on into the next slots' regions (consecutive blocks of a pool), not past the
    /// last.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_layer_rows<B: Backend>(
        &self,
        b: &mut B,
        l: usize,
        from: usize,
        src_row: usize,
        dst: &KvCache,
        to: usize,
        dst_row: usize,
        n: usize,
    ) -> Result<usize, ModelError> {
        let mut plan = KvPagePlan::default();
        self.copy_layer_rows_into(&mut plan, l, from, src_row, dst, to, dst_row, n)?;
        plan.run(b)
    }

    /// [`KvCache::copy_layer_rows`] gathered into `plan` (run it to carry the copy out, after
    /// the other layers' and blocks': one page op of each kind for all of them). Returns the
    /// rows to be shared in place.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_layer_rows_into(
        &self,
        plan: &mut KvPagePlan,
        l: usize,
        from: usize,
        src_row: usize,
        dst: &KvCache,
        to: usize,
        dst_row: usize,
        n: usize,
    ) -> Result<usize, ModelError> {
        let kv_dim = self.kv_dim;
        let (Some(s), Some(d)) = (self.layers.get(l), dst.layers.get(l)) else {
            return Err(ModelError::Config {
                field: "kv copy".into(),
                msg: format!(
                    "layer {l} of {} and {}",
                    self.layers.len(),
                    dst.layers.len()
                ),
            });
        };
        let fits = from * s.stride + src_row + n <= self.slots * s.stride
            && to * d.stride + dst_row + n <= dst.slots * d.stride
            && self.dtype == dst.dtype
            && self.v_dtype == dst.v_dtype
            && dst.kv_dim == kv_dim;
        if !fits {
            return Err(ModelError::Config {
                field: "kv copy".into(),
                msg: format!(
                    "layer {l}: rows {src_row}+{n} from slot {from} of {} ({} rows each) -> row \
                     {dst_row} of slot {to} of {} ({} rows each), same types and widths needed",
                    self.slots, s.stride, dst.slots, d.stride
                ),
            });
        }
        if n == 0 {
            return Ok(0);
        }
        // Paged alike: whole blocks shared in place; the rest copied into private pages.
        let (r_src, r_dst) = (from * s.stride + src_row, to * d.stride + dst_row);
        Ok(self.plan_rows(plan, s, r_src, dst, d, r_dst, n))
    }

    /// How many of the first `common` cached positions of a slot a new forward may keep, when
    /// forwards wrote that slot's positions up to `written` (exclusive: the furthest any forward
    /// reached since position 0 was last computed). All `common` when every sliding layer still
    /// holds the keys a query at `common` sees (its `window - 1` predecessors), else 0: a
    /// sliding layer's overwritten keys cannot be rebuilt from a later start, since every
    /// position's keys depend on all earlier positions through the layers below, so the slot
    /// is recomputed from position 0 (which also rewrites the full layers, identically).
    pub fn reusable(&self, written: usize, common: usize) -> usize {
        let kept = self.layers.iter().all(|l| match l.window {
            Some(w) if common > 0 && l.wraps(self.capacity) => {
                (common + 1).saturating_sub(w) >= written.saturating_sub(l.ring)
            }
            _ => true,
        });
        if kept { common } else { 0 }
    }

    /// Checks that forwards of up to `chunk` tokens fit every ring (a cache made for a smaller
    /// chunk would let a chunk overwrite keys its own queries see).
    pub(crate) fn check_chunk(&self, chunk: usize) -> Result<(), ModelError> {
        for (i, l) in self.layers.iter().enumerate() {
            if let Some(w) = l.window
                && l.wraps(self.capacity)
                && w + chunk > l.ring
            {
                return Err(ModelError::Config {
                    field: "kv cache".into(),
                    msg: format!(
                        "layer {i}: a ring of {} rows cannot hold window {w} plus a {chunk}-token \
                         chunk (make the cache with this model)",
                        l.ring
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuBackend;

    #[test]
    fn ring_rows() {
        // window + chunk rounded up to 128 rows while that is below the capacity.
        assert_eq!(KvLayer::ring_for(Some(16), 1000, 48), 128);
        assert_eq!(KvLayer::ring_for(Some(512), 32768, 128), 640);
        assert_eq!(KvLayer::ring_for(Some(200), 1000, 100), 384);
        // No wrap: the ring would not be smaller than the context.
        assert_eq!(KvLayer::ring_for(Some(900), 1000, 100), 1000);
        assert_eq!(KvLayer::ring_for(Some(16), 100, 48), 100);
        assert_eq!(KvLayer::ring_for(None, 1000, 48), 1000);
    }

    #[test]
    fn bytes_for_mixed_layers() {
        // Two sliding layers (window 16, chunk 48: 128-row rings) and one full layer (1000
        // positions: 1024 rows), kv_dim 8, 2 slots, f16: K and V of
        // 2 x (2 * 128 * 8 * 2) + (2 * 1024 * 8 * 2) bytes = 2 x 8192 + 65536.
        let w = [Some(16), None, Some(16)];
        assert_eq!(
            KvCache::bytes_for(&w, 8, 1000, 48, 2, KvType::F16),
            2 * 8192 + 65536
        );
        // Without windows every layer holds the context.
        assert_eq!(
            KvCache::bytes_for(&[None; 3], 8, 1000, 48, 2, KvType::F16),
            3 * 65536
        );
        // The allocation matches the accounting.
        let mut b = CpuBackend::new();
        let kv = KvCache::alloc(&mut b, &w, 8, 1000, 48, 2, KvType::F16).unwrap();
        let rows: Vec<(usize, usize)> = kv.layers.iter().map(|l| (l.ring, l.stride)).collect();
        assert_eq!(rows, [(128, 128), (1000, 1024), (128, 128)]);
    }

    #[test]
    fn gemma3_270m_at_32k() {
        // Gemma 3 270M: 18 layers, every 6th full (5, 11, 17), window 512, one KV head of 256,
        // chunk 128, f32: a sliding layer keeps 640 rows, a full one 32768.
        let w: Vec<Option<usize>> = (0..18)
            .map(|i| if (i + 1) % 6 == 0 { None } else { Some(512) })
            .collect();
        let ring = KvCache::bytes_for(&w, 256, 32768, 128, 1, KvType::F32);
        let full = KvCache::bytes_for(&[None; 18], 256, 32768, 128, 1, KvType::F32);
        assert_eq!(full, 18 * 2 * 32768 * 256 * 4); // 1152 MiB
        assert_eq!(ring, 15 * 2 * 640 * 256 * 4 + 3 * 2 * 32768 * 256 * 4); // 210.75 MiB
    }

    #[test]
    fn reusable_prefix() {
        let mut b = CpuBackend::new();
        // Window 64, chunk 64: a 128-row ring in a 1000-position cache.
        let kv = KvCache::alloc(&mut b, &[None, Some(64)], 4, 1000, 64, 1, KvType::F32).unwrap();
        assert_eq!(kv.layers[1].ring, 128);
        // Written up to 300: the ring holds positions 172..300. A query at `common` sees
        // common - 63..=common, so common >= 235 keeps its prefix, below that recomputes.
        assert_eq!(kv.reusable(300, 250), 250);
        assert_eq!(kv.reusable(300, 235), 235);
        assert_eq!(kv.reusable(300, 234), 0);
        assert_eq!(kv.reusable(300, 100), 0);
        // Nothing has wrapped yet: any prefix is kept.
        assert_eq!(kv.reusable(128, 10), 10);
        assert_eq!(kv.reusable(300, 0), 0);
        // Full layers only: any prefix is kept.
        let full = KvCache::alloc(&mut b, &[None, None], 4, 1000, 64, 1, KvType::F32).unwrap();
        assert_eq!(full.reusable(900, 3), 3);
    }

    #[test]
    fn layer_rows_run_on_into_the_next_slots_not_past_the_last() {
        let mut b = CpuBackend::new();
        // One slot of 200 positions (256 rows), kv_dim 4; a pool of 3 slots of 128 rows.
        let kv = KvCache::alloc(&mut b, &[None], 4, 200, 1, 1, KvType::F32).unwrap();
        let pool = KvCache::alloc(&mut b, &[None], 4, 128, 1, 3, KvType::F32).unwrap();
        let data: Vec<f32> = (0..256 * 4).map(|i| i as f32).collect();
        let t = b.upload_f32(&data).unwrap();
        b.copy(t, 0, kv.layers[0].k, 0, data.len()).unwrap();
        b.copy(t, 0, kv.layers[0].v, 0, data.len()).unwrap();
        // Rows 10..210 into pool slot 1 onwards: 128 rows there, 72 in slot 2.
        kv.copy_layer_rows(&mut b, 0, 0, 10, &pool, 1, 0, 200)
            .unwrap();
        for t in [pool.layers[0].k, pool.layers[0].v] {
            let mut out = vec![0f32; 200 * 4];
            b.read_f32(t, 128 * 4, &mut out).unwrap();
            assert_eq!(out, data[40..840]);
        }
        // Past the pool's last slot, or a layer it lacks: typed errors, nothing copied.
        assert!(
            kv.copy_layer_rows(&mut b, 0, 0, 0, &pool, 2, 0, 129)
                .is_err()
        );
        assert!(kv.copy_layer_rows(&mut b, 1, 0, 0, &pool, 0, 0, 1).is_err());
        assert_eq!(kv.rows_kept(50, 90), vec![50]);
    }
}
