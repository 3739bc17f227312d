//! The hybrid / MoE decoder forward, written once over the `Backend` ops and made of the shared
//! blocks (`crate::blocks`: attention, MLP, residual add, logits) plus the Gated DeltaNet mixer
//! and the MoE feed-forward.
//!
//! Per layer: `x += mixer(norm(x))`, `x += ffn(norm(x))`, where the mixer is gated attention
//! (over the KV cache) or Gated DeltaNet (over the layer's recurrent state: the convolution's
//! last `kernel - 1` inputs and the delta rule's `[v_heads, k_dim, v_dim]` matrix), and the ffn
//! a dense gated MLP or a MoE block (router, top-k experts, optional gated shared expert).
//! Prompts run in chunks of at most `chunk` tokens over fixed scratch tensors; within a chunk
//! the delta rule runs in its chunked parallel form, one token at a time in its recurrent form.

use std::cell::Cell;

use crate::backend::{Backend, Tensor};
use crate::blocks::{self, AttnRefs, AttnScratch, KvSlot};
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::forward::Logits;
use crate::hybrid::config::Mixer;
use crate::hybrid::weights::{FfnWeights, HybridWeights, MixerWeights};
use crate::weights::TensorSource;

/// One layer's per-sequence state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerState {
    /// Keys and values, `[capacity, kv_dim]` each.
    Attention { k: Tensor, v: Tensor },
    /// The convolution history `[kernel - 1, conv_dim]` and the delta-rule state
    /// `[v_heads, k_dim, v_dim]`.
    DeltaNet { conv: Tensor, delta: Tensor },
}

/// The state of one sequence: KV caches of the attention layers and recurrent states of the
/// DeltaNet layers. The recurrent state depends on every token so far in order, so tokens must
/// be fed in order (`next` is the position the next forward must start at); going back needs a
/// snapshot (`crate::hybrid::snapshot`).
#[derive(Clone, Debug)]
pub struct HybridState {
    pub capacity: usize,
    pub layers: Vec<LayerState>,
    pub next: Cell<usize>,
}

/// Activations of one chunk: allocated once, reused by every forward.
#[derive(Clone, Debug)]
struct Scratch {
    ids: Tensor,
    pos: Tensor,
    x: Tensor,
    h: Tensor,
    o: Tensor,
    att: AttnScratch,
    qkv: Tensor,
    qkv_conv: Tensor,
    z: Tensor,
    a: Tensor,
    b: Tensor,
    core: Tensor,
    normed: Tensor,
    gate: Tensor,
    up: Tensor,
    act: Tensor,
    router: Tensor,
    expert_ids: Tensor,
    expert_w: Tensor,
    /// `[n, top_k, expert_ff]`: the experts' activations.
    expert_act: Tensor,
    shared: Tensor,
    shared_gate: Tensor,
    last: Tensor,
    logits: Tensor,
}

/// A hybrid or MoE model loaded on a backend.
pub struct HybridModel {
    pub cfg: ModelConfig,
    pub weights: HybridWeights,
    chunk: usize,
    s: Scratch,
}

