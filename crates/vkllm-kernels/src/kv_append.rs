//! `shaders/kv_append.wgsl`: write new K and V rows into the cache (f32 or f16).

use crate::sources::KV_APPEND as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 256;

pub static KV_APPEND: KernelSpec = KernelSpec {
    name: "kv_append",
    file: "kv_append.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[
        rd("k_new"),
        rd("v_new"),
        rd("pos"),
        rw("k_cache"),
        rw("v_cache"),
    ],
    push_size: 20,
    exact_fp: false,
};

/// Element type of a KV cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    #[default]
    F32,
    /// Half the memory; keys and values are rounded to f16 (nearest even) when stored.
    F16,
}

impl KvType {
    /// The kernels' KV_DTYPE override value.
    pub fn code(self) -> f64 {
        match self {
            KvType::F32 => 0.0,
            KvType::F16 => 1.0,
        }
    }

    /// Bytes of `n` elements (`n` even for f16).
    pub fn bytes(self, n: u64) -> u64 {
        n * self.bytes_per_value() as u64
    }

    pub fn bytes_per_value(self) -> usize {
        match self {
            KvType::F32 => 4,
            KvType::F16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
        }
    }

    /// `f32` or `f16`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "f32" => Some(KvType::F32),
            "f16" => Some(KvType::F16),
            _ => None,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct KvAppendParams {
    pub n_tok: u32,
    pub kv_dim: u32,
    pub max_tok: u32,
    pub row_stride: u32,
    pub ring: u32,
}

/// `k_cache[pos[t]] = k_new[t]`, `v_cache[pos[t]] = v_new[t]` for `t < n_tok`.
pub struct KvAppend<B> {
    pub k_new: B,
    pub v_new: B,
    pub pos: B,
    pub k_cache: B,
    pub v_cache: B,
}

impl<B: KernelBuffer> KvAppend<B> {
    /// `kv_dim` = kv heads * head dim; the caches hold `max_tok` rows of it in `dtype`.
    pub fn dispatch(
        self,
        dtype: KvType,
        n_tok: usize,
        kv_dim: usize,
        max_tok: usize,
    ) -> Result<Dispatch<B>, Error> {
        self.dispatch_slots(dtype, n_tok, kv_dim, max_tok, 0)
    }

    /// Like [`KvAppend::dispatch`] for a slot-major cache: token `t` writes row
    /// `t * row_stride + pos[t]`, and positions `>= max_tok` (inactive slots) write nothing.
    /// `row_stride` 0 is the single-sequence case.
    pub fn dispatch_slots(
        self,
        dtype: KvType,
        n_tok: usize,
        kv_dim: usize,
        max_tok: usize,
        row_stride: usize,
    ) -> Result<Dispatch<B>, Error> {
        self.dispatch_ring(dtype, n_tok, kv_dim, max_tok, row_stride, max_tok)
    }

    /// Like [`KvAppend::dispatch_slots`] for caches that keep `ring` rows per slot: token `t`
    /// writes row `t * row_stride + pos[t] % ring` (a sliding-window layer's ring; `ring >=
    /// max_tok` is the full cache). With `row_stride` 0 the `n_tok` tokens (consecutive
    /// positions) must fit in the ring.
    pub fn dispatch_ring(
        self,
        dtype: KvType,
        n_tok: usize,
        kv_dim: usize,
        max_tok: usize,
        row_stride: usize,
        ring: usize,
    ) -> Result<Dispatch<B>, Error> {
        let k = &KV_APPEND;
        if ring == 0 {
            return Err(shape_err(k, "ring of 0 rows"));
        }
        let slot_rows = ring.min(max_tok);
        if row_stride == 0 && ring < max_tok && n_tok > ring {
            return Err(shape_err(
                k,
                format!("{n_tok} tokens overwrite each other in a ring of {ring} rows"),
            ));
        }
        if dtype == KvType::F16 && !kv_dim.is_multiple_of(2) {
            return Err(shape_err(
                k,
                format!("f16 cache needs an even kv_dim, got {kv_dim}"),
            ));
        }
        let src = 4 * (n_tok * kv_dim) as u64;
        need(k, "k_new", &self.k_new, src)?;
        need(k, "v_new", &self.v_new, src)?;
        need(k, "pos", &self.pos, 4 * n_tok as u64)?;
        if row_stride != 0 && row_stride < slot_rows {
            return Err(shape_err(
                k,
                format!("row_stride {row_stride} overlaps slots of {slot_rows} rows"),
            ));
        }
        let rows = n_tok.saturating_sub(1) * row_stride + slot_rows;
        let cache = dtype.bytes((rows * kv_dim) as u64);
        need(k, "k_cache", &self.k_cache, cache)?;
        need(k, "v_cache", &self.v_cache, cache)?;
        let words = match dtype {
            KvType::F32 => kv_dim,
            KvType::F16 => kv_dim / 2,
        };
        let p = KvAppendParams {
            n_tok: to_u32(k, "n_tok", n_tok)?,
            kv_dim: to_u32(k, "kv_dim", kv_dim)?,
            max_tok: to_u32(k, "max_tok", max_tok)?,
            row_stride: to_u32(k, "row_stride", row_stride)?,
            ring: to_u32(k, "ring", ring)?,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new()
                .set("WG", WG as f64)
                .set("KV_DTYPE", dtype.code()),
            vec![self.k_new, self.v_new, self.pos, self.k_cache, self.v_cache],
            &p,
            grid_for(k, ((n_tok * words) as u64).div_ceil(WG as u64))?,
        ))
    }
}
