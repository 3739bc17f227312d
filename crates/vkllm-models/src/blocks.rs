//! The pieces of a decoder layer that every family shares, written once over the `Backend` ops:
//! the attention block of the hybrid families (norm and projections, q/k norm, RoPE, KV store,
//! causal attention, gate, output projection added to the residual stream), the gated MLP, the residual add and the final norm + LM head. The dense forward
//! (`crate::forward`) and the hybrid forward (`crate::hybrid`) are both made of them.

use vkllm_cpu::AttnParams;

use crate::backend::{Backend, KvView, Linear, RopeKv, Tensor};
use crate::config::{LayerConfig, ModelConfig};
use crate::error::ModelError;
use crate::family::Activation;
use crate::forward::Logits;

/// The weights of one attention block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttnRefs<'a> {
    pub q: &'a Linear,
    pub k: &'a Linear,
    pub v: &'a Linear,
    pub o: &'a Linear,
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    /// Gated attention (Qwen3-Next, Qwen3.5): the gate projection; the attention output is
    /// multiplied by `sigmoid(gate(h))` before `o`.
    pub gate: Option<&'a Linear>,
}

/// Scratch tensors of the attention block (`qn`/`kn` used only with q/k norm, `g` only with a
/// gate; each holds a chunk's rows).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttnScratch {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub qn: Tensor,
    pub kn: Tensor,
    pub att: Tensor,
    pub g: Tensor,
}

/// The attention block of the `n` rows of the residual stream `x` at `pos`, added into `x`:
/// RMSNorm (`norm`: weight, eps, offset) folded into the q/k/v (and gate) products
/// ([`Backend::norm_linears`]), per-head q/k norm + RoPE + KV append + attention
/// ([`Backend::rope_attention`]), the output gate, and the output projection added into `x`
/// ([`Backend::linear_add`]; [`Backend::linear_add_before_norm`] with `next_norm`, the
/// weight and offset of the norm the next op applies to `x`). `h` and `tmp` are `[n, hidden]`
/// scratch for the backends that run these as separate ops (the reference).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention<B: Backend>(
    b: &mut B,
    c: &ModelConfig,
    lc: &LayerConfig,
    w: &AttnRefs<'_>,
    s: &AttnScratch,
    x: Tensor,
    norm: (Tensor, f32, f32),
    (h, tmp): (Tensor, Tensor),
    n: usize,
    pos: Tensor,
    kv: &KvView,
    next_norm: Option<(Tensor, f32)>,
) -> Result<(), ModelError> {
    b.mark("qkv");
    let mut ws = vec![(w.q, s.q), (w.k, s.k), (w.v, s.v)];
    if let Some(g) = w.gate {
        ws.push((g, s.g));
    }
    b.norm_linears(x, norm, n, h, &ws)?;
    let qkv = (s.q, s.k, s.v, s.qn, s.kn);
    let rk = rope_kv(c, lc, qkv, w.q_norm.zip(w.k_norm), n, pos, None);
    let p = attn_params(c, lc);
    b.rope_attention(&rk, kv, &p, s.att)?;
    if w.gate.is_some() {
        b.sigmoid_mul(s.att, s.g, n, c.q_dim(), false)?;
    }
    b.mark("o_proj");
    match next_norm {
        Some(next) => b.linear_add_before_norm(w.o, s.att, n, (x, tmp), next),
        None => b.linear_add(w.o, s.att, n, x, tmp),
    }
}

/// The attention input step of a layer (per-head q/k norm, RoPE, KV append): q, k, v in,
/// `qn` (and `kn` scratch) out, as [`Backend::rope_attention`] takes it; `packed` is the fused
/// q/k/v buffer when the projections wrote one.
pub(crate) fn rope_kv<'a>(
    c: &ModelConfig,
    lc: &'a LayerConfig,
    (q, k, v, qn, kn): (Tensor, Tensor, Tensor, Tensor, Tensor),
    norm: Option<(Tensor, Tensor)>,
    n: usize,
    positions: Tensor,
    packed: Option<Tensor>,
) -> RopeKv<'a> {
    RopeKv {
        q,
        k,
        v,
        q_out: qn,
        k_tmp: kn,
        n,
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        norm,
        eps: c.rms_eps,
        norm_offset: c.norm_offset,
        positions,
        rope: &lc.rope,
        packed,
    }
}

/// A layer's attention shape, scale, softcap and window.
pub(crate) fn attn_params(c: &ModelConfig, lc: &LayerConfig) -> AttnParams {
    AttnParams {
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        scale: c.attn_scale,
        softcap: c.attn_softcap,
        window: lc.window,
    }
}

/// The gated MLP of the `n` normed rows `h` into `out`: `down(act(gate h) * up h)`, with
/// scratch for the three intermediate results.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mlp<B: Backend>(
    b: &mut B,
    act: Activation,
    gate: &Linear,
    up: &Linear,
    down: &Linear,
    h: Tensor,
    n: usize,
    (g, u, a): (Tensor, Tensor, Tensor),
    out: Tensor,
) -> Result<(), ModelError> {
    b.linear(gate, h, n, g)?;
    b.linear(up, h, n, u)?;
    b.gated_act(act, g, u, n * gate.rows, a)?;
    b.linear(down, a, n, out)
}

/// `x += y`, or `x += norm(y)` through `tmp` when the block has a post-norm (Gemma 2/3).
pub(crate) fn residual_add<B: Backend>(
    b: &mut B,
    x: Tensor,
    y: Tensor,
    post_norm: Option<Tensor>,
    tmp: Tensor,
    n: usize,
    c: &ModelConfig,
) -> Result<(), ModelError> {
    let h = c.hidden_size;
    match post_norm {
        Some(w) => {
            b.rmsnorm(y, w, n, h, c.rms_eps, c.norm_offset, tmp)?;
            b.add_inplace(x, tmp, n * h)
        }
        None => b.add_inplace(x, y, n * h),
    }
}

/// The final norm and LM head over the residual stream `x` of `n` rows (all rows, or the last
/// one copied to `last`), logits into `logits`; returns how many rows it wrote.
#[allow(clippy::too_many_arguments)]
pub(crate) fn logits<B: Backend>(
    b: &mut B,
    c: &ModelConfig,
    final_norm: Tensor,
    lm_head: &Linear,
    x: Tensor,
    n: usize,
    (last, tmp): (Tensor, Tensor),
    want: Logits,
    out: Tensor,
) -> Result<usize, ModelError> {
    let h = c.hidden_size;
    let (rows, src) = match want {
        Logits::All => (n, x),
        Logits::Last => {
            b.copy(x, (n - 1) * h, last, 0, h)?;
            (1, last)
        }
    };
    b.rmsnorm(src, final_norm, rows, h, c.rms_eps, c.norm_offset, tmp)?;
    b.linear(lm_head, tmp, rows, out)?;
    if let Some(cap) = c.final_softcap {
        b.softcap(out, rows * c.vocab_size, cap)?;
    }
    Ok(rows)
}
