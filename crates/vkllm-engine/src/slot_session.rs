//! One conversation on the batched GPU decoder: [`crate::Session`]'s contract (prefix reuse
//! across turns, streamed text, stop strings, cancellation, timings) over a one-slot
//! [`SlotGenerator`], whose recorded multi-step decode samples on the device. What `vkllm run`
//! and `vkllm chat` use on GPUs ([`Decoder::for_device`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use vkllm_models::{AnyModel, KvSharing, KvTypes, VulkanBackend};
use vkllm_tokenizer::Tokenizer;
use vkllm_vk::DeviceKind;

use crate::error::EngineError;
use crate::generator::{Generator, SlotParams};
use crate::session::{FinishReason, GenerateParams, Usage};
use crate::slot_generator::SlotGenerator;
use crate::text_out::TextOut;

/// How `run` and `chat` decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoder {
    /// [`Decoder::for_device`].
    Auto,
    /// The recorded multi-step slot decoder with GPU sampling ([`SlotSession`]).
    Slots,
    /// One forward per token, sampled on the host ([`crate::Session`]).
    PerToken,
}

impl Decoder {
    /// The decoder for a device of `kind`: the slot decoder on GPUs (one submit per several
    /// tokens instead of a submit, a logits readback and host sampling per token), per token on
    /// CPU Vulkan implementations (lavapipe: no faster with slots, and no step to record at
    /// load; docs/cli.md).
    pub fn for_device(kind: DeviceKind) -> Decoder {
        match kind {
            DeviceKind::Cpu => Decoder::PerToken,
            _ => Decoder::Slots,
        }
    }

    /// `auto`, `slots` or `per-token`.
    pub fn parse(s: &str) -> Option<Decoder> {
        match s {
            "auto" => Some(Decoder::Auto),
            "slots" => Some(Decoder::Slots),
            "per-token" => Some(Decoder::PerToken),
            _ => None,
        }
    }
}

/// Decode steps per submit: tokens reach the terminal in groups of this many.
pub const STEPS_PER_SUBMIT: usize = 4;

/// A model on the slot decoder with one slot, and its tokenizer.
pub struct SlotSession {
    generator: SlotGenerator,
    pub tokenizer: Tokenizer,
    vocab: usize,
}

impl SlotSession {
    /// Records the decoder for a context of `ctx` positions (`kv`: the KV cache type; for hybrid
    /// and MoE models their attention layers').
    pub fn new(
        b: VulkanBackend,
        model: AnyModel,
        tokenizer: Tokenizer,
        ctx: usize,
        kv: impl Into<KvTypes>,
    ) -> Result<Self, EngineError> {
        Self::new_sharing(b, model, tokenizer, ctx, kv, KvSharing::Copy)
    }

    /// [`SlotSession::new`] with a dense model's KV cache managed as `sharing` says
    /// ([`KvSharing::OnDemand`]: memory for the positions the conversation has, not the whole
    /// context; hybrid models copy).
    pub fn new_sharing(
        b: VulkanBackend,
        model: AnyModel,
        tokenizer: Tokenizer,
        ctx: usize,
        kv: impl Into<KvTypes>,
        sharing: KvSharing,
    ) -> Result<Self, EngineError> {
        let vocab = model.cfg().vocab_size;
        let steps = STEPS_PER_SUBMIT;
        let generator = match model {
            AnyModel::Dense(m) => SlotGenerator::new_sharing(b, m, 1, ctx, kv, steps, sharing)?,
            AnyModel::Hybrid(m) => SlotGenerator::new_hybrid(b, m, 1, ctx, kv, STEPS_PER_SUBMIT)?,
        };
        Ok(SlotSession {
            generator,
            tokenizer,
            vocab,
        })
    }

    /// Keeps conversations past the slot in a prefix store of about `bytes` of device memory
    /// ([`SlotGenerator::with_prefix_store`]): a conversation that comes back (a chat's `/load`)
    /// copies its rows back instead of computing them again. 0: none.
    pub fn with_prefix_store(self, bytes: u64) -> Result<Self, EngineError> {
        Ok(SlotSession {
            generator: self.generator.with_prefix_store(bytes)?,
            ..self
        })
    }

    /// Conversations of the whole context the prefix store holds at least (0: no store), and
    /// the device bytes of one ([`SlotGenerator::prefix_store_entries`]).
    pub fn prefix_store(&self) -> (usize, u64) {
        (
            self.generator.prefix_store_entries(),
            self.generator.prefix_entry_bytes(),
        )
    }

    /// Positions a dense model's prefix store holds in all, and the device bytes of one of its
    /// blocks of [`crate::PREFIX_BLOCK`] positions (0, 0: no store, or a hybrid model's).
    pub fn prefix_store_rows(&self) -> (usize, u64) {
        match self.generator.prefix_store_rows() {
            0 => (0, 0),
            rows => (rows, self.generator.prefix_block_bytes()),
        }
    }

    /// Positions of the context.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    pub fn context(&self) -> usize {
        self.generator.context()
    }

    /// Tokens whose state is cached, from position 0.
    pub fn history(&self) -> &[u32] {
        self.generator.history(0)
    }

    /// Forgets the cached history (the next turn is computed from position 0).
    pub fn reset(&mut self) {
        self.generator.forget(0);
    }

    /// [`crate::Session::generate_with`] on the slot decoder: the same checks, reuse of the
    /// cached prefix, text, stops, cancellation (checked after the prompt and every token) and
    /// timings. The decoder runs several tokens per submit; those past the end are dropped
    /// (they stay in the cache like the rest of the history, and a next turn reuses only what
    /// it shares with them).
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
        let ctx = self.context();
        if context.len() + p.max_tokens > ctx {
            return Err(EngineError::ContextExceeded {
                prompt: context.len(),
                max_new: p.max_tokens,
                ctx,
            });
        }
        p.sampling.validate(self.vocab)?;
        let params = SlotParams {
            sampling: p.sampling.clone(),
            logprobs: None,
            grammar: p.grammar.clone(),
        };
        let start = Instant::now();
        let (slot, first) = self.generator.start(context, &params)?;
        let reused = self.generator.reused(slot);
        let ttft = start.elapsed();
        let decode_start = Instant::now();
        let mut out = TextOut::new(&self.tokenizer, &p.stop, p.max_tokens, on_text);
        let run: Result<FinishReason, EngineError> = (|| {
            let mut pending = vec![first.id];
            loop {
                for &id in &pending {
                    if cancel.load(Ordering::Relaxed) {
                        return Ok(FinishReason::Cancelled);
                    }
                    if let Some(f) = out.push(id)? {
                        return Ok(f);
                    }
                }
                pending = self
                    .generator
                    .step()?
                    .into_iter()
                    .filter(|(s, _)| *s == slot)
                    .flat_map(|(_, toks)| toks.into_iter().map(|t| t.id))
                    .collect();
                if pending.is_empty() {
                    // Only a full context stops the decoder, and the token limit ends first.
                    return Ok(FinishReason::Length);
                }
            }
        })();
        self.generator.release(slot);
        let finish = run?;
        let generated = out.finish(finish)?;
        let decode = decode_start.elapsed().as_secs_f64();
        Ok(Usage::of(
            context.len(),
            reused,
            generated,
            finish,
            ttft,
            decode,
        ))
    }
}
