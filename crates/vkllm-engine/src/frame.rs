//! Frame-budget decoding for a host that shares its GPU (a game, an editor): each
//! [`FrameDecoder::step`] runs about a time budget of decode work, as slices of layers of the
//! current token's forward, each submitted and waited for before the next is chosen from the
//! measured cost per layer; a hook sees the residual stream after each slice on the device.
//! Tokens are drawn on the device where the backend can (`Backend::sample_token`: only the
//! token comes back), else on the host: the same draw either way.

use std::time::{Duration, Instant};

use vkllm_cpu::sampler::{SamplingParams, sample};
use vkllm_models::{Backend, KvCache, KvTypes, Logits, Model, Tensor};

use crate::error::EngineError;

/// What a layer hook sees: the residual stream after layer `layer` (0-based) of the token at
/// `position`, `width` f32 values in row 0 of `hidden`, a tensor of the decoder's backend (for
/// the Vulkan backend `VulkanBackend::tensor_buffer` gives its device buffer: no copy to the
/// CPU). Valid until the hook returns.
#[derive(Clone, Copy, Debug)]
pub struct LayerView {
    pub layer: usize,
    pub position: usize,
    pub hidden: Tensor,
    pub width: usize,
}

/// What one [`FrameDecoder::step`] did.
#[derive(Clone, Debug, Default)]
pub struct FrameOut {
    /// Tokens finished in this call, in order.
    pub tokens: Vec<u32>,
    /// Layers run (of any token).
    pub layers: usize,
    /// Wall time of the call.
    pub elapsed: Duration,
    /// The budget left (zero when it was used up or overrun).
    pub remaining: Duration,
}

/// Weight of the newest measurement in the per-layer and head cost estimates.
const EMA: f64 = 0.25;

/// One sequence decoded within frame budgets on a dense model.
pub struct FrameDecoder<B: Backend> {
    backend: B,
    model: Model,
    kv: KvCache,
    sampling: SamplingParams,
    seq_id: u64,
    /// Tokens whose keys and values are in the cache (the prompt, then the generated ones).
    history: Vec<u32>,
    /// The last sampled token, the input of the forward in flight or the next one.
    next: Option<u32>,
    /// Layers done of `next`'s forward (`None`: not begun).
    done: Option<usize>,
    generated: u64,
    /// How often each token was generated (the sampler's penalties), as `Session` counts.
    counts: Vec<u32>,
    /// Seconds per layer (slices of one token) and for embedding + head + sampling.
    per_layer: Option<f64>,
    head: Option<f64>,
}

impl<B: Backend> FrameDecoder<B> {
    /// A decoder with a `ctx`-position KV cache stored as `kv`, sampling with `sampling` (its
    /// RNG counter keyed by `seq_id`).
    pub fn new(
        mut backend: B,
        model: Model,
        ctx: usize,
        kv: impl Into<KvTypes>,
        sampling: SamplingParams,
        seq_id: u64,
    ) -> Result<Self, EngineError> {
        sampling.validate(model.cfg.vocab_size)?;
        let kv = model.new_kv_slots(&mut backend, ctx, 1, kv)?;
        let counts = vec![0; model.cfg.vocab_size];
        Ok(FrameDecoder {
            backend,
            model,
            kv,
            sampling,
            seq_id,
            history: Vec::new(),
            next: None,
            done: None,
            generated: 0,
            counts,
            per_layer: None,
            head: None,
        })
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Tokens in the cache (prompt and generated, without the one last sampled).
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// The estimated cost of one layer of a decode step (after the first slice ran).
    pub fn layer_cost(&self) -> Option<Duration> {
        self.per_layer.map(Duration::from_secs_f64)
    }

    /// Runs the prompt (one forward, not budgeted) and samples the first token, which the next
    /// [`FrameDecoder::step`] decodes from.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<u32, EngineError> {
        if ids.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if ids.len() >= self.kv.capacity {
            return Err(EngineError::PromptTooLong {
                prompt: ids.len(),
                ctx: self.kv.capacity,
            });
        }
        let logits = self
            .model
            .forward(&mut self.backend, &self.kv, ids, 0, Logits::Last)?;
        self.history = ids.to_vec();
        self.generated = 0;
        self.counts.fill(0);
        self.done = None;
        let id = self.draw(&logits);
        self.next = Some(id);
        Ok(id)
    }

