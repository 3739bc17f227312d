//! The backend trait: the small set of tensor ops the model graphs are written in.
//!
//! A model's forward is written once (see `crate::forward`) as calls on a `Backend`. The CPU
//! backend executes each call at once with the `vkllm-cpu` reference ops; a GPU backend records
//! the same calls as dispatches. Tensors are opaque handles owned by the backend. Positions and
//! token ids are device tensors (not host numbers) so that a GPU backend can record a decode step
//! once and replay it with new positions written into a small buffer.

pub mod cpu;
mod cpu_pages;
mod recurrent;
pub mod vulkan;

pub use recurrent::StateView;

use vkllm_cpu::{AttnParams, Rope};

use crate::error::ModelError;
use crate::family::Activation;

/// A handle to a tensor owned by a backend (f32 values unless said otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor(u32);

impl Tensor {
    /// Makes a handle; only backends should call this.
    pub fn from_index(i: u32) -> Self {
        Tensor(i)
    }

    /// The backend's index of this tensor.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

pub use vkllm_kernels::kv_append::{KvRot, KvType, KvTypes};

/// A capture a backend recorded for replay ([`Backend::capture`]): its index and the backend's
/// scratch generation when it was made (a capture replayed after its scratch was replaced is
/// refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureId {
    pub index: usize,
    pub generation: u64,
}

mod hybrid_ops;
pub use hybrid_ops::{DeltaOutNorm, HybridOps};
mod moe_ffn;
pub use moe_ffn::{MoeFfn, moe_ffn_unfused};

/// Which rows of a slot-major KV cache an op reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvRows {
    /// Every row belongs to one sequence, held in slot `s` (prefill, single-sequence decode).
    Slot(usize),
    /// Row `i` is slot `i` (the batched decode step: one token per slot).
    PerRow,
}

/// One layer's K and V caches: `slots` regions of `stride` rows, each keeping `min(capacity,
/// ring)` rows with position `p` in row `p % ring` (`ring >= capacity`: the row is the position;
/// a sliding-window layer keeps a ring of its window plus a prefill chunk), and which region(s)
/// the op addresses. Positions run up to `capacity` either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvView {
    pub k: Tensor,
    pub v: Tensor,
    pub capacity: usize,
    pub stride: usize,
    pub ring: usize,
    pub slots: usize,
    /// The K cache's type.
    pub dtype: KvType,
    /// The V cache's type (`dtype`, or another quantized type: `KvTypes`).
    pub v_dtype: KvType,
    /// The parts whose units are stored rotated (`KvRot::for_types`).
    pub rot: KvRot,
    /// Keys stored centred (quantized K caches, `crate::key_centre`): the backend stores
    /// `(k - shift) / scale` and attention takes the query times the scales.
    pub centre: Option<KeyCentre>,
    pub rows: KvRows,
}

/// One layer's key centring on a backend (`crate::key_centre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyCentre {
    /// `[4, kv_dim]` f32 per K channel: the shift, the inverse scale, the sink offset (the key
    /// at position 0 is stored less it and read plus it) and that offset rotated like the
    /// units of a cache with rotated keys. The append reads the first three rows.
    pub table: Tensor,
    /// `[n_heads * head_dim]` f32: the scale each query channel is multiplied by.
    pub q_scale: Tensor,
}

impl KvView {
    /// The K and V caches' types.
    pub fn types(&self) -> KvTypes {
        KvTypes {
            k: self.dtype,
            v: self.v_dtype,
        }
    }
}

/// A weight matrix `[rows, cols]` (y = W x), with an optional bias of `rows` values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub rows: usize,
    pub cols: usize,
}

/// The routed experts of one MoE block, stacked: expert `e`'s gate and up projections are rows
/// `e * ff..(e + 1) * ff` of `gate` and `up` (`[n_experts * ff, hidden]`), its down projection
/// rows `e * hidden..(e + 1) * hidden` of `down` (`[n_experts * hidden, ff]`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Experts {
    pub gate: Tensor,
    pub up: Tensor,
    pub down: Tensor,
    pub n_experts: usize,
    pub hidden: usize,
    pub ff: usize,
}

