//! One conversation on one model: prefill, sampled decode, streaming text, stops, timings.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::sync::Arc;

use vkllm_cpu::sampler::{SamplingParams, apply_mask, sample};
use vkllm_models::hybrid::RecurrentMarks;
use vkllm_models::{AnyModel, AnyState, Backend, KvType, KvTypes, Logits};
use vkllm_tokenizer::Tokenizer;

use crate::error::EngineError;
use crate::generator::{DEFAULT_MARKS_PER_SLOT, branch_point, common_prefix};
use crate::grammar::{Constraint, Grammar};
use crate::text_out::TextOut;

/// What to generate.
#[derive(Clone, Debug, Default)]
pub struct GenerateParams {
    pub sampling: SamplingParams,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Stop strings: generation ends before the first occurrence, which is not emitted.
    pub stop: Vec<String>,
    /// Structured outputs: the grammar the generated text must match.
    pub grammar: Option<Arc<Grammar>>,
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token (not emitted).
    EndOfGeneration,
    /// A stop string.
    Stop,
    /// `max_tokens` reached, or the context is full.
    Length,
    /// Cancelled by the caller (the cancel flag of [`Session::generate_with`], or a runner
    /// request whose receiver went away).
    Cancelled,
    /// The request's time limit passed; only the runner finishes this way.
    Timeout,
}

/// Token counts and timings of one generation.
#[derive(Clone, Debug)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values were already cached (not recomputed).
    pub reused_tokens: usize,
    pub generated_tokens: usize,
    pub finish: FinishReason,
    pub time_to_first_token: Duration,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
}

/// A model of any family on a backend with its state (KV cache, recurrent state) and
/// tokenizer.
pub struct Session<B: Backend> {
    pub backend: B,
    pub model: AnyModel,
    pub tokenizer: Tokenizer,
    state: AnyState,
    /// Tokens whose keys and values are in the cache, in order from position 0.
    history: Vec<u32>,
    /// The furthest position (exclusive) any forward wrote since position 0 was last computed:
    /// sliding-window layers keep a ring of recent positions, so a rewound prefix is reusable
    /// only while the ring still holds its window ([`AnyState::reusable`]).
    written: usize,
    /// Sequence id for the sampler's RNG counter.
    seq_id: u64,
    /// Hybrid models: the recurrent state at the end of the last prompt (a turn whose answer
    /// was re-rendered differently restarts there).
    marks: Option<RecurrentMarks>,
}

impl<B: Backend> Session<B> {
    /// A session with a KV cache of `ctx` positions.
    pub fn new(
        backend: B,
        model: impl Into<AnyModel>,
        tokenizer: Tokenizer,
        ctx: usize,
    ) -> Result<Self, EngineError> {
        Self::with_kv_type(backend, model, tokenizer, ctx, KvType::F32)
    }

    /// A session whose KV cache stores keys and values as `dtype` (hybrid and MoE models keep
    /// f32).
    pub fn with_kv_type(
        mut backend: B,
        model: impl Into<AnyModel>,
        tokenizer: Tokenizer,
        ctx: usize,
        dtype: impl Into<KvTypes>,
    ) -> Result<Self, EngineError> {
        let model = model.into();
        let state = model.new_state(&mut backend, ctx, dtype)?;
        let marks = model.new_marks(&mut backend, &state, DEFAULT_MARKS_PER_SLOT);
        Ok(Session {
            backend,
            model,
            tokenizer,
            state,
            history: Vec::new(),
            written: 0,
            seq_id: 0,
            marks,
        })
    }

    /// Logits per token (the model's vocabulary).
    pub fn vocab(&self) -> usize {
        self.model.cfg().vocab_size
    }

    /// Context length in tokens.
    pub fn context(&self) -> usize {
        self.state.capacity()
    }

    /// The tokens whose keys and values are in the cache.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// Forgets the conversation (the cache is overwritten from position 0).
    pub fn reset(&mut self) {
        self.history.clear();
        self.written = 0;
        self.seq_id += 1;
    }

    /// Generates a continuation of `context` (the whole conversation as tokens, e.g. a rendered
    /// chat ending in the generation prompt), calling `on_text` with each piece of text as soon
    /// as it is complete UTF-8 and cannot be part of a stop string. The longest prefix of
    /// `context` already in the cache is reused: a multi-turn chat computes only the new turn.
    pub fn generate(
        &mut self,
        context: &[u32],
        p: &GenerateParams,
        on_text: impl FnMut(&str),
    ) -> Result<Usage, EngineError> {
        self.generate_with(context, p, &AtomicBool::new(false), on_text)
    }

