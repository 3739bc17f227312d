//! # vkllm-cpu — layer 1: the reference ops
//!
//! Plain-Rust f32 implementations (f64 accumulation where it matters) of every op the models use.
//! They are the oracle: each GPU kernel in `vkllm-kernels` is parity-tested against the op of the
//! same name here, and the CPU model forward in `vkllm-models` is built from them.

pub mod compare;
