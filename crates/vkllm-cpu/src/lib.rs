//! # vkllm-cpu — layer 1: the reference ops
//!
//! Plain-Rust f32 implementations (f64 accumulation where it matters) of every op the models use.
//! They are the oracle: each GPU kernel in `vkllm-kernels` is parity-tested against the op of the
//! same name here, and the CPU model forward in `vkllm-models` is built from them.
//!
//! Conventions: tensors are row-major f32 slices; weights are `[rows, cols]` with `y = W x`.
//! Shapes passed by our own code are programming errors and panic (see each `# Panics`); input a
//! user controls (token ids, sampling parameters, rope configuration) returns a [`CpuError`].
//! Large linear ops and attention run on scoped threads, split by output, so results are
//! bit-identical for any thread count.

mod activation;
mod attention;
mod causal_conv1d;
mod dequant_f16;
mod dot;
mod elementwise;
mod embedding;
mod error;
mod gated_delta_rule;
mod gated_rmsnorm;
mod l2norm;
mod matmul;
mod matvec;
mod moe_experts;
mod moe_routing;
mod rmsnorm;
mod rope;
mod rope_kv_append;
mod softmax;
pub mod threads;
mod to_f16;

pub mod compare;
pub mod decode;
pub mod kv;
pub mod kv_quant;
pub mod quant;
pub mod sampler;

#[cfg(test)]
mod testutil;

pub use activation::{gelu_tanh, gelu_tanh_mul, sigmoid, sigmoid_mul, silu, silu_mul};
pub use attention::{AttnParams, attention, attention_ring};
pub use causal_conv1d::causal_conv1d;
pub use dequant_f16::dequant_f16;
pub use dot::dot;
pub use elementwise::{add, add_inplace, mul_rows, scale, softcap, softcap_one};
pub use embedding::embedding;
pub use error::CpuError;
pub use gated_delta_rule::{
    DELTA_L2NORM_EPS, DeltaShape, delta_gates, gated_delta_rule, gated_delta_rule_chunked, softplus,
};
pub use gated_rmsnorm::gated_rmsnorm;
pub use l2norm::{l2norm, l2norm_f64, l2norm_inplace};
pub use matmul::matmul;
pub use matvec::matvec;
pub use moe_experts::{MoeShape, moe_experts, moe_experts_f16};
pub use moe_routing::{moe_route, moe_route_shared};
pub use quant::{QuantType, dequantize_row, matvec_quant, quantize_row, quantize_rows};
pub use rmsnorm::{add_rmsnorm, rmsnorm, rmsnorm_inplace};
pub use rope::{Rope, RopeScaling, RopeStyle};
pub use rope_kv_append::{RopeKvAppendSpec, rope_kv_append};
pub use sampler::{SamplingParams, log_softmax, sample, top_logprobs};
pub use softmax::softmax;
pub use to_f16::{f16_neighbours, to_f16};
