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

use crate::backend::{
    Backend, DeltaOutNorm, KeyCentre, KvRot, KvRows, KvType, KvTypes, KvView, MoeFfn, NormMlp,
    StateView, Tensor, moe_scratch_words,
};
use crate::blocks::{self, AttnRefs, AttnScratch};
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::forward::{KV_ROW_ALIGN, LOGITS_ROWS, Logits};
use crate::hybrid::config::Mixer;
use crate::hybrid::weights::{FfnWeights, HybridWeights, MixerWeights};
use crate::weights::TensorSource;

/// One layer's state for every slot, slot-major (slot `s` owns the `s`-th region).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerState {
    /// Keys and values, `[slots * stride, kv_dim]` each (f32; slot `s` owns rows
    /// `s * stride .. s * stride + capacity`, like [`crate::KvCache`]).
    Attention { k: Tensor, v: Tensor },
    /// The convolution history `[slots, kernel - 1, conv_dim]` and the delta-rule state
    /// `[slots, v_heads, k_dim, v_dim]`.
    DeltaNet { conv: Tensor, delta: Tensor },
}

/// The state of `slots` sequences: KV caches of the attention layers and recurrent states of
/// the DeltaNet layers, each slot-major. The recurrent state depends on every token so far in
/// order, so a slot's tokens must be fed in order (`next[slot]` is the position its next
/// forward must start at); going back needs a snapshot (`crate::hybrid::snapshot`) or a reset
/// ([`HybridModel::reset_slot`]).
#[derive(Clone, Debug)]
pub struct HybridState {
    pub capacity: usize,
    /// The attention layers' K element type (recurrent states are f32).
    pub dtype: KvType,
    /// Their V element type.
    pub v_dtype: KvType,
    /// Their parts whose units are stored rotated (`KvRot::for_types`).
    pub rot: KvRot,
    /// Per layer, the attention layers' key centring (quantized K; empty otherwise).
    pub centre: Vec<Option<KeyCentre>>,
    /// Rows between the slots' KV regions (`capacity` rounded up to [`KV_ROW_ALIGN`]).
    pub stride: usize,
    pub slots: usize,
    pub layers: Vec<LayerState>,
    pub next: Vec<Cell<usize>>,
    /// Zeros, as long as the longest per-slot recurrent state (for resets).
    zeros: Tensor,
}

impl HybridState {
    /// The view of attention layer `(k, v)` caches that ops addressing `rows` use.
    pub fn kv_view(&self, layer: usize, k: Tensor, v: Tensor, rows: KvRows) -> KvView {
        KvView {
            k,
            v,
            capacity: self.capacity,
            stride: self.stride,
            // Every position keeps its row (no sliding-window rings in these families).
            ring: self.capacity,
            slots: self.slots,
            dtype: self.dtype,
            v_dtype: self.v_dtype,
            rot: self.rot,
            centre: self.centre.get(layer).copied().flatten(),
            rows,
        }
    }

    /// The view of a DeltaNet layer's `state` tensor (`len` values per slot) for ops
    /// addressing `rows` at `positions`.
    pub fn state_view(
        &self,
        state: Tensor,
        len: usize,
        rows: KvRows,
        positions: Tensor,
    ) -> StateView {
        StateView {
            state,
            len,
            slots: self.slots,
            rows,
            positions,
            capacity: self.capacity,
        }
    }
}