impl HybridModel {
    /// Loads the weights and allocates scratch for chunks of up to `chunk` tokens.
    pub fn load<B: Backend>(
        cfg: ModelConfig,
        src: &dyn TensorSource,
        b: &mut B,
        chunk: usize,
    ) -> Result<Self, ModelError> {
        let weights = HybridWeights::load(&cfg, src, b)?;
        let n = chunk.max(1);
        let c = &cfg;
        let (conv, vw, hv) = match &c.hybrid {
            Some(hy) => (hy.conv_dim(), hy.delta.v_width(), hy.delta.n_v_heads),
            None => (0, 0, 0),
        };
        let (ne, k, sff, eff) = match &c.moe {
            Some(m) => (m.n_experts, m.top_k, m.shared_ff.unwrap_or(0), m.expert_ff),
            None => (0, 0, 0, 0),
        };
        let ff = c.intermediate_size.max(sff).max(eff);
        let mut f = |len: usize| b.alloc_f32(len.max(1));
        let att = AttnScratch {
            q: f(n * c.q_dim())?,
            k: f(n * c.kv_dim())?,
            v: f(n * c.kv_dim())?,
            qn: f(n * c.q_dim())?,
            kn: f(n * c.kv_dim())?,
            att: f(n * c.q_dim())?,
            g: f(n * c.q_dim())?,
        };
        let s = Scratch {
            ids: b.alloc_u32(n)?,
            pos: b.alloc_u32(n)?,
            x: b.alloc_f32(n * c.hidden_size)?,
            h: b.alloc_f32(n * c.hidden_size)?,
            o: b.alloc_f32(n * c.hidden_size)?,
            att,
            qkv: b.alloc_f32((n * conv).max(1))?,
            qkv_conv: b.alloc_f32((n * conv).max(1))?,
            z: b.alloc_f32((n * vw).max(1))?,
            a: b.alloc_f32((n * hv).max(1))?,
            b: b.alloc_f32((n * hv).max(1))?,
            core: b.alloc_f32((n * vw).max(1))?,
            normed: b.alloc_f32((n * vw).max(1))?,
            gate: b.alloc_f32((n * ff).max(1))?,
            up: b.alloc_f32((n * ff).max(1))?,
            act: b.alloc_f32((n * ff).max(1))?,
            router: b.alloc_f32((n * ne).max(1))?,
            expert_ids: b.alloc_u32((n * k).max(1))?,
            expert_w: b.alloc_f32((n * k).max(1))?,
            expert_act: b.alloc_f32((n * k * eff).max(1))?,
            shared: b.alloc_f32(n * c.hidden_size)?,
            shared_gate: b.alloc_f32(n)?,
            last: b.alloc_f32(c.hidden_size)?,
            logits: b.alloc_f32(n * c.vocab_size)?,
        };
        Ok(HybridModel {
            cfg,
            weights,
            chunk: n,
            s,
        })
    }

