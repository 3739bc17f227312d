//! The pieces of a decoder layer that every family shares, written once over the `Backend` ops:
//! the attention block (projections, q/k norm, RoPE, KV store, causal attention, output
//! projection), the gated MLP, the residual add and the final norm + LM head. The dense forward
//! (`crate::forward`) and the hybrid forward (`crate::hybrid`) are both made of them.

use vkllm_cpu::AttnParams;

use crate::backend::{Backend, KvView, Linear, Tensor};
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

/// Attention of the `n` normed rows `h` at `pos`, through the output projection into `out`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention<B: Backend>(
    b: &mut B,
    c: &ModelConfig,
    lc: &LayerConfig,
    w: &AttnRefs<'_>,
    s: &AttnScratch,
    h: Tensor,
    n: usize,
    pos: Tensor,
    kv: &KvView,
    out: Tensor,
) -> Result<(), ModelError> {
    let hd = c.head_dim;
    b.linear(w.q, h, n, s.q)?;
    b.linear(w.k, h, n, s.k)?;
    b.linear(w.v, h, n, s.v)?;
    let (q, k) = match (w.q_norm, w.k_norm) {
        (Some(qw), Some(kw)) => {
            b.rmsnorm(s.q, qw, n * c.n_heads, hd, c.rms_eps, c.norm_offset, s.qn)?;
            b.rmsnorm(
                s.k,
                kw,
                n * c.n_kv_heads,
                hd,
                c.rms_eps,
                c.norm_offset,
                s.kn,
            )?;
            (s.qn, s.kn)
        }
        _ => (s.q, s.k),
    };
    b.rope(q, n, c.n_heads, hd, pos, &lc.rope)?;
    b.rope(k, n, c.n_kv_heads, hd, pos, &lc.rope)?;
    b.kv_store(k, s.v, n, c.kv_dim(), pos, kv)?;
    let p = AttnParams {
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: hd,
        scale: c.attn_scale,
        softcap: c.attn_softcap,
        window: lc.window,
    };
    b.attention(q, kv, n, pos, &p, s.att)?;
    if let Some(gate) = w.gate {
        b.linear(gate, h, n, s.g)?;
        b.sigmoid_mul(s.att, s.g, n, c.q_dim(), false)?;
    }
    b.linear(w.o, s.att, n, out)
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
