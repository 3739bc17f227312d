//! Config parsing of the hybrid (Gated DeltaNet) and MoE families: the committed fixtures'
//! config.json files, Qwen3.5's nested multimodal layout, defaults and errors.

use vkllm_cpu::DeltaShape;
use vkllm_models::hybrid::{Mixer, MoeConfig};
use vkllm_models::{Family, ModelConfig, ModelError};

fn fixture(name: &str) -> ModelConfig {
    let path = format!(
        "{}/../../fixtures/{name}/config.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    ModelConfig::from_hf_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

const DELTA: DeltaShape = DeltaShape {
    n_k_heads: 2,
    n_v_heads: 4,
    k_dim: 16,
    v_dim: 16,
    tiled_v_heads: false,
};

#[test]
fn qwen3_5_fixture() {
    let c = fixture("qwen3_5");
    assert_eq!(c.family, Family::Qwen35);
    assert_eq!(c.norm_offset, 1.0);
    assert!(c.qk_norm && c.tie_embeddings);
    assert_eq!(c.rms_eps, 0.01);
    let h = c.hybrid.as_ref().expect("hybrid");
    use Mixer::*;
    assert_eq!(h.mixers, [DeltaNet, DeltaNet, DeltaNet, Attention]);
    assert_eq!(h.delta, DELTA);
    assert_eq!(
        (h.conv_kernel, h.conv_dim(), h.packed_qkvz),
        (4, 128, false)
    );
    assert!(c.moe.is_none());
    // partial_rotary_factor 0.25 inside rope_parameters: 8 of 32 dims rotated.
    assert!(
        c.layers
            .iter()
            .all(|l| l.rope.rotary_dim == 8 && l.window.is_none())
    );
    assert_eq!(c.layers[3].rope.theta, 10000.0);
}

#[test]
fn moe_fixtures() {
    let c = fixture("qwen3_5_moe");
    assert_eq!(c.family, Family::Qwen35Moe);
    assert_eq!(c.intermediate_size, 0);
    assert_eq!(
        c.moe,
        Some(MoeConfig {
            n_experts: 8,
            top_k: 2,
            expert_ff: 16,
            renormalize: true,
            shared_ff: Some(32),
            sparse: vec![true; 4],
        })
    );
    let n = fixture("qwen3_next");
    assert_eq!(n.family, Family::Qwen3Next);
    assert!(n.hybrid.as_ref().expect("hybrid").packed_qkvz);
    let m = n.moe.expect("moe");
    assert_eq!(m.sparse, [true, false, true, true]);
    assert!(m.renormalize);
    assert_eq!((m.shared_ff, n.intermediate_size), (Some(32), 96));
    let q = fixture("qwen3_moe");
    assert_eq!(q.family, Family::Qwen3Moe);
    assert!(q.hybrid.is_none() && q.qk_norm);
    assert_eq!(q.norm_offset, 0.0);
    // num_local_experts (transformers' attribute_map spelling), no shared expert.
    let m = q.moe.expect("moe");
    assert_eq!((m.n_experts, m.top_k, m.expert_ff), (8, 2, 32));
    assert!(!m.renormalize && m.shared_ff.is_none());
    assert_eq!(m.sparse, [true, false, true]);
    assert!(q.layers.iter().all(|l| l.rope.rotary_dim == 32));
}

/// A Qwen3.5 multimodal checkpoint (`Qwen3_5ForConditionalGeneration`): the language model's
/// settings under `text_config`, `tie_word_embeddings` at the top, no `layer_types` (every
/// fourth layer full attention), rope in rope_parameters with mrope keys, 4.x-style
/// `partial_rotary_factor` absent (default 0.25).
#[test]
fn qwen3_5_nested_text_config() {
    let cfg = r#"{
      "model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
      "tie_word_embeddings": true, "image_token_id": 248056,
      "text_config": {
        "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 8,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
        "linear_num_key_heads": 2, "linear_num_value_heads": 2, "linear_key_head_dim": 32,
        "linear_value_head_dim": 32, "rms_norm_eps": 1e-6, "eos_token_id": 248044,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": true}
      },
      "vision_config": {"depth": 2}
    }"#;
    let c = ModelConfig::from_hf_json(cfg).expect("parse");
    assert_eq!(c.family, Family::Qwen35);
    assert!(c.tie_embeddings);
    assert_eq!(c.eos_token_ids, [248044]);
    let h = c.hybrid.expect("hybrid");
    let attn: Vec<usize> = (0..8)
        .filter(|&i| h.mixers[i] == Mixer::Attention)
        .collect();
    assert_eq!(attn, [3, 7]);
    assert!(
        c.layers
            .iter()
            .all(|l| l.rope.rotary_dim == 16 && l.rope.theta == 1e7)
    );
}

#[test]
fn bad_hybrid_configs_are_typed_errors() {
    let base = |extra: &str| {
        format!(
            r#"{{"model_type": "qwen3_next", "vocab_size": 10, "hidden_size": 8,
            "intermediate_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1, "head_dim": 4, "moe_intermediate_size": 4,
            "shared_expert_intermediate_size": 4, "num_experts": 4 {extra}}}"#
        )
    };
    let err = |extra: &str| ModelConfig::from_hf_json(&base(extra)).expect_err(extra);
    assert!(matches!(
        err(r#", "num_experts_per_tok": 5"#),
        ModelError::Config { field, .. } if field == "num_experts_per_tok"
    ));
    assert!(matches!(
        err(r#", "num_experts_per_tok": 2, "layer_types": ["linear_attention", "mamba"]"#),
        ModelError::Config { field, .. } if field == "layer_types"
    ));
    assert!(matches!(
        err(r#", "num_experts_per_tok": 2, "linear_num_key_heads": 3, "linear_num_value_heads": 4"#),
        ModelError::Config { field, .. } if field == "linear_num_value_heads"
    ));
    assert!(matches!(err(""), ModelError::Config { field, .. } if field == "num_experts_per_tok"));
    let ok = ModelConfig::from_hf_json(&base(r#", "num_experts_per_tok": 2"#)).expect("valid");
    assert_eq!(
        ok.hybrid.expect("hybrid").mixers,
        [Mixer::DeltaNet, Mixer::DeltaNet]
    );
}
