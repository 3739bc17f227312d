//! Forwards are verbs: the dense decoder forward, written once over the `Backend` ops.
//!
//! Every dense family runs this one graph; the differences are the feature flags resolved in
//! `ModelConfig` (q/k norm, sandwich norms, soft-caps, windows, per-layer RoPE, ...).
//! Prompts are processed in chunks of at most `chunk` tokens over a fixed set of scratch
//! tensors, so memory does not grow with the prompt.

use crate::backend::{
    Backend, CaptureId, KeyCentre, KvRot, KvRows, KvType, KvTypes, NormMlp, NormQkv, Tensor,
};
use crate::blocks;
use crate::config::ModelConfig;
use crate::error::ModelError;
pub use crate::kv_cache::{KV_ROW_ALIGN, KvCache, KvLayer, KvSharing};
use crate::weights::{TensorSource, Weights};

/// The activations of one chunk: allocated once, reused by every forward.
#[derive(Clone, Debug)]
struct Scratch {
    ids: Tensor,
    pos: Tensor,
    x: Tensor,
    h: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    /// q and k after the per-head norm (models with q/k norm).
    qn: Tensor,
    kn: Tensor,
    /// q, k and v packed per token (`[chunk, q + k + v]`), for backends that fuse the projections.
    qkv: Tensor,
    att: Tensor,
    o: Tensor,
    gate: Tensor,
    up: Tensor,
    act: Tensor,
    last: Tensor,
    logits: Tensor,
}

/// Which logits a forward returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's row (generation).
    Last,
    /// Every token's row, `[n, vocab]` (parity tests, perplexity).
    All,
}

/// A dense model loaded on a backend.
pub struct Model {
    pub cfg: ModelConfig,
    pub weights: Weights,
    chunk: usize,
    s: Scratch,
    /// Per layer, the key centring of quantized K caches, measured on the first such cache.
    centre: crate::key_centre::Centres,
}

/// Default prefill chunk: prompts longer than this run as several forwards.
pub const DEFAULT_CHUNK: usize = 128;

/// Most logits rows one forward produces: `Logits::All` over a longer prompt runs in pieces of
/// this many tokens (the logits buffer is `min(chunk, LOGITS_ROWS) x vocab`, so large chunks do
/// not cost `chunk x vocab` floats: 311 MB for a 151936-token vocabulary at 512).
pub const LOGITS_ROWS: usize = 128;

/// A sliced forward's pieces captured for replay ([`Model::capture_sliced`]): the embedding,
/// each layer, the head.
#[derive(Debug)]
pub struct SlicedCaptures {
    ids: Vec<CaptureId>,
}

impl Model {
    /// Loads the weights and allocates scratch for chunks of up to `chunk` tokens.
    pub fn load<B: Backend>(
        cfg: ModelConfig,
        src: &dyn TensorSource,
        b: &mut B,
        chunk: usize,
    ) -> Result<Self, ModelError> {
        let weights = Weights::load(&cfg, src, b)?;
        let chunk = chunk.max(1);
        let (h, ff) = (cfg.hidden_size, cfg.intermediate_size);
        let s = Scratch {
            ids: b.alloc_u32(chunk)?,
            pos: b.alloc_u32(chunk)?,
            x: b.alloc_f32(chunk * h)?,
            h: b.alloc_f32(chunk * h)?,
            q: b.alloc_f32(chunk * cfg.q_dim())?,
            k: b.alloc_f32(chunk * cfg.kv_dim())?,
            v: b.alloc_f32(chunk * cfg.kv_dim())?,
            qn: b.alloc_f32(chunk * cfg.q_dim())?,
            qkv: b.alloc_f32(chunk * (cfg.q_dim() + 2 * cfg.kv_dim()))?,
            kn: b.alloc_f32(if cfg.qk_norm { chunk * cfg.kv_dim() } else { 1 })?,
            att: b.alloc_f32(chunk * cfg.q_dim())?,
            o: b.alloc_f32(chunk * h)?,
            gate: b.alloc_f32(chunk * ff)?,
            up: b.alloc_f32(chunk * ff)?,
            act: b.alloc_f32(chunk * ff)?,
            last: b.alloc_f32(h)?,
            logits: b.alloc_f32(chunk.min(LOGITS_ROWS) * cfg.vocab_size)?,
        };
        Ok(Model {
            cfg,
            weights,
            chunk,
            s,
            centre: Default::default(),
        })
    }

