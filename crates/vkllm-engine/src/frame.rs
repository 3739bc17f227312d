//! Frame-budget decoding for a host that shares its GPU (a game, an editor): each
//! [`FrameDecoder::step`] runs about a time budget of decode work, as slices of layers of the
//! current token's forward, each submitted and waited for before the next is chosen from the
//! measured cost per layer; a hook sees the residual stream after each slice on the device.
//! Tokens are drawn on the device where the backend can (`Backend::sample_token`: only the
//! token comes back), else on the host: the same draw either way.

use std::time::{Duration, Instant};

use vkllm_cpu::sampler::{SamplingParams, sample};
use vkllm_models::{Backend, KvCache, KvTypes, Logits, Model, ModelError, SlicedCaptures, Tensor};

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

/// How a [`FrameDecoder`] runs its slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameOptions {
    /// Replay the forward's pieces (embedding, each layer, head) captured once, a slice being
    /// one submission of its layers' captures, where the backend captures
    /// ([`Model::capture_sliced`]); `false` (or a backend that runs ops as they come): record
    /// each slice's ops afresh (the reference).
    pub recorded: bool,
    /// With `recorded`: submit the head's capture without waiting for it, so the sampling
    /// that reads its logits waits once for both (one host round trip less per token);
    /// `false`: wait for the head, then sample (the reference).
    pub overlap_head: bool,
}

impl Default for FrameOptions {
    fn default() -> Self {
        FrameOptions {
            recorded: true,
            overlap_head: true,
        }
    }
}

/// Weight of the newest measurement in the slice and head cost estimates.
const EMA: f64 = 0.25;

/// The cost of a slice of `k` layers, `fixed + k * per_layer` (the fixed part: recording,
/// submitting and waiting for a slice), fitted by exponentially weighted least squares over
/// the slices run so far; while every slice had the same size the whole cost is per layer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SliceCost {
    seen: bool,
    k: f64,
    kk: f64,
    t: f64,
    kt: f64,
}

impl SliceCost {
    /// Adds a slice of `k` layers that took `secs`.
    pub fn observe(&mut self, k: usize, secs: f64) {
        let k = k as f64;
        let first = !self.seen;
        let mix = |old: f64, new: f64| if first { new } else { old + EMA * (new - old) };
        self.seen = true;
        self.k = mix(self.k, k);
        self.kk = mix(self.kk, k * k);
        self.t = mix(self.t, secs);
        self.kt = mix(self.kt, k * secs);
    }

    /// `(fixed, per_layer)` in seconds, both >= 0 (`None` before the first slice).
    pub fn estimate(&self) -> Option<(f64, f64)> {
        if !self.seen || self.k <= 0.0 {
            return None;
        }
        let var = self.kk - self.k * self.k;
        // Slices of (nearly) one size cannot separate the two parts.
        if var < 0.25 {
            return Some((0.0, (self.t / self.k).max(0.0)));
        }
        let per = (self.kt - self.k * self.t) / var;
        let fixed = self.t - per * self.k;
        if per <= 0.0 {
            return Some((self.t.max(0.0), 0.0));
        }
        if fixed < 0.0 {
            return Some((0.0, (self.t / self.k).max(0.0)));
        }
        Some((fixed, per))
    }

    /// Layers (at least 0) whose slice is estimated to fit in `secs`; `None` before the first
    /// slice.
    pub fn layers_within(&self, secs: f64) -> Option<usize> {
        let (fixed, per) = self.estimate()?;
        let room = secs - fixed;
        Some(match (room > 0.0, per > 0.0) {
            (false, _) => 0,
            (true, true) => (room / per).floor().min(usize::MAX as f64) as usize,
            (true, false) => usize::MAX,
        })
    }
}

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
    /// The cost of a slice of layers, and seconds for embedding + head + sampling.
    slices: SliceCost,
    head: Option<f64>,
    opts: FrameOptions,
    /// The captured pieces while `opts.recorded` and the backend captures (made on first use,
    /// again when later work made them stale).
    captured: Option<SlicedCaptures>,
    /// The backend turned out not to capture: record slices afresh.
    no_capture: bool,
    /// The current token's embedding is still to run with its first replayed slice.
    embed_pending: bool,
}

impl<B: Backend> FrameDecoder<B> {
    /// A decoder with a `ctx`-position KV cache stored as `kv`, sampling with `sampling` (its
    /// RNG counter keyed by `seq_id`).
    pub fn new(
        backend: B,
        model: Model,
        ctx: usize,
        kv: impl Into<KvTypes>,
        sampling: SamplingParams,
        seq_id: u64,
    ) -> Result<Self, EngineError> {
        Self::with_options(
            backend,
            model,
            ctx,
            kv,
            sampling,
            seq_id,
            FrameOptions::default(),
        )
    }

