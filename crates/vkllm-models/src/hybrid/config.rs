//! The parts of a config that only hybrid (Gated DeltaNet) and MoE models have.
//!
//! Keys read (transformers' `Qwen3NextConfig`, `Qwen3_5TextConfig`, `Qwen3_5MoeTextConfig`,
//! `Qwen3MoeConfig`): `layer_types` ("linear_attention" / "full_attention") or, when absent,
//! `full_attention_interval` (default 4: every fourth layer is full attention);
//! `linear_num_key_heads`, `linear_num_value_heads`, `linear_key_head_dim`,
//! `linear_value_head_dim`, `linear_conv_kernel_dim`; `num_experts` (or `num_local_experts`),
//! `num_experts_per_tok`, `moe_intermediate_size`, `shared_expert_intermediate_size`,
//! `norm_topk_prob`, `decoder_sparse_step`, `mlp_only_layers`.

use serde_json::{Map, Value};
use vkllm_cpu::DeltaShape;

use crate::error::ModelError;
use crate::family::Family;

/// The token mixer of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mixer {
    /// Softmax attention over the KV cache (gated in the hybrid families).
    Attention,
    /// Gated DeltaNet (short convolution + gated delta rule) over a recurrent state.
    DeltaNet,
}

/// Gated DeltaNet settings of a hybrid model.
#[derive(Clone, Debug, PartialEq)]
pub struct HybridConfig {
    /// Per layer.
    pub mixers: Vec<Mixer>,
    pub delta: DeltaShape,
    /// Taps of the depthwise causal convolution.
    pub conv_kernel: usize,
    /// Qwen3-Next's grouped `in_proj_qkvz` (rows regrouped at load time) rather than Qwen3.5's
    /// separate `in_proj_qkv` and `in_proj_z`.
    pub packed_qkvz: bool,
    /// Qwen3-Next's grouped `in_proj_ba` rather than separate `in_proj_b` and `in_proj_a` (GGUF
    /// files of Qwen3-Next keep this one packed while splitting `in_proj_qkvz`).
    pub packed_ba: bool,
}

impl HybridConfig {
    /// Channels of the convolution: q, k and v of every head.
    pub fn conv_dim(&self) -> usize {
        2 * self.delta.qk_width() + self.delta.v_width()
    }
}

/// Mixture-of-Experts settings.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    pub n_experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Intermediate size of each routed expert.
    pub expert_ff: usize,
    /// Divide the top-k weights by their sum (`norm_topk_prob`; always for Qwen3.5 MoE).
    pub renormalize: bool,
    /// Intermediate size of the shared expert (behind a sigmoid gate), if there is one.
    pub shared_ff: Option<usize>,
    /// Per layer: a MoE block (true) or a dense MLP of `intermediate_size` (false).
    pub sparse: Vec<bool>,
}