    /// Rows of the logits buffer: `min(chunk, LOGITS_ROWS)`.
    pub fn logits_rows(&self) -> usize {
        self.chunk.min(LOGITS_ROWS)
    }

    /// A KV cache for one sequence of `capacity` positions (f32).
    pub fn new_kv<B: Backend>(&self, b: &mut B, capacity: usize) -> Result<KvCache, ModelError> {
        self.new_kv_slots(b, capacity, 1, KvType::F32)
    }

    /// A KV cache for `slots` sequences of `capacity` positions each, stored as `types` (one
    /// type, or K's and V's).
    pub fn new_kv_slots<B: Backend>(
        &self,
        b: &mut B,
        capacity: usize,
        slots: usize,
        types: impl Into<KvTypes>,
    ) -> Result<KvCache, ModelError> {
        self.new_kv_slots_sharing(b, capacity, slots, types, KvSharing::Copy)
    }

    /// [`Model::new_kv_slots`] giving prefixes to other slots as `sharing` says.
    pub fn new_kv_slots_sharing<B: Backend>(
        &self,
        b: &mut B,
        capacity: usize,
        slots: usize,
        types: impl Into<KvTypes>,
        sharing: KvSharing,
    ) -> Result<KvCache, ModelError> {
        let types = types.into();
        KvTypes::new(types.k, types.v).map_err(|msg| ModelError::Config {
            field: "kv dtype".into(),
            msg,
        })?;
        types
            .check_width(self.cfg.kv_dim(), self.cfg.head_dim)
            .map_err(|msg| ModelError::Config {
                field: "kv dtype".into(),
                msg,
            })?;
        let windows: Vec<Option<usize>> = self.cfg.layers.iter().map(|l| l.window).collect();
        let shape = (self.cfg.kv_dim(), capacity, self.chunk, slots);
        let mut kv = KvCache::alloc_sharing(b, &windows, shape, types, sharing)?;
        kv.rot = KvRot::for_types(types, self.cfg.head_dim, b.rotate_values());
        if crate::key_centre::centred(types) && b.centre_keys() {
            kv.centre = self.key_centre(b, capacity)?;
        }
        Ok(kv)
    }

    /// The key centring of this model's quantized K caches (`crate::key_centre`), measured once
    /// (the calibration cache stays allocated: backends free tensors with the backend).
    fn key_centre<B: Backend>(
        &self,
        b: &mut B,
        capacity: usize,
    ) -> Result<Vec<Option<KeyCentre>>, ModelError> {
        crate::key_centre::measured(&self.centre, b, &self.cfg, capacity, |b, ids| {
            let tmp = self.new_kv_slots(b, ids.len(), 1, KvType::F32)?;
            self.forward(b, &tmp, ids, 0, Logits::Last)?;
            // A ring (sliding window) keeps rows of its last positions.
            let n = ids.len();
            Ok(tmp
                .layers
                .iter()
                .map(|l| Some((l.k, l.ring.min(n))))
                .collect())
        })
    }

