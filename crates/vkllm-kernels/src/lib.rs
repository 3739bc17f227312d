//! # vkllm-kernels — layer 2: the SPIR-V kernel set
//!
//! Every GPU kernel of vkllm is a WGSL file in the repository's `shaders/` (one file per kernel
//! family, named after the op). `build.rs` parses and validates each with naga, so a broken shader
//! fails the build; the sources are embedded, so binaries need no shader files at run time.
//! [`compile_spirv`] specialises one entry point (WGSL `override` constants such as workgroup and
//! tile sizes) and emits SPIR-V; the Vulkan runtime (`vkllm-vk`) caches the result per
//! (kernel, overrides).
//!
//! Each kernel has one typed binding (a module below): a struct whose named fields are its
//! buffers, a parameter struct, and a `dispatch` method that checks shapes and buffer sizes and
//! returns a [`Dispatch`] — the kernel, its overrides, its buffers in binding order, its
//! push-constant bytes (a `bytemuck::Pod` struct) and its workgroup grid. Callers never touch
//! descriptor indices. The binding is generic over the buffer handle type `B` ([`KernelBuffer`]),
//! so this crate does not depend on Vulkan.
//!
//! Kernels never assume a subgroup size: reductions use subgroup operations only in a form that is
//! correct for any size (4..128), combined across subgroups through shared memory.

mod compile;
mod error;
mod glsl;
mod prune;
mod sources;
mod spec;
mod vmm;

pub mod activation;
pub mod argmax;
pub mod attention;
pub mod attention_fused;
pub mod attention_prefill_cm2;
pub mod attention_prefill_coop;
pub mod attention_prefill_coop2;
pub mod causal_conv1d;
pub mod decode_advance;
pub mod dequant_f16;
pub mod elementwise;
pub mod embedding;
pub mod gated_delta_rule;
pub mod gated_rmsnorm;
pub mod kv_append;
pub mod kv_to_f16;
pub mod kv_unrotate;
pub mod logprobs;
pub mod mat_quant;
pub mod matmul;
pub mod matmul_cm2;
pub mod matmul_coop;
pub mod matmul_narrow;
pub mod matvec;
pub mod matvec_fused;
pub mod matvec_q8a;
pub mod matvec_rows;
pub mod moe_experts;
pub mod moe_experts_grouped;
pub mod moe_experts_q8a;
pub mod moe_experts_quant;
pub mod moe_route;
pub mod quantize_act_q8;
pub mod rmsnorm;
pub mod rope;
pub mod rope_kv_append;
pub mod sample;
pub mod sigmoid_mul;
pub mod softmax;
pub mod to_f16;

pub use compile::{SpirvOptions, compile_spirv};
pub use error::Error;
pub use spec::{
    Access, BindingSpec, Dispatch, GlslKernel, Indirect, KernelBuffer, KernelSpec, Overrides,
    WeightType, grid_for,
};

/// Every kernel entry point of the set (for build checks, pipeline warm-up and docs).
pub fn all_kernels() -> Vec<&'static KernelSpec> {
    vec![
        &embedding::EMBEDDING,
        &rmsnorm::RMSNORM,
        &rmsnorm::ADD_RMSNORM,
        &matvec::MATVEC,
        &matvec::MATVEC_VEC,
        &matvec_fused::MATVEC_FUSED,
        &matvec_q8a::MATVEC_Q8A,
        &matvec_q8a::MATVEC_Q8A_QOUT,
        &quantize_act_q8::QUANTIZE_ACT_Q8,
        &matvec_rows::MATVEC_ROWS,
        &matmul::MATMUL,
        &matmul_coop::MATMUL_COOP,
        &matmul_narrow::MATMUL_NARROW,
        &matmul_narrow::MATMUL_NARROW_Q4K,
        &matmul_narrow::MATMUL_NARROW_Q6K,
        &mat_quant::MATVEC_QUANT,
        &mat_quant::MATMUL_QUANT,
        &mat_quant::EMBEDDING_QUANT,
        &rope::ROPE,
        &rope_kv_append::ROPE_KV_APPEND,
        &rope_kv_append::ROPE_KV_APPEND_PAIRS,
        &attention::ATTN_SPLIT,
        &attention::ATTN_SPLIT_GQA,
        &attention::ATTN_SPLIT_WIDE,
        &attention::ATTN_SPLIT_WIDE_QUANT,
        &attention::ATTN_SPLIT_WIDE_MERGE,
        &attention::ATTN_MERGE,
        &attention::ATTN_DECODE_FUSED,
        &attention::ATTN_WIDE_ROPE,
        &attention::ATTN_PREFILL,
        &attention_prefill_coop::ATTN_PREFILL_COOP,
        &attention_prefill_coop2::ATTN_PREFILL_COOP2,
        &attention_prefill_cm2::ATTN_PREFILL_CM2,
        &matmul_cm2::MATMUL_CM2,
        &matmul_cm2::MATMUL_CM2_Q4_K,
        &matmul_cm2::MATMUL_CM2_GROUP,
        &activation::SILU_MUL,
        &activation::GELU_TANH_MUL,
        &softmax::SOFTMAX,
        &elementwise::ADD,
        &elementwise::SCALE,
        &elementwise::COPY,
        &elementwise::SOFTCAP,
        &elementwise::MUL_ROWS,
        &to_f16::TO_F16,
        &dequant_f16::DEQUANT_F16,
        &kv_append::KV_APPEND,
        &kv_append::KV_APPEND_QUANT,
        &kv_to_f16::KV_TO_F16,
        &kv_unrotate::KV_UNROTATE,
        &argmax::ARGMAX,
        &sample::SAMPLE_PREP,
        &sample::SAMPLE_SIEVE,
        &sample::SAMPLE_GATHER,
        &sample::SAMPLE_FINISH,
        &logprobs::LOGPROBS,
        &decode_advance::DECODE_ADVANCE,
        &causal_conv1d::CAUSAL_CONV1D,
        &gated_delta_rule::GATED_DELTA_RULE,
        &gated_delta_rule::GATED_DELTA_RULE_WIDE,
        &gated_delta_rule::GATED_DELTA_RULE_CHUNKED,
        &gated_delta_rule::GATED_DELTA_RULE_CHUNKED_WIDE,
        &gated_rmsnorm::GATED_RMSNORM,
        &sigmoid_mul::SIGMOID_MUL,
        &moe_route::MOE_ROUTE,
        &moe_experts::MOE_GATE_UP,
        &moe_experts::MOE_DOWN,
        &moe_experts_quant::MOE_GATE_UP_QUANT,
        &moe_experts_quant::MOE_DOWN_QUANT,
        &moe_experts_grouped::MOE_GROUP,
        &moe_experts_grouped::MOE_GROUPED,
        &moe_experts_grouped::MOE_GROUPED_SUM,
        &moe_experts_grouped::MOE_GROUPED_COOP,
    ]
}
