//! # vkllm-tokenizer — layer 4: text in, token ids out, and back
//!
//! Everything between a user's text and the model's token ids, matching Hugging Face
//! transformers byte for byte:
//!
//! - [`Tokenizer`]: from a `tokenizer.json` directory (through the `tokenizers` crate), from the
//!   vocabulary inside a GGUF file ([`GgufVocab`]: `gpt2` byte-level BPE with llama.cpp's
//!   pre-tokenizer names, `llama` SentencePiece with byte fallback), or from tiktoken ranks
//!   (the Qwen3.5/3.6 vocabulary). [`Tokenizer::encode`] with [`EncodeOptions`] (BOS/EOS, and
//!   whether special tokens written in the text are matched), [`Tokenizer::decode`], the special
//!   ids and the end-of-generation set ([`Tokenizer::eog_ids`]).
//! - [`ChatTemplate`]: the model's Jinja chat template rendered by minijinja as transformers'
//!   `apply_chat_template` renders it; models without one get their family's from a built-in
//!   table ([`TemplateOrigin::Builtin`]).
//! - Streaming: [`IncrementalDecoder`] (text as soon as it is whole UTF-8), [`StopMatcher`]
//!   (stop strings across token boundaries), [`ThinkingSplitter`] (`<think>` blocks apart).
//!
//! Errors are [`TokenizerError`]; malformed JSON and templates report their line.

pub mod cache;
pub mod chat;
mod eog;
mod error;
mod fast_bpe;
mod gguf;
mod guard;
mod hf;
mod stop;
mod stream;
mod think;
mod tiktoken;
mod token_bytes;
mod tokenizer;

pub use chat::{ChatTemplate, RenderOptions, TemplateOrigin};
pub use eog::KNOWN_EOG_TOKENS;
pub use error::{Result, TokenizerError};
pub use gguf::{GgufVocab, token_type};
pub use guard::GuardedMessages;
pub use stop::{StopMatcher, StopStep};
pub use stream::IncrementalDecoder;
pub use think::{Segment, ThinkingSplitter, split_reasoning};
pub use tiktoken::{QWEN35_PATTERN, TiktokenSpec};
pub use token_bytes::TokenBytes;
pub use tokenizer::{EncodeOptions, SpecialIds, Tokenizer, TokenizerSource};