    /// [`FrameDecoder::new`] with `opts`.
    pub fn with_options(
        mut backend: B,
        model: Model,
        ctx: usize,
        kv: impl Into<KvTypes>,
        sampling: SamplingParams,
        seq_id: u64,
        opts: FrameOptions,
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
            slices: SliceCost::default(),
            head: None,
            opts,
            captured: None,
            no_capture: false,
            embed_pending: false,
        })
    }

    /// Whether slices run as replayed captures (after the first token began; see
    /// [`FrameOptions::recorded`]).
    pub fn replays_captures(&self) -> bool {
        self.captured.is_some()
    }

    /// The captured pieces, made on first use; `None` where slices are recorded afresh.
    fn captures(&mut self) -> Result<Option<&SlicedCaptures>, EngineError> {
        if !self.opts.recorded || self.no_capture {
            return Ok(None);
        }
        if self.captured.is_none() {
            match self.model.capture_sliced(&mut self.backend, &self.kv)? {
                Some(c) => self.captured = Some(c),
                None => self.no_capture = true,
            }
        }
        Ok(self.captured.as_ref())
    }

    /// Replays captured pieces (the pending embedding first), capturing them again once when
    /// later work (a prompt's forward) replaced the scratch they were recorded over.
    fn replay(&mut self, layers: std::ops::Range<usize>, head: bool) -> Result<(), EngineError> {
        for _ in 0..2 {
            let Some(c) = self.captured.as_ref() else {
                break;
            };
            let r = self.model.replay_sliced(
                &mut self.backend,
                c,
                self.embed_pending,
                layers.clone(),
                head,
                head && self.opts.overlap_head,
            );
            match r {
                Err(ModelError::CaptureStale { .. }) => {
                    if let Some(c) = self.captured.take() {
                        self.model.release_sliced(&mut self.backend, c);
                    }
                    self.captures()?;
                }
                r => {
                    r?;
                    self.embed_pending = false;
                    return Ok(());
                }
            }
        }
        Err(EngineError::Model(ModelError::Config {
            field: "capture".into(),
            msg: "the sliced forward's captures went stale twice in a row".into(),
        }))
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
        self.slices
            .estimate()
            .map(|(_, p)| Duration::from_secs_f64(p))
    }

    /// The estimated fixed cost of a slice (recording, submit, wait), beside
    /// [`FrameDecoder::layer_cost`]: zero until slices of different sizes have run.
    pub fn slice_overhead(&self) -> Option<Duration> {
        self.slices
            .estimate()
            .map(|(f, _)| Duration::from_secs_f64(f))
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
    /// as many layers per slice as the fitted slice cost ([`SliceCost`]) fits in what is left, each
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
                    if self.captures()?.is_some() {
                        self.model
                            .sliced_inputs(&mut self.backend, &self.kv, token, pos)?;
                        self.embed_pending = true;
                    } else {
                        self.model
                            .sliced_begin(&mut self.backend, &self.kv, token, pos)?;
                    }
                    self.counts[token as usize] += 1;
                    0
                }
            };
            if done < n_layers {
                // A call's first work always runs; later slices only when they fit.
                let fit = self.slices.layers_within(left(t0)).unwrap_or(1);
                if fit == 0 && worked(&out) {
                    self.done = Some(done);
                    break;
                }
                let k = fit.clamp(1, n_layers - done);
                let ts = Instant::now();
                if self.captured.is_some() {
                    self.replay(done..done + k, false)?;
                } else {
                    self.model
                        .sliced_layers(&mut self.backend, &self.kv, done..done + k)?;
                    self.backend.sync()?;
                }
                self.slices.observe(k, ts.elapsed().as_secs_f64());
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
            if self.captured.is_some() {
                self.replay(n_layers..n_layers, true)?;
            } else {
                self.model.sliced_head(&mut self.backend)?;
            }
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

#[cfg(test)]
mod tests {
    use super::SliceCost;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn slices_of_different_sizes_separate_the_fixed_part() {
        let mut c = SliceCost::default();
        assert_eq!(c.estimate(), None);
        assert_eq!(c.layers_within(1.0), None);
        // 300 us per slice plus 60 us per layer.
        for k in [1usize, 7, 3, 12, 2, 9, 5] {
            c.observe(k, 300e-6 + 60e-6 * k as f64);
        }
        let (fixed, per) = c.estimate().unwrap();
        assert!(close(fixed, 300e-6), "fixed {fixed}");
        assert!(close(per, 60e-6), "per layer {per}");
        // 4 ms left: (4000 - 300) / 60 = 61.67 layers.
        assert_eq!(c.layers_within(4e-3), Some(61));
        assert_eq!(c.layers_within(250e-6), Some(0));
    }

    #[test]
    fn slices_of_one_size_charge_everything_per_layer() {
        let mut c = SliceCost::default();
        for _ in 0..5 {
            c.observe(4, 400e-6);
        }
        let (fixed, per) = c.estimate().unwrap();
        assert_eq!(fixed, 0.0);
        assert!(close(per, 100e-6), "per layer {per}");
        assert_eq!(c.layers_within(1e-3), Some(10));
    }

    #[test]
    fn the_newest_slices_weigh_most() {
        let mut c = SliceCost::default();
        for k in [1usize, 4, 2, 8] {
            c.observe(k, 1e-3 * k as f64);
        }
        // The device got faster: 100 us per layer, no fixed part.
        for _ in 0..40 {
            for k in [1usize, 4, 2, 8] {
                c.observe(k, 1e-4 * k as f64);
            }
        }
        let (fixed, per) = c.estimate().unwrap();
        assert!((per - 1e-4).abs() < 1e-6, "per layer {per}");
        assert!(fixed < 1e-5, "fixed {fixed}");
    }
}
