//! The embedded WGSL sources (`shaders/` is a link to the repository's `shaders/`).

pub(crate) const ACTIVATION: &str = include_str!("../shaders/activation.wgsl");
pub(crate) const ARGMAX: &str = include_str!("../shaders/argmax.wgsl");
pub(crate) const ATTENTION: &str = include_str!("../shaders/attention.wgsl");
pub(crate) const CAUSAL_CONV1D: &str = include_str!("../shaders/causal_conv1d.wgsl");
pub(crate) const ATTENTION_PREFILL: &str = include_str!("../shaders/attention_prefill.wgsl");
pub(crate) const DECODE_ADVANCE: &str = include_str!("../shaders/decode_advance.wgsl");
pub(crate) const ELEMENTWISE: &str = include_str!("../shaders/elementwise.wgsl");
pub(crate) const EMBEDDING: &str = include_str!("../shaders/embedding.wgsl");
pub(crate) const GATED_DELTA_RULE: &str = include_str!("../shaders/gated_delta_rule.wgsl");
pub(crate) const GATED_DELTA_RULE_CHUNKED: &str =
    include_str!("../shaders/gated_delta_rule_chunked.wgsl");
pub(crate) const GATED_RMSNORM: &str = include_str!("../shaders/gated_rmsnorm.wgsl");
pub(crate) const KV_APPEND: &str = include_str!("../shaders/kv_append.wgsl");
pub(crate) const LOGPROBS: &str = include_str!("../shaders/logprobs.wgsl");
pub(crate) const MAT_QUANT: &str = include_str!("../shaders/mat_quant.wgsl");
pub(crate) const MATMUL: &str = include_str!("../shaders/matmul.wgsl");
pub(crate) const MATVEC: &str = include_str!("../shaders/matvec.wgsl");
pub(crate) const MOE_EXPERTS: &str = include_str!("../shaders/moe_experts.wgsl");
/// Prepended with the block-decoding snippet its first line names.
pub(crate) const MOE_EXPERTS_QUANT: &str = concat!(
    include_str!("../shaders/quant_blocks.wgsli"),
    include_str!("../shaders/moe_experts_quant.wgsl")
);
pub(crate) const MOE_ROUTE: &str = include_str!("../shaders/moe_route.wgsl");
pub(crate) const RMSNORM: &str = include_str!("../shaders/rmsnorm.wgsl");
pub(crate) const ROPE: &str = include_str!("../shaders/rope.wgsl");
pub(crate) const SAMPLE: &str = include_str!("../shaders/sample.wgsl");
pub(crate) const SIGMOID_MUL: &str = include_str!("../shaders/sigmoid_mul.wgsl");
pub(crate) const SOFTMAX: &str = include_str!("../shaders/softmax.wgsl");