    /// The token of the logits the head left: sampled on the device where the backend can
    /// (the same draw as on the host), else read back and sampled here.
    fn draw_head(&mut self) -> Result<u32, EngineError> {
        let vocab = self.model.cfg.vocab_size;
        let t = self.model.logits_tensor();
        let on_device = self.backend.sample_token(
            t,
            vocab,
            &self.sampling,
            &self.counts,
            self.seq_id,
            self.generated,
        )?;
        if let Some(id) = on_device {
            self.generated += 1;
            return Ok(id);
        }
        let mut logits = vec![0f32; vocab];
        self.backend.read_f32(t, 0, &mut logits)?;
        Ok(self.draw(&logits))
    }

    fn draw(&mut self, logits: &[f32]) -> u32 {
        let id = sample(
            logits,
            &self.sampling,
            &self.counts,
            self.seq_id,
            self.generated,
        );
        self.generated += 1;
        id
    }

    /// Runs decode work for about `budget`: slices of layers of the current token's forward,
    /// as many layers per slice as the measured cost per layer fits in what is left, each
    /// submitted and waited for; the head (final norm, LM head, sampling) runs when its
    /// measured cost fits. A call's first piece of work (one layer, or the head) runs whatever
    /// the budget, so a budget below one layer's cost still makes progress. `hook` sees the residual stream after each slice. Returns the
    /// tokens finished; a call that finds the context full is an error (one that fills it
    /// returns what it finished).
    pub fn step(
        &mut self,
        budget: Duration,
        hook: &mut dyn FnMut(&B, LayerView),
    ) -> Result<FrameOut, EngineError> {
        let t0 = Instant::now();
        let n_layers = self.model.cfg.layers.len();
        let mut out = FrameOut::default();
        let left = |t0: Instant| budget.saturating_sub(t0.elapsed()).as_secs_f64();
        loop {
            let Some(token) = self.next else {
                return Err(EngineError::EmptyPrompt);
            };
            let pos = self.history.len();
            let done = match self.done {
                Some(d) => d,
                None => {
                    if pos >= self.kv.capacity && !out.tokens.is_empty() {
                        break;
                    }
                    if pos >= self.kv.capacity {
                        return Err(EngineError::ContextExceeded {
                            prompt: pos,
                            max_new: 1,
                            ctx: self.kv.capacity,
                        });
                    }
                    self.model
                        .sliced_begin(&mut self.backend, &self.kv, token, pos)?;
                    self.counts[token as usize] += 1;
                    0
                }
            };
            if done < n_layers {
                // A call's first work always runs; later slices only when they fit.
                let fit = match self.per_layer {
                    Some(c) if c > 0.0 => (left(t0) / c).floor() as usize,
                    _ => 1,
                };
                if fit == 0 && worked(&out) {
                    self.done = Some(done);
                    break;
                }
                let k = fit.clamp(1, n_layers - done);
                let ts = Instant::now();
                self.model
                    .sliced_layers(&mut self.backend, &self.kv, done..done + k)?;
                self.backend.sync()?;
                let per = ts.elapsed().as_secs_f64() / k as f64;
                self.per_layer = Some(self.per_layer.map_or(per, |c| c + EMA * (per - c)));
                out.layers += k;
                self.done = Some(done + k);
                hook(
                    &self.backend,
                    LayerView {
                        layer: done + k - 1,
                        position: pos,
                        hidden: self.model.hidden_tensor(),
                        width: self.model.cfg.hidden_size,
                    },
                );
                continue;
            }
            // Unmeasured, the head runs only as the call's first work.
            if worked(&out) && self.head.is_none_or(|h| h > left(t0)) {
                break;
            }
            let ts = Instant::now();
            self.model.sliced_head(&mut self.backend)?;
            let id = self.draw_head()?;
            let h = ts.elapsed().as_secs_f64();
            self.head = Some(self.head.map_or(h, |c| c + EMA * (h - c)));
            self.history.push(token);
            self.next = Some(id);
            self.done = None;
            out.tokens.push(id);
            if left(t0) <= 0.0 {
                break;
            }
        }
        out.elapsed = t0.elapsed();
        out.remaining = budget.saturating_sub(out.elapsed);
        Ok(out)
    }
}

/// Whether a call has done any work yet (its first piece of work runs whatever the budget).
fn worked(out: &FrameOut) -> bool {
    out.layers > 0 || !out.tokens.is_empty()
}