/// The token ids and positions a graph reads, and which state rows they address.
struct StepInputs {
    ids: Tensor,
    pos: Tensor,
    rows: KvRows,
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
    /// The experts' activations and the grouped kernels' scratch (`moe_scratch_words`).
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
    /// Per layer, the key centring of quantized K caches, measured on the first such state.
    centre: crate::key_centre::Centres,
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
        // A shared expert may be stacked with the routed ones (one more expert and slot).
        let (ne, k, sff, eff) = match &c.moe {
            Some(m) => (
                m.n_experts + 1,
                m.top_k + 1,
                m.shared_ff.unwrap_or(0),
                m.expert_ff,
            ),
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
            // Whole 16-byte words: the int8 expert launches read the routing as vec4s.
            expert_ids: b.alloc_u32_scratch((n * k).max(1).next_multiple_of(4))?,
            expert_w: b.alloc_f32((n * k).max(1).next_multiple_of(4))?,
            expert_act: b.alloc_f32(moe_scratch_words(n, k, c.hidden_size, eff, ne).max(1))?,
            shared: b.alloc_f32(n * c.hidden_size)?,
            shared_gate: b.alloc_f32(n)?,
            last: b.alloc_f32(c.hidden_size)?,
            logits: b.alloc_f32(n.min(LOGITS_ROWS) * c.vocab_size)?,
        };
        Ok(HybridModel {
            cfg,
            weights,
            chunk: n,
            s,
            centre: Default::default(),
        })
    }

    /// The key centring of this model's quantized K caches (`crate::key_centre`), per layer
    /// (`None` for DeltaNet layers), measured once.
    fn key_centre<B: Backend>(
        &self,
        b: &mut B,
        capacity: usize,
    ) -> Result<Vec<Option<KeyCentre>>, ModelError> {
        crate::key_centre::measured(&self.centre, b, &self.cfg, capacity, |b, ids| {
            let tmp = self.new_state_kv(b, ids.len(), 1, KvType::F32)?;
            self.forward(b, &tmp, ids, 0, Logits::Last)?;
            let n = ids.len();
            Ok(tmp
                .layers
                .iter()
                .map(|l| match *l {
                    LayerState::Attention { k, .. } => Some((k, n)),
                    LayerState::DeltaNet { .. } => None,
                })
                .collect())
        })
    }

    /// Tokens per prefill chunk.
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// A fresh state for one sequence: KV caches for `capacity` positions, zero recurrent
    /// states.
    pub fn new_state<B: Backend>(
        &self,
        b: &mut B,
        capacity: usize,
    ) -> Result<HybridState, ModelError> {
        self.new_state_slots(b, capacity, 1)
    }

    /// Per-slot lengths of a DeltaNet layer's conv history and delta state (0, 0 without a
    /// hybrid config).
    pub(crate) fn recurrent_lens(&self) -> (usize, usize) {
        match &self.cfg.hybrid {
            Some(hy) => ((hy.conv_kernel - 1) * hy.conv_dim(), hy.delta.state_len()),
            None => (0, 0),
        }
    }

    /// A fresh state for `slots` sequences of `capacity` positions each (f32 KV).
    pub fn new_state_slots<B: Backend>(
        &self,
        b: &mut B,
        capacity: usize,
        slots: usize,
    ) -> Result<HybridState, ModelError> {
        self.new_state_kv(b, capacity, slots, KvType::F32)
    }

    /// A fresh state for `slots` sequences of `capacity` positions each, the attention layers'
    /// keys and values stored as `types` (one type, or K's and V's).
    pub fn new_state_kv<B: Backend>(
        &self,
        b: &mut B,
        capacity: usize,
        slots: usize,
        types: impl Into<KvTypes>,
    ) -> Result<HybridState, ModelError> {
        let types = types.into();
        KvTypes::new(types.k, types.v).map_err(|msg| ModelError::Config {
            field: "kv dtype".into(),
            msg,
        })?;
        let dtype = types.k;
        types
            .check_width(self.cfg.kv_dim(), self.cfg.head_dim)
            .map_err(|msg| ModelError::Config {
                field: "kv dtype".into(),
                msg,
            })?;
        if capacity == 0 || slots == 0 {
            return Err(ModelError::Config {
                field: "hybrid state".into(),
                msg: format!("capacity {capacity} and slots {slots} must be > 0"),
            });
        }
        let c = &self.cfg;
        let w = c.kv_dim();
        let stride = capacity.div_ceil(KV_ROW_ALIGN) * KV_ROW_ALIGN;
        let (conv_len, delta_len) = self.recurrent_lens();
        let delta_layers = c.hybrid.as_ref().map_or(0, |hy| {
            hy.mixers.iter().filter(|&&m| m == Mixer::DeltaNet).count()
        });
        let need = (slots
            * ((c.n_layers - delta_layers)
                * (types.k.bytes((stride * w) as u64) + types.v.bytes((stride * w) as u64))
                    as usize
                + 4 * delta_layers * (conv_len + delta_len))) as u64;
        // Leave room for the activations of a chunk and the driver (1/16 of the device), as
        // the dense KV cache does.
        if let Some((free, total)) = b.memory_free()
            && need > free.saturating_sub(total / 16)
        {
            return Err(ModelError::OutOfMemory {
                what: format!(
                    "hybrid state ({slots} x {capacity} positions, {} layers)",
                    c.n_layers
                ),
                need,
                available: free.saturating_sub(total / 16),
                total,
            });
        }
        let layers = (0..c.n_layers)
            .map(|i| match &c.hybrid {
                Some(hy) if hy.mixers[i] == Mixer::DeltaNet => Ok(LayerState::DeltaNet {
                    conv: b.alloc_f32((slots * conv_len).max(1))?,
                    delta: b.alloc_f32((slots * delta_len).max(1))?,
                }),
                _ => Ok(LayerState::Attention {
                    k: b.alloc_kv(slots * stride * w, dtype)?,
                    v: b.alloc_kv(slots * stride * w, types.v)?,
                }),
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(HybridState {
            capacity,
            dtype,
            v_dtype: types.v,
            rot: KvRot::for_types(types, self.cfg.head_dim, b.rotate_values()),
            centre: match crate::key_centre::centred(types) && b.centre_keys() {
                true => self.key_centre(b, capacity)?,
                false => Vec::new(),
            },
            stride,
            slots,
            layers,
            next: (0..slots).map(|_| Cell::new(0)).collect(),
            zeros: b.alloc_f32(conv_len.max(delta_len).max(1))?,
        })
    }

    /// Zeroes `slot`'s recurrent states so it starts a new sequence at position 0 (its KV rows
    /// need no reset: attention reads only positions already written).
    pub fn reset_slot<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        slot: usize,
    ) -> Result<(), ModelError> {
        check_slot(st, slot)?;
        let (conv_len, delta_len) = self.recurrent_lens();
        for l in &st.layers {
            if let LayerState::DeltaNet { conv, delta } = *l {
                b.copy(st.zeros, 0, conv, slot * conv_len, conv_len)?;
                b.copy(st.zeros, 0, delta, slot * delta_len, delta_len)?;
            }
        }
        st.next[slot].set(0);
        Ok(())
    }

    /// Runs `ids` at positions `start..start + ids.len()` (`start` must be `st.next[0]`) in
    /// slot 0, updating the state, and returns the requested logits (`[vocab]` for `Last`,
    /// `[n, vocab]` for `All`).
    pub fn forward<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        ids: &[u32],
        start: usize,
        want: Logits,
    ) -> Result<Vec<f32>, ModelError> {
        self.forward_slot(b, st, 0, ids, start, want)
    }

    /// [`HybridModel::forward`] for the sequence in slot `slot` (`start` must be
    /// `st.next[slot]`).
    pub fn forward_slot<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        slot: usize,
        ids: &[u32],
        start: usize,
        want: Logits,
    ) -> Result<Vec<f32>, ModelError> {
        check_slot(st, slot)?;
        if ids.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        let next = &st.next[slot];
        if start != next.get() {
            return Err(ModelError::StateOrder {
                expected: next.get(),
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
        // Every row's logits: pieces that fit the logits buffer.
        let step = match want {
            Logits::All => self.chunk.min(LOGITS_ROWS),
            Logits::Last => self.chunk,
        };
        for (ci, chunk) in ids.chunks(step).enumerate() {
            let pos0 = start + ci * step;
            let is_last = pos0 + chunk.len() == end;
            let positions: Vec<u32> = (pos0..pos0 + chunk.len()).map(|p| p as u32).collect();
            b.write_u32(self.s.ids, chunk)?;
            b.write_u32(self.s.pos, &positions)?;
            let want = match want {
                Logits::All => Some(Logits::All),
                Logits::Last if is_last => Some(Logits::Last),
                Logits::Last => None,
            };
            let inputs = StepInputs {
                ids: self.s.ids,
                pos: self.s.pos,
                rows: KvRows::Slot(slot),
            };
            let rows = self.graph(b, st, &inputs, chunk.len(), want)?;
            next.set(pos0 + chunk.len());
            if let Some(rows) = rows {
                let mut l = vec![0f32; rows * vocab];
                b.read_f32(self.s.logits, 0, &mut l)?;
                out.extend(l);
            }
        }
        Ok(out)
    }

    /// The tensor a forward leaves its logits in (`[rows, vocab]`).
    pub fn logits_tensor(&self) -> Tensor {
        self.s.logits
    }

    /// Issues one batched decode step over the first `rows` slots of `st`: row `i` is slot `i`,
    /// its token id in `ids[i]` and position in `pos[i]` (a position >= the capacity marks an
    /// idle slot: its KV rows and recurrent state are not touched and its logits row is
    /// meaningless). The `[rows, vocab]` logits land in `logits_tensor()`. A capturing backend
    /// records this once and replays it every step; `st.next` is not advanced (the caller
    /// tracks positions).
    pub fn decode_slots_graph<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        ids: Tensor,
        pos: Tensor,
        rows: usize,
    ) -> Result<(), ModelError> {
        if rows == 0 || rows > st.slots || rows > self.chunk.min(LOGITS_ROWS) {
            return Err(ModelError::Config {
                field: "slots".into(),
                msg: format!(
                    "{rows} decode rows for a {}-slot state and {} logits rows (the chunk, at \
                     most {LOGITS_ROWS})",
                    st.slots,
                    self.chunk.min(LOGITS_ROWS)
                ),
            });
        }
        let inputs = StepInputs {
            ids,
            pos,
            rows: KvRows::PerRow,
        };
        self.graph(b, st, &inputs, rows, Some(Logits::All))
            .map(|_| ())
    }

    /// The forward of `n` tokens whose ids and positions are in `inp`.
    fn graph<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        inp: &StepInputs,
        n: usize,
        want: Option<Logits>,
    ) -> Result<Option<usize>, ModelError> {
        let (c, s, w) = (&self.cfg, &self.s, &self.weights);
        let h = c.hidden_size;
        let (conv_len, delta_len) = self.recurrent_lens();
        b.mark("embed");
        b.embedding(w.embed, c.vocab_size, h, inp.ids, n, c.embed_scale, s.x)?;
        for (i, lw) in w.layers.iter().enumerate() {
            let attn_norm = (lw.attn_norm, c.rms_eps, c.norm_offset);
            // The norm a dense MLP applies to the mixer's output (which may prepare it).
            let ffn_norm =
                matches!(lw.ffn, FfnWeights::Dense(_)).then_some((lw.ffn_norm, c.norm_offset));
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
                    let kv = st.kv_view(i, k, v, inp.rows);
                    let lc = &c.layers[i];
                    let (att, tmp) = (&s.att, (s.h, s.o));
                    let (x, pos) = (s.x, inp.pos);
                    blocks::attention(
                        b, c, lc, &refs, att, x, attn_norm, tmp, n, pos, &kv, ffn_norm,
                    )?;
                }
                (MixerWeights::DeltaNet(dw), LayerState::DeltaNet { conv, delta }) => {
                    let hy = c.hybrid.as_ref().ok_or_else(|| ModelError::Config {
                        field: format!("layers[{i}]"),
                        msg: "DeltaNet weights without a hybrid config".into(),
                    })?;
                    let d = hy.delta;
                    b.mark("delta_in_proj");
                    let ws = [(&dw.qkv, s.qkv), (&dw.z, s.z), (&dw.b, s.b), (&dw.a, s.a)];
                    b.norm_linears(s.x, attn_norm, n, s.h, &ws)?;
                    let cd = hy.conv_dim();
                    let conv = st.state_view(conv, conv_len, inp.rows, inp.pos);
                    let delta = st.state_view(delta, delta_len, inp.rows, inp.pos);
                    b.mark("delta_conv");
                    b.causal_conv1d(s.qkv, n, cd, hy.conv_kernel, dw.conv, &conv, s.qkv_conv)?;
                    b.mark("delta_rule");
                    let norm = DeltaOutNorm {
                        z: s.z,
                        weight: dw.norm,
                        eps: c.rms_eps,
                        core: s.core,
                    };
                    let (a, bb, al, dt) = (s.a, s.b, dw.a_log, dw.dt_bias);
                    let q = s.qkv_conv;
                    b.gated_delta_rule_norm(q, n, &d, a, bb, al, dt, &delta, &norm, s.normed)?;
                    // out_proj with the residual add in its epilogue.
                    b.mark("delta_out");
                    match ffn_norm {
                        Some(next) => {
                            b.linear_add_before_norm(&dw.out, s.normed, n, (s.x, s.o), next)?
                        }
                        None => b.linear_add(&dw.out, s.normed, n, s.x, s.o)?,
                    }
                }
                _ => {
                    return Err(ModelError::Config {
                        field: format!("layers[{i}]"),
                        msg: "the weights and the recurrent state disagree on the mixer".into(),
                    });
                }
            }

            let tmp = (s.gate, s.up, s.act);
            match &lw.ffn {
                FfnWeights::Dense(m) => {
                    // RMSNorm + gate/up + activation (one fused dispatch where the backend has
                    // it), then down with the residual add in its epilogue.
                    b.mark("mlp");
                    b.norm_gated_mlp(&NormMlp {
                        x: s.x,
                        norm: lw.ffn_norm,
                        eps: c.rms_eps,
                        norm_offset: c.norm_offset,
                        n,
                        h: s.h,
                        gate: &m.gate,
                        up: &m.up,
                        act: c.activation,
                        gate_out: s.gate,
                        up_out: s.up,
                        out: s.act,
                    })?;
                    match w.layers.get(i + 1) {
                        Some(next) => {
                            let next = (next.attn_norm, c.norm_offset);
                            b.linear_add_before_norm(&m.down, s.act, n, (s.x, s.o), next)?;
                        }
                        None => b.linear_add(&m.down, s.act, n, s.x, s.o)?,
                    }
                    continue;
                }
                FfnWeights::Moe(m) => {
                    let mc = c.moe.as_ref().ok_or_else(|| ModelError::Config {
                        field: format!("layers[{i}]"),
                        msg: "MoE weights without a MoE config".into(),
                    })?;
                    let (ids, ew) = (s.expert_ids, s.expert_w);
                    let (ne, k, act) = (mc.n_experts, mc.top_k, c.activation);
                    if m.shared.is_none() {
                        // No shared MLP of its own (none, or stacked with the experts and
                        // routed to every token in one more slot): one op, residual add
                        // included.
                        b.mark("mlp");
                        b.moe_ffn(&MoeFfn {
                            x: s.x,
                            norm: lw.ffn_norm,
                            eps: c.rms_eps,
                            norm_offset: c.norm_offset,
                            n,
                            h: s.h,
                            router: &m.router,
                            logits: s.router,
                            n_experts: ne,
                            top_k: k,
                            renormalize: mc.renormalize,
                            shared: m.shared_stacked,
                            experts: &m.experts,
                            act,
                            ids,
                            weights: ew,
                            scratch: s.expert_act,
                            out: s.o,
                        })?;
                        continue;
                    }
                    b.mark("norm");
                    b.rmsnorm(s.x, lw.ffn_norm, n, h, c.rms_eps, c.norm_offset, s.h)?;
                    b.mark("mlp");
                    b.linear(&m.router, s.h, n, s.router)?;
                    b.moe_route(s.router, n, ne, k, mc.renormalize, false, ids, ew)?;
                    b.moe_experts(s.h, n, &m.experts, act, k, ids, ew, s.expert_act, s.o)?;
                    if let Some(sh) = &m.shared {
                        let e = &sh.mlp;
                        blocks::mlp(b, act, &e.gate, &e.up, &e.down, s.h, n, tmp, s.shared)?;
                        b.linear(&sh.gate, s.h, n, s.shared_gate)?;
                        b.sigmoid_mul(s.shared, s.shared_gate, n, h, true)?;
                        b.add_inplace(s.o, s.shared, n * h)?;
                    }
                }
            }
            b.mark("residual");
            blocks::residual_add(b, s.x, s.o, None, s.h, n, c)?;
        }
        let Some(want) = want else {
            return Ok(None);
        };
        b.mark("lm_head");
        let tmp = (s.last, s.h);
        let rows = blocks::logits(b, c, w.final_norm, &w.lm_head, s.x, n, tmp, want, s.logits)?;
        Ok(Some(rows))
    }
}

fn check_slot(st: &HybridState, slot: usize) -> Result<(), ModelError> {
    if slot >= st.slots {
        return Err(ModelError::Config {
            field: "slot".into(),
            msg: format!("slot {slot} of a {}-slot state", st.slots),
        });
    }
    Ok(())
}