/// The ops a model forward is made of. `n` is always the number of tokens in the batch; row
/// widths are given explicitly. Unless a method says otherwise, `out` must not alias an input.
pub trait Backend: HybridOps {
    /// A short name for reports ("cpu", the GPU's name, ...).
    fn name(&self) -> String;

    /// Names the part of the graph the following ops belong to ("qkv", "attention", ...), for
    /// per-region profiles. Backends that do not profile ignore it.
    fn mark(&mut self, _region: &'static str) {}

    /// The prefill chunk this backend runs best with (what the binaries load models with;
    /// tests use [`crate::DEFAULT_CHUNK`]).
    fn prefill_chunk(&self) -> usize {
        crate::DEFAULT_CHUNK
    }

    /// The KV cache type when the user names none: f32 here (the CPU reference).
    fn default_kv(&self) -> crate::KvType {
        crate::KvType::F32
    }

    /// A zero-initialised f32 tensor.
    fn alloc_f32(&mut self, len: usize) -> Result<Tensor, ModelError>;
    /// A zero-initialised u32 tensor the host writes (token ids, positions).
    fn alloc_u32(&mut self, len: usize) -> Result<Tensor, ModelError>;
    /// A zero-initialised u32 tensor only kernels write and read (routed expert ids): a GPU
    /// backend keeps it in device memory, where [`Backend::alloc_u32`] may pick host-visible
    /// memory.
    fn alloc_u32_scratch(&mut self, len: usize) -> Result<Tensor, ModelError> {
        self.alloc_u32(len)
    }
    /// Whether quantized K caches store their keys centred (`crate::key_centre`; tuning
    /// `kv_centre`).
    fn centre_keys(&self) -> bool {
        true
    }
    /// Whether q4_0 V caches store their units rotated where heads are whole units
    /// (`KvRot::for_types`; tuning `kv_rot_v`).
    fn rotate_values(&self) -> bool {
        true
    }
    /// Whether centred keys store the key at position 0 relative to the model's sink offset
    /// (`crate::key_centre`; tuning `kv_sink`). Read when a model first measures its centring.
    fn sink_keys(&self) -> bool {
        true
    }

    /// Device memory (free, total) in bytes where the backend knows it; `None` on the host.
    fn memory_free(&self) -> Option<(u64, u64)> {
        None
    }
    /// A zero-initialised KV cache tensor of `len` values stored as `dtype`.
    fn alloc_kv(&mut self, len: usize, dtype: KvType) -> Result<Tensor, ModelError>;
    /// Bytes per page where KV tensors can share pages in place ([`Backend::alloc_kv_paged`]);
    /// `None` where they cannot.
    fn kv_page_bytes(&self) -> Option<u64> {
        None
    }
    /// [`Backend::alloc_kv`] whose pages can be shared with other paged KV tensors; `resident`
    /// false: no page bound (no memory) until [`Backend::kv_pages`] binds them.
    fn alloc_kv_paged(
        &mut self,
        len: usize,
        dtype: KvType,
        resident: bool,
    ) -> Result<Tensor, ModelError> {
        let _ = (len, dtype, resident);
        Err(self.unsupported("alloc_kv_paged"))
    }
    /// Changes the pages of paged KV tensors ([`KvPageOp`]), ordered after the work recorded
    /// so far; returns the pages the op bound, replaced or unbound.
    fn kv_pages(&mut self, op: KvPageOp<'_>) -> Result<usize, ModelError> {
        let _ = op;
        Err(self.unsupported("kv_pages"))
    }
    /// Bytes the pages of paged KV tensors hold now (a shared page once; 0 without pages).
    fn kv_paged_bytes(&self) -> u64 {
        0
    }
    /// A tensor holding `data` (norm weights, biases, constants).
    fn upload_f32(&mut self, data: &[f32]) -> Result<Tensor, ModelError>;
    /// A `[rows, cols]` weight matrix (a `Linear`'s weight or an embedding table).
    fn upload_matrix(
        &mut self,
        data: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<Tensor, ModelError>;
    /// A `[rows, cols]` weight matrix kept in its stored format (llama.cpp blocks), when this
    /// backend computes with that format directly; `None` means "give me f32 instead".
    fn upload_matrix_raw(
        &mut self,
        _ty: vkllm_cpu::quant::QuantType,
        _bytes: &[u8],
        _rows: usize,
        _cols: usize,
    ) -> Result<Option<Tensor>, ModelError> {
        Ok(None)
    }
    /// Whether a MoE block's shared expert as wide as the routed ones joins their stacked
    /// matrices, routed as one more expert in every token's last slot
    /// (`vkllm_cpu::moe_route_shared`) instead of running as its own gated MLP (the reference).
    fn stacks_shared_expert(&self) -> bool {
        false
    }
    /// Overwrites the start of a u32 tensor.
    fn write_u32(&mut self, t: Tensor, data: &[u32]) -> Result<(), ModelError>;
    /// Reads `out.len()` values starting at element `offset`, after all earlier work finished.
    fn read_f32(&mut self, t: Tensor, offset: usize, out: &mut [f32]) -> Result<(), ModelError>;
    /// Submits the work recorded so far and waits for it (a backend that runs ops as they come
    /// has nothing to do).
    fn sync(&mut self) -> Result<(), ModelError> {
        Ok(())
    }

    /// Records the ops `f` issues into a capture replayed by [`Backend::replay_captures`]
    /// instead of running them, for positions below `capacity` (shapes that would depend on
    /// positions use it; the ops read positions and ids from their tensors when replayed).
    /// `Ok(None)`, `f` not called: this backend runs ops as they come and captures nothing.
    fn capture<F>(&mut self, _capacity: usize, _f: F) -> Result<Option<CaptureId>, ModelError>
    where
        F: FnOnce(&mut Self) -> Result<(), ModelError>,
        Self: Sized,
    {
        Ok(None)
    }

    /// Runs `ids` in order as one submission after the work before it, and waits. A capture
    /// whose scratch was replaced since it was made (a later op needed larger scratch) is a
    /// [`ModelError::CaptureStale`]: capture it again.
    fn replay_captures(&mut self, _ids: &[CaptureId]) -> Result<(), ModelError> {
        Err(ModelError::Unsupported("captures on this backend".into()))
    }

    /// [`Backend::replay_captures`] without the wait where the backend can: the next op that
    /// waits for the device (a read, sampling, [`Backend::sync`]) waits for it too. The
    /// default waits.
    fn replay_captures_nowait(&mut self, ids: &[CaptureId]) -> Result<(), ModelError> {
        self.replay_captures(ids)
    }

    /// Whether every one of `ids` may still be replayed, after the work before it (a capture
    /// is stale once scratch it uses was replaced).
    fn captures_current(&mut self, _ids: &[CaptureId]) -> Result<bool, ModelError> {
        Ok(false)
    }

    /// Drops captures (their handles are not valid afterwards).
    fn release_captures(&mut self, _ids: &[CaptureId]) {}

    /// Draws one token from the `[vocab]` logits at the start of `logits` as
    /// `vkllm_cpu::sampler::sample(logits, p, counts, seq, step)` does (`counts`: `[vocab]`,
    /// read when `p` has penalties), on the device where the backend can, only the token coming
    /// back; `None`: this backend leaves sampling to the host.
    #[allow(clippy::too_many_arguments)]
    fn sample_token(
        &mut self,
        _logits: Tensor,
        _vocab: usize,
        _p: &vkllm_cpu::sampler::SamplingParams,
        _counts: &[u32],
        _seq: u64,
        _step: u64,
    ) -> Result<Option<u32>, ModelError> {
        Ok(None)
    }

    /// `out[i] = table[ids[i]] * scale` for `n` ids; ids outside `vocab` are an error.
    #[allow(clippy::too_many_arguments)]
    fn embedding(
        &mut self,
        table: Tensor,
        vocab: usize,
        dim: usize,
        ids: Tensor,
        n: usize,
        scale: Option<f32>,
        out: Tensor,
    ) -> Result<(), ModelError>;

    /// RMSNorm of `rows` rows of width `dim` with weight `(w + offset)`.
    #[allow(clippy::too_many_arguments)]
    fn rmsnorm(
        &mut self,
        x: Tensor,
        weight: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
        offset: f32,
        out: Tensor,
    ) -> Result<(), ModelError>;

    /// `out[n, rows] = x[n, cols] W^T (+ bias)`.
    fn linear(&mut self, w: &Linear, x: Tensor, n: usize, out: Tensor) -> Result<(), ModelError>;

    /// `acc[n, rows] += x[n, cols] W^T (+ bias)`: a projection with the residual add fused in.
    /// The default runs [`Backend::linear`] into `tmp` and then [`Backend::add_inplace`].
    fn linear_add(
        &mut self,
        w: &Linear,
        x: Tensor,
        n: usize,
        acc: Tensor,
        tmp: Tensor,
    ) -> Result<(), ModelError> {
        self.linear(w, x, n, tmp)?;
        self.add_inplace(acc, tmp, n * w.rows)
    }

    /// [`Backend::linear_add`] where the next op is a product reading `acc` through an RMSNorm
    /// prologue of weight `next_norm.0` (+ offset `next_norm.1`): a backend may prepare that
    /// product's input in the same launch. The default runs `linear_add`.
    fn linear_add_before_norm(
        &mut self,
        w: &Linear,
        x: Tensor,
        n: usize,
        (acc, tmp): (Tensor, Tensor),
        next_norm: (Tensor, f32),
    ) -> Result<(), ModelError> {
        let _ = next_norm;
        self.linear_add(w, x, n, acc, tmp)
    }

    /// Rotates, in place, the heads of `n` rows of `n_heads * head_dim`, row i at `positions[i]`.
    fn rope(
        &mut self,
        x: Tensor,
        n: usize,
        n_heads: usize,
        head_dim: usize,
        positions: Tensor,
        rope: &Rope,
    ) -> Result<(), ModelError>;

    /// Copies `n` rows of `width` from `k` and `v` into the cache rows `positions[i] % kv.ring`
    /// of the region `kv.rows` names (for `PerRow`, row i goes to slot i; positions >= capacity
    /// write nothing there, which is how idle slots are skipped).
    fn kv_store(
        &mut self,
        k: Tensor,
        v: Tensor,
        n: usize,
        width: usize,
        positions: Tensor,
        kv: &KvView,
    ) -> Result<(), ModelError>;

    /// RMSNorm of `a.x` then the q, k and v projections. Returns `true` when the backend left
    /// them packed per token in `a.packed` (`[n, q + k + v]`, for [`RopeKv::packed`]) instead of
    /// in `a.q_out`, `a.k_out`, `a.v_out`. The default runs `rmsnorm` into `a.h` and three
    /// `linear`s (false).
    fn norm_qkv(&mut self, a: &NormQkv<'_>) -> Result<bool, ModelError> {
        norm_qkv_unfused(self, a)?;
        Ok(false)
    }

    /// RMSNorm of the `n` rows of `x` (width `ws[i].0.cols`), then each `(weight, out)`
    /// product of the normed rows. The default runs `rmsnorm` into `h` and the `linear`s;
    /// backends may fold the norm into each product instead.
    #[allow(clippy::too_many_arguments)]
    fn norm_linears(
        &mut self,
        x: Tensor,
        (norm, eps, offset): (Tensor, f32, f32),
        n: usize,
        h: Tensor,
        ws: &[(&Linear, Tensor)],
    ) -> Result<(), ModelError> {
        let Some((first, _)) = ws.first() else {
            return Ok(());
        };
        self.rmsnorm(x, norm, n, first.cols, eps, offset, h)?;
        for &(w, out) in ws {
            self.linear(w, h, n, out)?;
        }
        Ok(())
    }

    /// A MoE feed-forward block: `x += experts(norm(x))` ([`MoeFfn`]); backends may fuse it,
    /// the reference is [`moe_ffn_unfused`].
    fn moe_ffn(&mut self, a: &MoeFfn<'_>) -> Result<(), ModelError> {
        moe_ffn_unfused(self, a)
    }

    /// RMSNorm of `a.x`, the gate and up projections and the gated activation:
    /// `a.out = act(gate(norm(x))) * up(norm(x))`. The default composes `rmsnorm` (into `a.h`),
    /// two `linear`s (into `a.gate_out`, `a.up_out`) and `gated_act`.
    fn norm_gated_mlp(&mut self, a: &NormMlp<'_>) -> Result<(), ModelError> {
        norm_gated_mlp_unfused(self, a)
    }

    /// The attention inputs of `n` tokens, one step: `q_out = rope(norm(q))`, and
    /// `rope(norm(k))` and `v` stored into the cache at `positions` (as [`Backend::kv_store`]).
    /// The norm is the per-head RMSNorm (Qwen3, Gemma 3) when `a.norm` is given. The default
    /// composes `rmsnorm`, `rope` and `kv_store` (using `a.k_tmp` for the normalised keys);
    /// a backend may fuse them.
    fn rope_kv(&mut self, a: &RopeKv<'_>, kv: &KvView) -> Result<(), ModelError> {
        rope_kv_unfused(self, a, kv)
    }

    /// The attention block after the projections: [`Backend::rope_kv`], then
    /// [`Backend::attention`] of its queries (`a.q_out`) into `out`. The default composes the
    /// two; a backend may fold the input step into the attention dispatch.
    fn rope_attention(
        &mut self,
        a: &RopeKv<'_>,
        kv: &KvView,
        p: &AttnParams,
        out: Tensor,
    ) -> Result<(), ModelError> {
        self.mark("rope_kv");
        self.rope_kv(a, kv)?;
        self.mark("attention");
        self.attention(a.q_out, kv, a.n, a.positions, p, out)
    }

    /// Causal attention of `n` query rows at `positions` over the cache (keys 0..=position of
    /// the region `kv.rows` names, within the window of `p`; key `j` in row `j % kv.ring`).
    fn attention(
        &mut self,
        q: Tensor,
        kv: &KvView,
        n: usize,
        positions: Tensor,
        p: &AttnParams,
        out: Tensor,
    ) -> Result<(), ModelError>;

    /// `out = act(gate) * up` over `len` values.
    fn gated_act(
        &mut self,
        act: Activation,
        gate: Tensor,
        up: Tensor,
        len: usize,
        out: Tensor,
    ) -> Result<(), ModelError>;

    /// `a += b` over `len` values (the residual add).
    fn add_inplace(&mut self, a: Tensor, b: Tensor, len: usize) -> Result<(), ModelError>;

    /// Copies `len` values from `src[src_offset..]` to `dst[dst_offset..]` (distinct tensors).
    fn copy(
        &mut self,
        src: Tensor,
        src_offset: usize,
        dst: Tensor,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), ModelError>;

    /// Copies `len` values of a KV cache tensor made by [`Backend::alloc_kv`] with `dtype` (offsets
    /// in values too). The default: caches that hold f32 values whatever the dtype.
    fn copy_kv(
        &mut self,
        src: Tensor,
        src_offset: usize,
        dst: Tensor,
        dst_offset: usize,
        len: usize,
        dtype: KvType,
    ) -> Result<(), ModelError> {
        let _ = dtype;
        self.copy(src, src_offset, dst, dst_offset, len)
    }

    /// `x = cap * tanh(x / cap)` in place.
    fn softcap(&mut self, x: Tensor, len: usize, cap: f32) -> Result<(), ModelError>;

    /// The error of an op a backend cannot run with its arguments.
    fn unsupported(&self, op: &'static str) -> ModelError {
        ModelError::UnsupportedOp {
            backend: self.name(),
            op,
        }
    }
}

/// What [`Backend::kv_pages`] does to paged KV tensors (ranges are `(tensor, first page,
/// pages)`).
#[derive(Clone, Copy, Debug)]
pub enum KvPageOp<'a> {
    /// Each share's destination pages become its source's (read and written in place by both).
    Share(&'a [KvPageShare]),
    /// The pages of each range that another range shares become private (`keep`: with their
    /// contents, else zeroed); unbound pages stay unbound. One op for many ranges costs the
    /// GPU backend one bind.
    Own(&'a [KvPageOwn]),
    /// Zeroed pages for the unbound pages of each range; [`ModelError::KvPagesFull`] (binding
    /// nothing) past the page limit.
    Bind(&'a [(Tensor, usize, usize)]),
    /// Each range's pages unbound (their memory returns to the pool unless shared).
    Release(&'a [(Tensor, usize, usize)]),
}

/// One range of [`KvPageOp::Own`]: pages `first .. first + count` of `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvPageOwn {
    pub t: Tensor,
    pub first: usize,
    pub count: usize,
    pub keep: bool,
}

/// One range of [`KvPageOp::Share`]: `dst`'s pages `dst_page .. dst_page + count` become
/// `src`'s from `src_page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvPageShare {
    pub src: Tensor,
    pub src_page: usize,
    pub dst: Tensor,
    pub dst_page: usize,
    pub count: usize,
}

/// Arguments of [`Backend::rope_kv`].
#[derive(Clone, Copy, Debug)]
pub struct RopeKv<'a> {
    /// `[n, n_heads * head_dim]`, read only.
    pub q: Tensor,
    /// `[n, n_kv_heads * head_dim]`; `k` may be overwritten (the unfused path rotates it in
    /// place when there is no norm).
    pub k: Tensor,
    pub v: Tensor,
    /// `[n, n_heads * head_dim]`: the rotated (normalised) queries.
    pub q_out: Tensor,
    /// Scratch `[n, n_kv_heads * head_dim]` for the unfused path's normalised keys.
    pub k_tmp: Tensor,
    pub n: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// `(q_norm, k_norm)` weights `[head_dim]` when q and k are normalised per head.
    pub norm: Option<(Tensor, Tensor)>,
    pub eps: f32,
    pub norm_offset: f32,
    pub positions: Tensor,
    pub rope: &'a Rope,
    /// `Some(t)`: q, k and v are the slices of the packed `[n, q + k + v]` tensor `t` that
    /// [`Backend::norm_qkv`] wrote (only a backend that packs reads this).
    pub packed: Option<Tensor>,
}

/// [`Backend::rope_kv`] as the separate ops (the reference every fused version is tested
/// against).
pub fn rope_kv_unfused<B: Backend + ?Sized>(
    b: &mut B,
    a: &RopeKv<'_>,
    kv: &KvView,
) -> Result<(), ModelError> {
    let hd = a.head_dim;
    let k = match a.norm {
        Some((qw, kw)) => {
            b.rmsnorm(a.q, qw, a.n * a.n_heads, hd, a.eps, a.norm_offset, a.q_out)?;
            b.rmsnorm(
                a.k,
                kw,
                a.n * a.n_kv_heads,
                hd,
                a.eps,
                a.norm_offset,
                a.k_tmp,
            )?;
            a.k_tmp
        }
        None => {
            b.copy(a.q, 0, a.q_out, 0, a.n * a.n_heads * hd)?;
            a.k
        }
    };
    b.rope(a.q_out, a.n, a.n_heads, hd, a.positions, a.rope)?;
    b.rope(k, a.n, a.n_kv_heads, hd, a.positions, a.rope)?;
    b.kv_store(k, a.v, a.n, a.n_kv_heads * hd, a.positions, kv)
}

/// Arguments of [`Backend::norm_qkv`].
#[derive(Clone, Copy, Debug)]
pub struct NormQkv<'a> {
    /// `[n, hidden]`.
    pub x: Tensor,
    pub norm: Tensor,
    pub eps: f32,
    pub norm_offset: f32,
    pub n: usize,
    pub head_dim: usize,
    /// Scratch `[n, hidden]` for the normalised input (unfused path).
    pub h: Tensor,
    pub q: &'a Linear,
    pub k: &'a Linear,
    pub v: &'a Linear,
    pub q_out: Tensor,
    pub k_out: Tensor,
    pub v_out: Tensor,
    /// `[n, q + k + v]` for a backend that packs.
    pub packed: Tensor,
}

/// [`Backend::norm_qkv`] as separate ops.
pub fn norm_qkv_unfused<B: Backend + ?Sized>(b: &mut B, a: &NormQkv<'_>) -> Result<(), ModelError> {
    let h = a.q.cols;
    b.rmsnorm(a.x, a.norm, a.n, h, a.eps, a.norm_offset, a.h)?;
    b.linear(a.q, a.h, a.n, a.q_out)?;
    b.linear(a.k, a.h, a.n, a.k_out)?;
    b.linear(a.v, a.h, a.n, a.v_out)
}

/// Arguments of [`Backend::norm_gated_mlp`].
#[derive(Clone, Copy, Debug)]
pub struct NormMlp<'a> {
    pub x: Tensor,
    pub norm: Tensor,
    pub eps: f32,
    pub norm_offset: f32,
    pub n: usize,
    pub h: Tensor,
    pub gate: &'a Linear,
    pub up: &'a Linear,
    pub act: Activation,
    pub gate_out: Tensor,
    pub up_out: Tensor,
    /// `[n, ff]`.
    pub out: Tensor,
}

