//! `shaders/rope_kv_append.wgsl`: the fused attention input step (optional per-head q/k RMSNorm,
//! RoPE on q and k, KV-cache append of k and v) in one dispatch.

use crate::kv_append::KvType;
use crate::rope::RopeLayout;
use crate::sources::ROPE_KV_APPEND as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

/// Largest head dimension the kernel stages in workgroup memory.
pub const MAX_HEAD_DIM: usize = 512;

pub static ROPE_KV_APPEND: KernelSpec = KernelSpec {
    name: "rope_kv_append",
    file: "rope_kv_append.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[
        rd("q"),
        rd("k"),
        rd("v"),
        rd("q_norm"),
        rd("k_norm"),
        rd("pos"),
        rd("table"),
        rw("q_out"),
        rw("k_cache"),
        rw("v_cache"),
    ],
    push_size: 60,
    exact_fp: false,
    glsl: None,
};

/// The same step, one invocation per element pair (`pairs` entry point; [`RopeKvGrid::Pairs`]).
pub static ROPE_KV_APPEND_PAIRS: KernelSpec = KernelSpec {
    name: "rope_kv_append_pairs",
    entry: "pairs",
    ..ROPE_KV_APPEND
};

/// How a [`RopeKvAppend`] dispatch lays its work out (the results are the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeKvGrid {
    /// One 64-invocation workgroup per (head, `tokens` tokens), 1..=[`MAX_TOKENS_PER_GROUP`]:
    /// the head vectors staged in workgroup memory (decode; `tokens` > 1 puts several tokens'
    /// loads in flight at once).
    PerHead { tokens: usize },
    /// One invocation per element pair, whole heads per workgroup of up to 256 (prefill-sized
    /// batches: no staging except for a per-head norm or f16 NeoX keys).
    Pairs,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RopeKvAppendParams {
    pub n_tok: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub rotary_dim: u32,
    pub style: u32,
    pub max_pos: u32,
    pub norm: u32,
    pub eps: f32,
    pub norm_offset: f32,
    pub max_tok: u32,
    pub row_stride: u32,
    pub ring: u32,
    pub q_tok_stride: u32,
    pub kv_tok_stride: u32,
}

/// The per-head RMSNorm applied to q and k before RoPE (`(x * r) * (offset + w)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadNorm {
    pub eps: f32,
    /// 0 (Qwen3) or 1 (Gemma's `1 + w`).
    pub offset: f32,
}

#[derive(Clone, Copy, Debug)]
pub struct RopeKvAppendShape {
    pub n_tok: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Rotated dims (<= head_dim, even, > 0).
    pub rotary_dim: usize,
    pub layout: RopeLayout,
    /// Positions covered by the (cos, sin) table.
    pub max_pos: usize,
    /// `Some` when q and k are normalised per head first (`q_norm`, `k_norm` are read).
    pub norm: Option<HeadNorm>,
    pub kv: KvType,
    /// Rows of the cache region a position may address (positions >= it write nothing).
    pub max_tok: usize,
    /// Rows between consecutive tokens' regions (0: one sequence; >= the rows of a region:
    /// slot-major).
    pub row_stride: usize,
    /// Rows a region keeps: position p goes to row p % ring (>= max_tok: the row is the
    /// position; a sliding-window layer's ring otherwise).
    pub ring: usize,
    /// Words from one token's q row to the next's, and for k and v: `None` for separate
    /// contiguous tensors (n_heads / n_kv_heads times head_dim); the packed width when q, k and v
    /// are slices of one `[n_tok, q + k + v]` tensor.
    pub tok_strides: Option<(usize, usize)>,
    /// The dispatch's layout.
    pub grid: RopeKvGrid,
}

/// Most tokens one workgroup takes ([`RopeKvGrid::PerHead`]).
pub const MAX_TOKENS_PER_GROUP: usize = 4;

/// `q_out = rope(norm(q))`; `k_cache[row(t)] = rope(norm(k))`, `v_cache[row(t)] = v`.
pub struct RopeKvAppend<B> {
    pub q: B,
    pub k: B,
    pub v: B,
    /// `[head_dim]` (bind any buffer when `norm` is `None`).
    pub q_norm: B,
    pub k_norm: B,
    pub pos: B,
    pub table: B,
    pub q_out: B,
    pub k_cache: B,
    pub v_cache: B,
}

