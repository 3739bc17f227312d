//! vkllm-server, the top layer: the OpenAI- and Anthropic-compatible HTTP server as a library
//! ([`server::router`] nests into any axum app; [`server::serve`] runs it with `vkllm serve`'s
//! connection limits). The `vkllm` binary (src/main.rs, src/cmd/) is built on it.

pub mod server;

pub use server::{AppState, ConnLimits, router, serve};