/// [`Backend::norm_gated_mlp`] as separate ops.
pub fn norm_gated_mlp_unfused<B: Backend + ?Sized>(
    b: &mut B,
    a: &NormMlp<'_>,
) -> Result<(), ModelError> {
    let h = a.gate.cols;
    b.rmsnorm(a.x, a.norm, a.n, h, a.eps, a.norm_offset, a.h)?;
    b.linear(a.gate, a.h, a.n, a.gate_out)?;
    b.linear(a.up, a.h, a.n, a.up_out)?;
    b.gated_act(a.act, a.gate_out, a.up_out, a.n * a.gate.rows, a.out)
}

/// Words of the `scratch` [`HybridOps::moe_experts`] takes for `n` tokens (see
/// [`moe_scratch_parts`]).
pub fn moe_scratch_words(
    n: usize,
    top_k: usize,
    hidden: usize,
    ff: usize,
    experts: usize,
) -> usize {
    let [_, _, (off, len)] = moe_scratch_parts(n, top_k, hidden, ff, experts);
    off + len
}

/// `(offset, length)` in words of the parts of the MoE scratch: the experts' activations
/// `[n, top_k, ff]`, per-slot output rows `[n, top_k, hidden]` and the slot lists of the
/// grouped kernels, each at a 256-byte boundary (storage-buffer offset alignment).
pub fn moe_scratch_parts(
    n: usize,
    top_k: usize,
    hidden: usize,
    ff: usize,
    experts: usize,
) -> [(usize, usize); 3] {
    let up = |w: usize| w.div_ceil(64) * 64;
    let act = (0, n * top_k * ff);
    let y = (up(act.1), n * top_k * hidden);
    let lists = (y.0 + up(y.1), (experts * (n + 1)).next_multiple_of(4));
    [act, y, lists]
}