impl<B: KernelBuffer> RopeKvAppend<B> {
    pub fn dispatch(self, s: &RopeKvAppendShape) -> Result<Dispatch<B>, Error> {
        let k = &ROPE_KV_APPEND;
        let hd = s.head_dim;
        if s.rotary_dim == 0 || !s.rotary_dim.is_multiple_of(2) || s.rotary_dim > hd {
            return Err(shape_err(
                k,
                format!(
                    "rotary_dim {} must be even, > 0 and <= head_dim {hd}",
                    s.rotary_dim
                ),
            ));
        }
        if hd == 0 || !hd.is_multiple_of(2) || hd > MAX_HEAD_DIM {
            return Err(shape_err(
                k,
                format!("head_dim {hd} must be even and <= {MAX_HEAD_DIM}"),
            ));
        }
        if s.n_tok == 0 || s.n_heads == 0 || s.n_kv_heads == 0 {
            return Err(shape_err(k, "empty batch or no heads"));
        }
        if let RopeKvGrid::PerHead { tokens } = s.grid
            && !(1..=MAX_TOKENS_PER_GROUP).contains(&tokens)
        {
            return Err(shape_err(
                k,
                format!("{tokens} tokens per workgroup (1..={MAX_TOKENS_PER_GROUP})"),
            ));
        }
        if s.ring == 0 {
            return Err(shape_err(k, "ring of 0 rows"));
        }
        let region = s.ring.min(s.max_tok);
        if s.row_stride == 0 && s.ring < s.max_tok && s.n_tok > s.ring {
            return Err(shape_err(
                k,
                format!(
                    "{} tokens overwrite each other in a ring of {} rows",
                    s.n_tok, s.ring
                ),
            ));
        }
        if s.row_stride != 0 && s.row_stride < region {
            return Err(shape_err(
                k,
                format!(
                    "row_stride {} overlaps regions of {region} rows",
                    s.row_stride
                ),
            ));
        }
        if s.kv.is_quantized() {
            return Err(shape_err(
                k,
                format!(
                    "writes f32 or f16 caches, not {} (rope into an f32 staging row, then kv_append)",
                    s.kv.name()
                ),
            ));
        }
        let q_len = 4 * (s.n_tok * s.n_heads * hd) as u64;
        let kv_dim = s.n_kv_heads * hd;
        let (qs, kvs) = s.tok_strides.unwrap_or((s.n_heads * hd, kv_dim));
        if qs < s.n_heads * hd || kvs < kv_dim {
            return Err(shape_err(k, "token strides shorter than the rows"));
        }
        let span = |stride: usize, row: usize| 4 * ((s.n_tok - 1) * stride + row) as u64;
        need(k, "q", &self.q, span(qs, s.n_heads * hd))?;
        need(k, "k", &self.k, span(kvs, kv_dim))?;
        need(k, "v", &self.v, span(kvs, kv_dim))?;
        if s.norm.is_some() {
            need(k, "q_norm", &self.q_norm, 4 * hd as u64)?;
            need(k, "k_norm", &self.k_norm, 4 * hd as u64)?;
        }
        need(k, "pos", &self.pos, 4 * s.n_tok as u64)?;
        need(
            k,
            "table",
            &self.table,
            8 * (s.max_pos * s.rotary_dim / 2) as u64,
        )?;
        need(k, "q_out", &self.q_out, q_len)?;
        let rows = s.n_tok.saturating_sub(1) * s.row_stride + region;
        let cache = s.kv.bytes((rows * kv_dim) as u64);
        need(k, "k_cache", &self.k_cache, cache)?;
        need(k, "v_cache", &self.v_cache, cache)?;
        let (norm, eps, norm_offset) = match s.norm {
            Some(n) => (1, n.eps, n.offset),
            None => (0, 0.0, 0.0),
        };
        let p = RopeKvAppendParams {
            n_tok: to_u32(k, "n_tok", s.n_tok)?,
            n_heads: to_u32(k, "n_heads", s.n_heads)?,
            n_kv_heads: to_u32(k, "n_kv_heads", s.n_kv_heads)?,
            head_dim: to_u32(k, "head_dim", hd)?,
            rotary_dim: to_u32(k, "rotary_dim", s.rotary_dim)?,
            style: match s.layout {
                RopeLayout::Interleaved => 0,
                RopeLayout::NeoX => 1,
            },
            max_pos: to_u32(k, "max_pos", s.max_pos)?,
            norm,
            eps,
            norm_offset,
            max_tok: to_u32(k, "max_tok", s.max_tok)?,
            row_stride: to_u32(k, "row_stride", s.row_stride)?,
            ring: to_u32(k, "ring", s.ring)?,
            q_tok_stride: to_u32(k, "q_tok_stride", qs)?,
            kv_tok_stride: to_u32(k, "kv_tok_stride", kvs)?,
        };
        let heads = to_u32(k, "heads", s.n_heads + s.n_kv_heads)?;
        if s.n_tok > 65535 || heads > 65535 {
            return Err(shape_err(
                k,
                "more than 65535 tokens or heads in one dispatch",
            ));
        }
        let mut o = Overrides::new().set("KV_DTYPE", s.kv.code());
        let (spec, groups) = match s.grid {
            RopeKvGrid::PerHead { tokens } => {
                if tokens > 1 {
                    // (One token per workgroup keeps the WGSL default: the same overrides, so
                    // the same pipeline-cache key, as before.)
                    o = o.set("TPW", tokens as f64);
                }
                (k, [heads, s.n_tok.div_ceil(tokens) as u32, 1])
            }
            RopeKvGrid::Pairs => {
                // Whole heads per workgroup: the largest multiple of head_dim / 2 up to 256.
                let hp = hd / 2;
                let wg = (256 / hp) * hp;
                o = o.set("PWG", wg as f64);
                let spec = &ROPE_KV_APPEND_PAIRS;
                // Invocation indices are u32 in the shader.
                let pairs = to_u32(spec, "pairs", s.n_tok * (s.n_heads + s.n_kv_heads) * hp)?;
                (spec, grid_for(spec, pairs.div_ceil(wg as u32) as u64)?)
            }
        };
        Ok(Dispatch::new(
            spec,
            o,
            vec![
                self.q,
                self.k,
                self.v,
                self.q_norm,
                self.k_norm,
                self.pos,
                self.table,
                self.q_out,
                self.k_cache,
                self.v_cache,
            ],
            &p,
            groups,
        ))
    }
}