    /// [`generate`](Self::generate) that stops early once `cancel` is set (e.g. by a Ctrl-C
    /// handler or another thread): it is checked after the prompt and after every token, and a
    /// cancelled generation ends with [`FinishReason::Cancelled`]. The text emitted so far is
    /// kept (held-back stop-string text is flushed), and the tokens computed so far stay in the
    /// cache, so the next turn reuses them.
    pub fn generate_with(
        &mut self,
        context: &[u32],
        p: &GenerateParams,
        cancel: &AtomicBool,
        on_text: impl FnMut(&str),
    ) -> Result<Usage, EngineError> {
        if context.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let ctx = self.state.capacity();
        if context.len() + p.max_tokens > ctx {
            return Err(EngineError::ContextExceeded {
                prompt: context.len(),
                max_new: p.max_tokens,
                ctx,
            });
        }
        p.sampling.validate(self.model.cfg().vocab_size)?;
        // Reuse the cached prefix; at least the last context token is recomputed for its logits,
        // and everything when a sliding-window ring no longer holds what the prefix needs (or a
        // recurrent state holds more than the prefix).
        let common = common_prefix(&self.history, context);
        let reuse = self.state.reusable_marked(
            self.marks.as_ref(),
            self.written,
            self.history.len(),
            common,
            context.len(),
        );
        self.model
            .resume(&mut self.backend, &self.state, self.marks.as_mut(), reuse)?;
        self.history.truncate(reuse);
        if reuse == 0 {
            self.written = 0;
        }
        self.written = self.written.max(context.len());
        let new = &context[reuse..];
        let vocab = self.model.cfg().vocab_size;
        let mut counts = vec![0u32; vocab];
        let start = Instant::now();
        // Hybrid models: an edit marks where it leaves the cached history, so the next edit
        // there starts from it.
        let branch = branch_point(common, reuse, context.len());
        let logits = self.model.forward_marking(
            &mut self.backend,
            &self.state,
            self.marks.as_mut(),
            new,
            reuse,
            branch,
        )?;
        self.history.extend_from_slice(new);
        self.model
            .mark(&mut self.backend, &self.state, self.marks.as_mut())?;
        let ttft = start.elapsed();
        let decode_start = Instant::now();

        let mut out = TextOut::new(&self.tokenizer, &p.stop, p.max_tokens, on_text);
        let mut constraint = p.grammar.as_ref().map(|g| g.start());
        let seq = self.seq_id;
        let mut draw = |logits: Vec<f32>, counts: &[u32], step: u64| {
            draw_token(logits, &p.sampling, counts, seq, step, constraint.as_mut())
        };
        let mut next = draw(logits, &counts, 0)?;
        let finish = loop {
            if cancel.load(Ordering::Relaxed) {
                break FinishReason::Cancelled;
            }
            if let Some(f) = out.push(next)? {
                break f;
            }
            counts[next as usize] += 1;
            let pos = self.history.len();
            self.written = self.written.max(pos + 1);
            let logits =
                self.model
                    .forward(&mut self.backend, &self.state, &[next], pos, Logits::Last)?;
            self.history.push(next);
            next = draw(logits, &counts, out.generated as u64)?;
        };
        let generated = out.finish(finish)?;
        let decode = decode_start.elapsed().as_secs_f64();
        Ok(Usage::of(
            context.len(),
            reuse,
            generated,
            finish,
            ttft,
            decode,
        ))
    }
}

impl Usage {
    /// A generation's usage: `prompt` tokens (`reused` of them cached), `generated` tokens, the
    /// end, `ttft` for the prompt and `decode` seconds from the first token to the last.
    pub(crate) fn of(
        prompt: usize,
        reused: usize,
        generated: usize,
        finish: FinishReason,
        ttft: Duration,
        decode: f64,
    ) -> Usage {
        Usage {
            prompt_tokens: prompt,
            reused_tokens: reused,
            generated_tokens: generated,
            finish,
            time_to_first_token: ttft,
            prefill_tokens_per_s: (prompt - reused) as f64 / ttft.as_secs_f64().max(1e-9),
            decode_tokens_per_s: generated.saturating_sub(1) as f64 / decode.max(1e-9),
        }
    }
}

/// The sampler's token, among those `constraint` allows (which then takes it).
fn draw_token(
    mut logits: Vec<f32>,
    p: &SamplingParams,
    counts: &[u32],
    seq: u64,
    step: u64,
    constraint: Option<&mut Constraint>,
) -> Result<u32, EngineError> {
    match constraint {
        None => Ok(sample(&logits, p, counts, seq, step)),
        Some(c) => {
            apply_mask(&mut logits, &c.mask());
            let id = sample(&logits, p, counts, seq, step);
            c.commit(id)?;
            Ok(id)
        }
    }
}