    /// Runs `ids` at positions `start..start + ids.len()`, writing their keys and values into
    /// `kv` (slot 0), and returns the requested logits (`[vocab]` for `Last`, `[n, vocab]` for
    /// `All`).
    pub fn forward<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        ids: &[u32],
        start: usize,
        want: Logits,
    ) -> Result<Vec<f32>, ModelError> {
        self.forward_slot(b, kv, 0, ids, start, want)
    }

    /// [`Model::forward`] for the sequence in slot `slot` of `kv`.
    pub fn forward_slot<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        slot: usize,
        ids: &[u32],
        start: usize,
        want: Logits,
    ) -> Result<Vec<f32>, ModelError> {
        if slot >= kv.slots {
            return Err(ModelError::Config {
                field: "slot".into(),
                msg: format!("slot {slot} of a {}-slot cache", kv.slots),
            });
        }
        if ids.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        let end = start + ids.len();
        if end > kv.capacity {
            return Err(ModelError::ContextFull {
                pos: end - 1,
                capacity: kv.capacity,
            });
        }
        kv.check_chunk(self.chunk.min(ids.len()))?;
        let vocab = self.cfg.vocab_size;
        let mut out = Vec::with_capacity(if want == Logits::All {
            ids.len() * vocab
        } else {
            vocab
        });
        // Every row's logits: pieces that fit the logits buffer.
        let step = match want {
            Logits::All => self.logits_rows(),
            Logits::Last => self.chunk,
        };
        for (ci, chunk) in ids.chunks(step).enumerate() {
            let pos0 = start + ci * step;
            let is_last = pos0 + chunk.len() == end;
            let logits = match want {
                Logits::All => Logits::All,
                Logits::Last if is_last => Logits::Last,
                Logits::Last => {
                    self.chunk_forward(b, kv, slot, chunk, pos0, None)?;
                    continue;
                }
            };
            out.extend(self.chunk_forward(b, kv, slot, chunk, pos0, Some(logits))?);
        }
        Ok(out)
    }

    fn chunk_forward<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        slot: usize,
        ids: &[u32],
        pos0: usize,
        want: Option<Logits>,
    ) -> Result<Vec<f32>, ModelError> {
        let n = ids.len();
        let positions: Vec<u32> = (pos0..pos0 + n).map(|p| p as u32).collect();
        b.write_u32(self.s.ids, ids)?;
        b.write_u32(self.s.pos, &positions)?;
        let inputs = StepInputs {
            ids: self.s.ids,
            pos: self.s.pos,
            rows: KvRows::Slot(slot),
        };
        let Some(rows) = self.graph(b, kv, &inputs, n, want)? else {
            return Ok(Vec::new());
        };
        let mut out = vec![0f32; rows * self.cfg.vocab_size];
        b.read_f32(self.s.logits, 0, &mut out)?;
        Ok(out)
    }

    /// Starts a forward of one token `id` at `pos` of slot 0 run in slices of layers (a host
    /// that shares its GPU runs it within frame budgets): writes the step's inputs and records
    /// the embedding. Then [`Model::sliced_layers`] for every layer in order, then
    /// [`Model::sliced_head`]. [`Backend::sync`] between them bounds what is in flight.
    pub fn sliced_begin<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        id: u32,
        pos: usize,
    ) -> Result<(), ModelError> {
        self.sliced_inputs(b, kv, id, pos)?;
        self.sliced_embed(b)
    }

    /// Writes a sliced forward's inputs (token `id` at `pos`) without recording anything: what
    /// [`Model::sliced_begin`] does before the embedding, for replayed captures
    /// ([`Model::capture_sliced`]).
    pub fn sliced_inputs<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        id: u32,
        pos: usize,
    ) -> Result<(), ModelError> {
        if pos >= kv.capacity {
            return Err(ModelError::ContextFull {
                pos,
                capacity: kv.capacity,
            });
        }
        if id as usize >= self.cfg.vocab_size {
            return Err(ModelError::TokenOutOfRange {
                id,
                vocab: self.cfg.vocab_size,
            });
        }
        b.write_u32(self.s.ids, &[id])?;
        b.write_u32(self.s.pos, &[pos as u32])
    }

    fn sliced_embed<B: Backend>(&self, b: &mut B) -> Result<(), ModelError> {
        let c = &self.cfg;
        b.mark("embed");
        b.embedding(
            self.weights.embed,
            c.vocab_size,
            c.hidden_size,
            self.s.ids,
            1,
            c.embed_scale,
            self.s.x,
        )
    }

    /// The pieces of a sliced forward over `kv` captured once for replay (the embedding, each
    /// layer, the head) on a backend that captures (`None` on one that runs ops as they come).
    /// Replay them with [`Model::replay_sliced`] after [`Model::sliced_inputs`]; release them
    /// with [`Model::release_sliced`].
    pub fn capture_sliced<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
    ) -> Result<Option<SlicedCaptures>, ModelError> {
        // Capturing may grow scratch the earlier pieces were recorded over: a second pass
        // finds it grown.
        for _ in 0..2 {
            let cap = kv.capacity;
            let Some(embed) = b.capture(cap, |b| self.sliced_embed(b))? else {
                return Ok(None);
            };
            let mut ids = vec![embed];
            for l in 0..self.cfg.layers.len() {
                match b.capture(cap, |b| self.sliced_layers(b, kv, l..l + 1))? {
                    Some(id) => ids.push(id),
                    None => return Ok(None),
                }
            }
            match b.capture(cap, |b| self.sliced_head(b))? {
                Some(id) => ids.push(id),
                None => return Ok(None),
            }
            if b.captures_current(&ids)? {
                return Ok(Some(SlicedCaptures { ids }));
            }
            b.release_captures(&ids);
        }
        Err(ModelError::Config {
            field: "capture".into(),
            msg: "the sliced forward's scratch grew while it was captured twice".into(),
        })
    }

    /// Runs captured pieces as one submission: the embedding when `embed` (the inputs written
    /// by [`Model::sliced_inputs`]), layers `layers`, the head when `head`, and waits for them;
    /// with `nowait` only submits them ([`Backend::replay_captures_nowait`]: with the head, whose
    /// logits are read next anyway, that read or sampling waits, one host round trip less).
    /// [`ModelError::CaptureStale`] when later work replaced their scratch: capture again.
    pub fn replay_sliced<B: Backend>(
        &self,
        b: &mut B,
        c: &SlicedCaptures,
        embed: bool,
        layers: std::ops::Range<usize>,
        head: bool,
        nowait: bool,
    ) -> Result<(), ModelError> {
        let n = self.cfg.layers.len();
        if layers.end > n || layers.start > layers.end {
            return Err(ModelError::Config {
                field: "layers".into(),
                msg: format!("{layers:?} of {n} layers"),
            });
        }
        if c.ids.len() != n + 2 {
            return Err(ModelError::Config {
                field: "capture".into(),
                msg: format!(
                    "captures of a {}-layer forward replayed on a {n}-layer model",
                    c.ids.len().saturating_sub(2)
                ),
            });
        }
        let mut ids = Vec::with_capacity(layers.len() + 2);
        if embed {
            ids.push(c.ids[0]);
        }
        ids.extend_from_slice(&c.ids[1 + layers.start..1 + layers.end]);
        if head {
            ids.push(c.ids[n + 1]);
        }
        if nowait {
            return b.replay_captures_nowait(&ids);
        }
        b.replay_captures(&ids)
    }

    /// Drops captured pieces.
    pub fn release_sliced<B: Backend>(&self, b: &mut B, c: SlicedCaptures) {
        b.release_captures(&c.ids);
    }

    /// Records layers `range` of the forward [`Model::sliced_begin`] started.
    pub fn sliced_layers<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        range: std::ops::Range<usize>,
    ) -> Result<(), ModelError> {
        if range.end > self.cfg.layers.len() || range.start > range.end {
            return Err(ModelError::Config {
                field: "layers".into(),
                msg: format!("{range:?} of {} layers", self.cfg.layers.len()),
            });
        }
        let inputs = StepInputs {
            ids: self.s.ids,
            pos: self.s.pos,
            rows: KvRows::Slot(0),
        };
        self.layers(b, kv, &inputs, 1, range)
    }

    /// The end of a sliced forward: records the final norm and LM head, whose `[vocab]` logits
    /// are then at the start of [`Model::logits_tensor`] (read them, or sample them on the
    /// device with [`Backend::sample_token`]).
    pub fn sliced_head<B: Backend>(&self, b: &mut B) -> Result<(), ModelError> {
        self.head(b, 1, Logits::Last).map(|_| ())
    }

    /// The residual stream between layers (`[n, hidden]` f32; row 0 for a sliced forward):
    /// what a layer hook reads.
    pub fn hidden_tensor(&self) -> Tensor {
        self.s.x
    }

    /// The most tokens one forward pass takes (longer prompts run as several chunks).
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// The token-id and position tensors a forward reads (u32, one per token of a chunk).
    pub fn step_inputs(&self) -> (Tensor, Tensor) {
        (self.s.ids, self.s.pos)
    }

    /// The tensor a forward leaves its logits in (`[rows, vocab]`).
    pub fn logits_tensor(&self) -> Tensor {
        self.s.logits
    }

    /// Issues one decode step's ops (n = 1) on `b` without writing its inputs or reading its
    /// output: the token id and position are whatever `step_inputs()` hold when the ops run,
    /// the logits land in `logits_tensor()`. A capturing backend records this once and replays
    /// it every token.
    pub fn decode_step_graph<B: Backend>(&self, b: &mut B, kv: &KvCache) -> Result<(), ModelError> {
        let inputs = StepInputs {
            ids: self.s.ids,
            pos: self.s.pos,
            rows: KvRows::Slot(0),
        };
        self.graph(b, kv, &inputs, 1, Some(Logits::Last))
            .map(|_| ())
    }

    /// Issues one batched decode step over the first `rows` slots of `kv`: row `i` is slot `i`,
    /// its token id in `ids[i]` and position in `pos[i]` (a position >= the capacity marks an
    /// idle slot: nothing is stored for it and its logits row is meaningless). The `[rows,
    /// vocab]` logits land in `logits_tensor()`. A capturing backend records this once and
    /// replays it every step.
    pub fn decode_slots_graph<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        ids: Tensor,
        pos: Tensor,
        rows: usize,
    ) -> Result<(), ModelError> {
        if rows == 0 || rows > kv.slots || rows > self.logits_rows() {
            return Err(ModelError::Config {
                field: "slots".into(),
                msg: format!(
                    "{rows} decode rows for a {}-slot cache and {} logits rows (the chunk, at \
                     most {LOGITS_ROWS})",
                    kv.slots,
                    self.logits_rows()
                ),
            });
        }
        let inputs = StepInputs {
            ids,
            pos,
            rows: KvRows::PerRow,
        };
        self.graph(b, kv, &inputs, rows, Some(Logits::All))
            .map(|_| ())
    }

    /// The forward of `n` tokens whose ids and positions are already in `step_inputs()`;
    /// returns how many logits rows it left in `logits_tensor()`.
    fn graph<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        inp: &StepInputs,
        n: usize,
        want: Option<Logits>,
    ) -> Result<Option<usize>, ModelError> {
        let (c, s, w) = (&self.cfg, &self.s, &self.weights);
        let h = c.hidden_size;
        b.mark("embed");
        b.embedding(w.embed, c.vocab_size, h, inp.ids, n, c.embed_scale, s.x)?;
        self.layers(b, kv, inp, n, 0..c.layers.len())?;
        let Some(want) = want else {
            return Ok(None);
        };
        self.head(b, n, want).map(Some)
    }

    /// Layers `range` of the forward of `n` tokens on the residual stream `x`.
    fn layers<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        inp: &StepInputs,
        n: usize,
        range: std::ops::Range<usize>,
    ) -> Result<(), ModelError> {
        let (c, s, w) = (&self.cfg, &self.s, &self.weights);
        let hd = c.head_dim;
        let layers = w.layers.iter().zip(c.layers.iter()).enumerate();
        for (li, (lw, lc)) in layers.skip(range.start).take(range.len()) {
            let view = kv.view(li, inp.rows);
            // attention block
            b.mark("qkv");
            let packed = b.norm_qkv(&NormQkv {
                x: s.x,
                norm: lw.attn_norm,
                eps: c.rms_eps,
                norm_offset: c.norm_offset,
                n,
                head_dim: hd,
                h: s.h,
                q: &lw.q,
                k: &lw.k,
                v: &lw.v,
                q_out: s.q,
                k_out: s.k,
                v_out: s.v,
                packed: s.qkv,
            })?;
            let qkv = (s.q, s.k, s.v, s.qn, s.kn);
            let norm = lw.q_norm.zip(lw.k_norm);
            let rk = blocks::rope_kv(c, lc, qkv, norm, n, inp.pos, packed.then_some(s.qkv));
            let p = blocks::attn_params(c, lc);
            // The input step (q/k norm, RoPE, KV append) and attention (a backend may run them
            // as one dispatch; it marks the profile regions).
            b.rope_attention(&rk, &view, &p, s.att)?;
            b.mark("o_proj");
            if lw.post_attn_norm.is_none() {
                let next = (lw.ffn_norm, c.norm_offset);
                b.linear_add_before_norm(&lw.o, s.att, n, (s.x, s.o), next)?;
            } else {
                b.linear(&lw.o, s.att, n, s.o)?;
                b.mark("residual");
                blocks::residual_add(b, s.x, s.o, lw.post_attn_norm, s.h, n, c)?;
            }

            // MLP block
            b.mark("gate_up");
            b.norm_gated_mlp(&NormMlp {
                x: s.x,
                norm: lw.ffn_norm,
                eps: c.rms_eps,
                norm_offset: c.norm_offset,
                n,
                h: s.h,
                gate: &lw.gate,
                up: &lw.up,
                act: c.activation,
                gate_out: s.gate,
                up_out: s.up,
                out: s.act,
            })?;
            b.mark("down");
            let next_layer = w.layers.get(li + 1).filter(|_| li + 1 < range.end);
            if let (None, Some(next)) = (lw.post_ffn_norm, next_layer) {
                let next = (next.attn_norm, c.norm_offset);
                b.linear_add_before_norm(&lw.down, s.act, n, (s.x, s.o), next)?;
            } else if lw.post_ffn_norm.is_none() {
                b.linear_add(&lw.down, s.act, n, s.x, s.o)?;
            } else {
                b.linear(&lw.down, s.act, n, s.o)?;
                b.mark("residual");
                blocks::residual_add(b, s.x, s.o, lw.post_ffn_norm, s.h, n, c)?;
            }
        }
        Ok(())
    }

    /// The final norm and LM head of the forward of `n` tokens: the rows of logits it leaves
    /// in `logits_tensor()`.
    fn head<B: Backend>(&self, b: &mut B, n: usize, want: Logits) -> Result<usize, ModelError> {
        let (c, s, w) = (&self.cfg, &self.s, &self.weights);
        let h = c.hidden_size;
        let (rows, src) = match want {
            Logits::All => (n, s.x),
            Logits::Last => {
                b.copy(s.x, (n - 1) * h, s.last, 0, h)?;
                (1, s.last)
            }
        };
        b.mark("final_norm");
        b.rmsnorm(src, w.final_norm, rows, h, c.rms_eps, c.norm_offset, s.h)?;
        b.mark("lm_head");
        b.linear(&w.lm_head, s.h, rows, s.logits)?;
        if let Some(cap) = c.final_softcap {
            b.softcap(s.logits, rows * c.vocab_size, cap)?;
        }
        Ok(rows)
    }
}

/// The token ids and positions a graph reads, and which KV rows they address.
struct StepInputs {
    ids: Tensor,
    pos: Tensor,
    rows: KvRows,
}
