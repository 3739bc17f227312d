//! # vkllm-engine — layer 6: sessions and generation
//!
//! A [`Session`] holds a model on a backend, its KV cache and the tokenizer, and generates:
//! prefill of the prompt, then one token at a time, sampled by the exactly-specified sampler of
//! `vkllm-cpu`, detokenized incrementally for streaming, stopped by end-of-generation tokens,
//! stop strings or the token limit, with timings (time to first token, prefill and decode
//! tokens per second) on every finish. Multi-turn use appends only the new turn: the earlier
//! turns' keys and values stay in the cache.
//!
//! On GPUs a [`SlotSession`] gives the same contract on the recorded multi-step decoder (GPU
//! sampling, several tokens per submit); [`Decoder::for_device`] picks per device type.
//!
//! A host that shares its GPU decodes within frame budgets with a [`FrameDecoder`] (slices of
//! layers per call, a hook on the residual stream after each).
//!
//! For serving many requests at once, a [`Generator`] holds a fixed set of generation slots
//! ([`SimpleGenerator`] is the reference one: a KV cache per slot, each decoded on its own) and
//! the [`InferenceRunner`] schedules requests onto it: a bounded queue, requests joining the
//! running batch between decode steps, cancellation, time limits, streamed text events.

pub mod bench;
mod error;
pub mod frame;
pub mod generator;
pub mod grammar;
mod prefix_store;
pub mod runner;
mod session;
pub mod slot_generator;
mod slot_session;
mod text_out;

pub use error::EngineError;
pub use frame::{FrameDecoder, FrameOptions, FrameOut, LayerView, SliceCost};
pub use generator::{
    DEFAULT_MARKS_PER_SLOT, Generator, SimpleGenerator, SlotId, SlotParams, TAIL_MARK, TokenOut,
};
pub use grammar::{Constraint, Grammar, GrammarSpec, Grammars, bound_whitespace};
pub use prefix_store::BLOCK as PREFIX_BLOCK;
pub use runner::{
    Event, InferenceRunner, Prompt, Request, RequestId, RunnerConfig, RunnerHandle, RunnerStats,
    Sink, WarmUpReport, warm_up, warm_up_lengths,
};
pub use session::{FinishReason, GenerateParams, Session, Usage};
pub use slot_generator::{KV_GROW_ROWS, SlotGenerator};
pub use slot_session::{Decoder, STEPS_PER_SUBMIT, SlotSession};
