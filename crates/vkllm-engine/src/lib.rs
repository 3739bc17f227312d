//! # vkllm-engine — layer 6: sessions and generation
//!
//! A [`Session`] holds a model on a backend, its KV cache and the tokenizer, and generates:
//! prefill of the prompt, then one token at a time, sampled by the exactly-specified sampler of
//! `vkllm-cpu`, detokenized incrementally for streaming, stopped by end-of-generation tokens,
//! stop strings or the token limit, with timings (time to first token, prefill and decode
//! tokens per second) on every finish. Multi-turn use appends only the new turn: the earlier
//! turns' keys and values stay in the cache.

pub mod bench;
mod error;
mod session;

pub use error::EngineError;
pub use session::{FinishReason, GenerateParams, Session, Usage};