pub(crate) fn parse_hybrid(
    c: &Map<String, Value>,
    family: Family,
    n_layers: usize,
) -> Result<Option<HybridConfig>, ModelError> {
    if !family.is_hybrid() {
        return Ok(None);
    }
    let mixers = match c.get("layer_types").and_then(Value::as_array) {
        Some(types) => types
            .iter()
            .map(|t| match t.as_str() {
                Some("linear_attention") => Ok(Mixer::DeltaNet),
                Some("full_attention") => Ok(Mixer::Attention),
                other => Err(cfg_err(
                    "layer_types",
                    &format!("unknown layer type {other:?}"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => {
            let every = opt_usize(c, "full_attention_interval")?.unwrap_or(4).max(1);
            (0..n_layers)
                .map(|i| {
                    if (i + 1) % every == 0 {
                        Mixer::Attention
                    } else {
                        Mixer::DeltaNet
                    }
                })
                .collect()
        }
    };
    if mixers.len() != n_layers {
        return Err(cfg_err(
            "layer_types",
            &format!("{} entries for {n_layers} layers", mixers.len()),
        ));
    }
    let delta = DeltaShape {
        n_k_heads: opt_usize(c, "linear_num_key_heads")?.unwrap_or(16),
        n_v_heads: opt_usize(c, "linear_num_value_heads")?.unwrap_or(32),
        k_dim: opt_usize(c, "linear_key_head_dim")?.unwrap_or(128),
        v_dim: opt_usize(c, "linear_value_head_dim")?.unwrap_or(128),
        tiled_v_heads: false,
    };
    if delta.n_k_heads == 0
        || delta.n_v_heads == 0
        || delta.k_dim == 0
        || delta.v_dim == 0
        || !delta.n_v_heads.is_multiple_of(delta.n_k_heads)
    {
        return Err(cfg_err(
            "linear_num_value_heads",
            &format!("{delta:?}: need non-zero sizes and value heads a multiple of key heads"),
        ));
    }
    let conv_kernel = opt_usize(c, "linear_conv_kernel_dim")?.unwrap_or(4);
    if conv_kernel == 0 {
        return Err(cfg_err("linear_conv_kernel_dim", "must be at least 1"));
    }
    Ok(Some(HybridConfig {
        mixers,
        delta,
        conv_kernel,
        packed_qkvz: family == Family::Qwen3Next,
        packed_ba: family == Family::Qwen3Next,
    }))
}

pub(crate) fn parse_moe(
    c: &Map<String, Value>,
    family: Family,
    n_layers: usize,
) -> Result<Option<MoeConfig>, ModelError> {
    if !family.is_moe() {
        return Ok(None);
    }
    let n_experts = match opt_usize(c, "num_experts")? {
        Some(n) => n,
        None => {
            opt_usize(c, "num_local_experts")?.ok_or_else(|| cfg_err("num_experts", "missing"))?
        }
    };
    let top_k = opt_usize(c, "num_experts_per_tok")?
        .ok_or_else(|| cfg_err("num_experts_per_tok", "missing"))?;
    if n_experts == 0 || top_k == 0 || top_k > n_experts {
        return Err(cfg_err(
            "num_experts_per_tok",
            &format!("{top_k} experts per token of {n_experts}"),
        ));
    }
    let expert_ff = opt_usize(c, "moe_intermediate_size")?
        .ok_or_else(|| cfg_err("moe_intermediate_size", "missing"))?;
    let renormalize = match family {
        Family::Qwen35Moe => true,
        _ => c
            .get("norm_topk_prob")
            .and_then(Value::as_bool)
            .unwrap_or(family == Family::Qwen3Next),
    };
    let shared_ff = match family {
        Family::Qwen3Moe => None,
        _ => Some(
            opt_usize(c, "shared_expert_intermediate_size")?
                .ok_or_else(|| cfg_err("shared_expert_intermediate_size", "missing"))?,
        ),
    };
    let sparse = match family {
        Family::Qwen35Moe => vec![true; n_layers],
        _ => {
            let step = opt_usize(c, "decoder_sparse_step")?.unwrap_or(1).max(1);
            let dense: Vec<usize> = match c.get("mlp_only_layers") {
                None | Some(Value::Null) => vec![],
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        v.as_u64().map(|x| x as usize).ok_or_else(|| {
                            cfg_err("mlp_only_layers", "not a list of layer indices")
                        })
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(cfg_err("mlp_only_layers", "not a list")),
            };
            (0..n_layers)
                .map(|i| !dense.contains(&i) && (i + 1) % step == 0)
                .collect()
        }
    };
    Ok(Some(MoeConfig {
        n_experts,
        top_k,
        expert_ff,
        renormalize,
        shared_ff,
        sparse,
    }))
}

/// Hybrid families default to `partial_rotary_factor` 0.25 (transformers sets it when absent).
pub(crate) fn default_partial_rotary(family: Family) -> f64 {
    if family.is_hybrid() { 0.25 } else { 1.0 }
}

fn cfg_err(field: &str, msg: &str) -> ModelError {
    ModelError::Config {
        field: field.to_string(),
        msg: msg.to_string(),
    }
}

fn opt_usize(c: &Map<String, Value>, key: &str) -> Result<Option<usize>, ModelError> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|x| Some(x as usize))
            .ok_or_else(|| cfg_err(key, "not a non-negative integer")),
    }
}