    /// A fresh sequence state: KV caches for `capacity` positions, zero recurrent states.
    pub fn new_state<B: Backend>(
        &self,
        b: &mut B,
        capacity: usize,
    ) -> Result<HybridState, ModelError> {
        let c = &self.cfg;
        let w = c.kv_dim();
        let layers = (0..c.n_layers)
            .map(|i| match &c.hybrid {
                Some(hy) if hy.mixers[i] == Mixer::DeltaNet => Ok(LayerState::DeltaNet {
                    conv: b.alloc_f32(((hy.conv_kernel - 1) * hy.conv_dim()).max(1))?,
                    delta: b.alloc_f32(hy.delta.state_len())?,
                }),
                _ => Ok(LayerState::Attention {
                    k: b.alloc_f32(capacity * w)?,
                    v: b.alloc_f32(capacity * w)?,
                }),
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(HybridState {
            capacity,
            layers,
            next: Cell::new(0),
        })
    }

    /// Runs `ids` at positions `start..start + ids.len()` (`start` must be `st.next`), updating
    /// the state, and returns the requested logits (`[vocab]` for `Last`, `[n, vocab]` for `All`).
    pub fn forward<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        ids: &[u32],
        start: usize,
        want: Logits,
    ) -> Result<Vec<f32>, ModelError> {
        if ids.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        if start != st.next.get() {
            return Err(ModelError::StateOrder {
                expected: st.next.get(),
                start,
            });
        }
        let end = start + ids.len();
        if end > st.capacity {
            return Err(ModelError::ContextFull {
                pos: end - 1,
                capacity: st.capacity,
            });
        }
        let vocab = self.cfg.vocab_size;
        let mut out = Vec::new();
        for (ci, chunk) in ids.chunks(self.chunk).enumerate() {
            let pos0 = start + ci * self.chunk;
            let is_last = pos0 + chunk.len() == end;
            let positions: Vec<u32> = (pos0..pos0 + chunk.len()).map(|p| p as u32).collect();
            b.write_u32(self.s.ids, chunk)?;
            b.write_u32(self.s.pos, &positions)?;
            let want = match want {
                Logits::All => Some(Logits::All),
                Logits::Last if is_last => Some(Logits::Last),
                Logits::Last => None,
            };
            let rows = self.graph(b, st, chunk.len(), want)?;
            st.next.set(pos0 + chunk.len());
            if let Some(rows) = rows {
                let mut l = vec![0f32; rows * vocab];
                b.read_f32(self.s.logits, 0, &mut l)?;
                out.extend(l);
            }
        }
        Ok(out)
    }

    /// The forward of `n` tokens whose ids and positions are in the scratch inputs.
    fn graph<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        n: usize,
        want: Option<Logits>,
    ) -> Result<Option<usize>, ModelError> {
        let (c, s, w) = (&self.cfg, &self.s, &self.weights);
        let h = c.hidden_size;
        b.embedding(w.embed, c.vocab_size, h, s.ids, n, c.embed_scale, s.x)?;
        for (i, lw) in w.layers.iter().enumerate() {
            b.rmsnorm(s.x, lw.attn_norm, n, h, c.rms_eps, c.norm_offset, s.h)?;
            match (&lw.mixer, st.layers[i]) {
                (MixerWeights::Attention(aw), LayerState::Attention { k, v }) => {
                    let refs = AttnRefs {
                        q: &aw.q,
                        k: &aw.k,
                        v: &aw.v,
                        o: &aw.o,
                        q_norm: Some(aw.q_norm),
                        k_norm: Some(aw.k_norm),
                        gate: aw.gate.as_ref(),
                    };
                    let slot = KvSlot {
                        k,
                        v,
                        capacity: st.capacity,
                    };
                    let lc = &c.layers[i];
                    blocks::attention(b, c, lc, &refs, &s.att, s.h, n, s.pos, slot, s.o)?;
                }
                (MixerWeights::DeltaNet(dw), LayerState::DeltaNet { conv, delta }) => {
                    let hy = c
                        .hybrid
                        .as_ref()
                        .expect("DeltaNet weights come from a hybrid config");
                    let d = hy.delta;
                    b.linear(&dw.qkv, s.h, n, s.qkv)?;
                    b.linear(&dw.z, s.h, n, s.z)?;
                    b.linear(&dw.b, s.h, n, s.b)?;
                    b.linear(&dw.a, s.h, n, s.a)?;
                    let cd = hy.conv_dim();
                    b.causal_conv1d(s.qkv, n, cd, hy.conv_kernel, dw.conv, conv, s.qkv_conv)?;
                    b.gated_delta_rule(
                        s.qkv_conv, n, &d, s.a, s.b, dw.a_log, dw.dt_bias, delta, s.core,
                    )?;
                    let rows = n * d.n_v_heads;
                    b.gated_rmsnorm(s.core, s.z, dw.norm, rows, d.v_dim, c.rms_eps, s.normed)?;
                    b.linear(&dw.out, s.normed, n, s.o)?;
                }
                _ => panic!("layer {i}: weights and state disagree on the mixer"),
            }
            blocks::residual_add(b, s.x, s.o, None, s.h, n, c)?;

            b.rmsnorm(s.x, lw.ffn_norm, n, h, c.rms_eps, c.norm_offset, s.h)?;
            let tmp = (s.gate, s.up, s.act);
            match &lw.ffn {
                FfnWeights::Dense(m) => {
                    blocks::mlp(b, c.activation, &m.gate, &m.up, &m.down, s.h, n, tmp, s.o)?
                }
                FfnWeights::Moe(m) => {
                    let mc = c.moe.as_ref().expect("MoE weights come from a MoE config");
                    b.linear(&m.router, s.h, n, s.router)?;
                    let (ids, ew) = (s.expert_ids, s.expert_w);
                    b.moe_route(s.router, n, mc.n_experts, mc.top_k, mc.renormalize, ids, ew)?;
                    let act = c.activation;
                    let scratch = s.expert_act;
                    b.moe_experts(s.h, n, &m.experts, act, mc.top_k, ids, ew, scratch, s.o)?;
                    if let Some(sh) = &m.shared {
                        let e = &sh.mlp;
                        blocks::mlp(b, act, &e.gate, &e.up, &e.down, s.h, n, tmp, s.shared)?;
                        b.linear(&sh.gate, s.h, n, s.shared_gate)?;
                        b.sigmoid_mul(s.shared, s.shared_gate, n, h, true)?;
                        b.add_inplace(s.o, s.shared, n * h)?;
                    }
                }
            }
            blocks::residual_add(b, s.x, s.o, None, s.h, n, c)?;
        }
        let Some(want) = want else {
            return Ok(None);
        };
        let tmp = (s.last, s.h);
        let rows = blocks::logits(b, c, w.final_norm, &w.lm_head, s.x, n, tmp, want, s.logits)?;
        Ok(Some(rows))
    }
}
