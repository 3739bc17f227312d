//! Forwards are verbs: the dense decoder forward, written once over the `Backend` ops.
//!
//! Every dense family runs this one graph; the differences are the feature flags resolved in
//! `ModelConfig` (q/k norm, sandwich norms, soft-caps, windows, per-layer RoPE, ...).
//! Prompts are processed in chunks of at most `chunk` tokens over a fixed set of scratch
//! tensors, so memory does not grow with the prompt.

use crate::backend::{Backend, Tensor};
use crate::blocks::{self, AttnRefs, AttnScratch, KvSlot};
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::weights::{TensorSource, Weights};

/// The KV cache of one sequence: per layer, keys and values of `capacity` positions.
#[derive(Clone, Debug)]
pub struct KvCache {
    pub capacity: usize,
    pub layers: Vec<(Tensor, Tensor)>,
}

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
}

/// Default prefill chunk: prompts longer than this run as several forwards.
pub const DEFAULT_CHUNK: usize = 128;

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
            qn: b.alloc_f32(if cfg.qk_norm { chunk * cfg.q_dim() } else { 1 })?,
            kn: b.alloc_f32(if cfg.qk_norm { chunk * cfg.kv_dim() } else { 1 })?,
            att: b.alloc_f32(chunk * cfg.q_dim())?,
            o: b.alloc_f32(chunk * h)?,
            gate: b.alloc_f32(chunk * ff)?,
            up: b.alloc_f32(chunk * ff)?,
            act: b.alloc_f32(chunk * ff)?,
            last: b.alloc_f32(h)?,
            logits: b.alloc_f32(chunk * cfg.vocab_size)?,
        };
        Ok(Model {
            cfg,
            weights,
            chunk,
            s,
        })
    }

    /// A KV cache for `capacity` positions.
    pub fn new_kv<B: Backend>(&self, b: &mut B, capacity: usize) -> Result<KvCache, ModelError> {
        let w = self.cfg.kv_dim();
        let layers = (0..self.cfg.n_layers)
            .map(|_| Ok((b.alloc_f32(capacity * w)?, b.alloc_f32(capacity * w)?)))
            .collect::<Result<_, ModelError>>()?;
        Ok(KvCache { capacity, layers })
    }

    /// Runs `ids` at positions `start..start + ids.len()`, writing their keys and values into
    /// `kv`, and returns the requested logits (`[vocab]` for `Last`, `[n, vocab]` for `All`).
    pub fn forward<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        ids: &[u32],
        start: usize,
        want: Logits,
    ) -> Result<Vec<f32>, ModelError> {
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
        let vocab = self.cfg.vocab_size;
        let mut out = Vec::with_capacity(if want == Logits::All {
            ids.len() * vocab
        } else {
            vocab
        });
        for (ci, chunk) in ids.chunks(self.chunk).enumerate() {
            let pos0 = start + ci * self.chunk;
            let is_last = pos0 + chunk.len() == end;
            let logits = match want {
                Logits::All => Logits::All,
                Logits::Last if is_last => Logits::Last,
                Logits::Last => {
                    self.chunk_forward(b, kv, chunk, pos0, None)?;
                    continue;
                }
            };
            out.extend(self.chunk_forward(b, kv, chunk, pos0, Some(logits))?);
        }
        Ok(out)
    }

    fn chunk_forward<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        ids: &[u32],
        pos0: usize,
        want: Option<Logits>,
    ) -> Result<Vec<f32>, ModelError> {
        let n = ids.len();
        let positions: Vec<u32> = (pos0..pos0 + n).map(|p| p as u32).collect();
        b.write_u32(self.s.ids, ids)?;
        b.write_u32(self.s.pos, &positions)?;
        let Some(rows) = self.graph(b, kv, n, want)? else {
            return Ok(Vec::new());
        };
        let mut out = vec![0f32; rows * self.cfg.vocab_size];
        b.read_f32(self.s.logits, 0, &mut out)?;
        Ok(out)
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
        self.graph(b, kv, 1, Some(Logits::Last)).map(|_| ())
    }

    /// The forward of `n` tokens whose ids and positions are already in `step_inputs()`;
    /// returns how many logits rows it left in `logits_tensor()`.
    fn graph<B: Backend>(
        &self,
        b: &mut B,
        kv: &KvCache,
        n: usize,
        want: Option<Logits>,
    ) -> Result<Option<usize>, ModelError> {
        let (c, s, w) = (&self.cfg, &self.s, &self.weights);
        let h = c.hidden_size;
        b.embedding(w.embed, c.vocab_size, h, s.ids, n, c.embed_scale, s.x)?;
        let att = AttnScratch {
            q: s.q,
            k: s.k,
            v: s.v,
            qn: s.qn,
            kn: s.kn,
            att: s.att,
            g: s.att,
        };

        for (lw, (lc, &(kc, vc))) in w.layers.iter().zip(c.layers.iter().zip(&kv.layers)) {
            // attention block
            b.rmsnorm(s.x, lw.attn_norm, n, h, c.rms_eps, c.norm_offset, s.h)?;
            let refs = AttnRefs {
                q: &lw.q,
                k: &lw.k,
                v: &lw.v,
                o: &lw.o,
                q_norm: lw.q_norm,
                k_norm: lw.k_norm,
                gate: None,
            };
            let slot = KvSlot {
                k: kc,
                v: vc,
                capacity: kv.capacity,
            };
            blocks::attention(b, c, lc, &refs, &att, s.h, n, s.pos, slot, s.o)?;
            blocks::residual_add(b, s.x, s.o, lw.post_attn_norm, s.h, n, c)?;

            // MLP block
            b.rmsnorm(s.x, lw.ffn_norm, n, h, c.rms_eps, c.norm_offset, s.h)?;
            let tmp = (s.gate, s.up, s.act);
            blocks::mlp(
                b,
                c.activation,
                &lw.gate,
                &lw.up,
                &lw.down,
                s.h,
                n,
                tmp,
                s.o,
            )?;
            blocks::residual_add(b, s.x, s.o, lw.post_ffn_norm, s.h, n, c)?;
        }

        let Some(want) = want else {
            return Ok(None);
        };
        let tmp = (s.last, s.h);
        let rows = blocks::logits(b, c, w.final_norm, &w.lm_head, s.x, n, tmp, want, s.logits)?;
        Ok(Some(rows))
    }
}
