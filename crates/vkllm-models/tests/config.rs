//! Config parsing: both transformers styles resolve to the same per-layer settings.

use vkllm_cpu::{RopeScaling, RopeStyle};
use vkllm_models::{Activation, Family, ModelConfig, ModelError};

const GEMMA3_V5: &str = r#"{
  "model_type": "gemma3_text", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 16,
  "sliding_window": 16, "max_position_embeddings": 512,
  "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                  "sliding_attention", "sliding_attention", "full_attention"],
  "rope_parameters": {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0}
  }
}"#;

const GEMMA3_V4: &str = r#"{
  "model_type": "gemma3_text", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 16,
  "sliding_window": 16, "max_position_embeddings": 512, "sliding_window_pattern": 6,
  "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
  "rope_scaling": {"rope_type": "linear", "factor": 2.0}
}"#;

#[test]
fn gemma3_both_styles_agree() {
    let a = ModelConfig::from_hf_json(GEMMA3_V5).unwrap();
    let b = ModelConfig::from_hf_json(GEMMA3_V4).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.family, Family::Gemma3);
    assert_eq!(a.activation, Activation::GeluTanh);
    assert_eq!(a.norm_offset, 1.0);
    assert_eq!(a.embed_scale, Some(8.0));
    assert_eq!(a.attn_scale, 0.25); // 16^-0.5
    assert!(a.qk_norm && a.sandwich_norms);
    let windows: Vec<_> = a.layers.iter().map(|l| l.window).collect();
    assert_eq!(
        windows,
        [Some(16), Some(16), Some(16), Some(16), Some(16), None]
    );
    assert_eq!(a.layers[0].rope.theta, 10000.0);
    assert_eq!(a.layers[0].rope.scaling, RopeScaling::None);
    assert_eq!(a.layers[5].rope.theta, 1e6);
    assert_eq!(
        a.layers[5].rope.scaling,
        RopeScaling::Linear { factor: 2.0 }
    );
    assert_eq!(a.layers[5].rope.style, RopeStyle::NeoX);
    assert_eq!(a.layers[5].rope.rotary_dim, 32);
}

#[test]
fn llama3_rope_scaling_v4() {
    let cfg = r#"{"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
      "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}"#;
    let c = ModelConfig::from_hf_json(cfg).unwrap();
    assert_eq!(c.head_dim, 16);
    assert_eq!(c.n_kv_heads, 1);
    assert!(!c.tie_embeddings && !c.qkv_bias && !c.qk_norm);
    assert_eq!(
        c.layers[1].rope.scaling,
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8192
        }
    );
    assert_eq!(c.layers[1].rope.theta, 500000.0);
}

#[test]
fn bad_configs_are_typed_errors() {
    let unknown = r#"{"model_type": "gpt_bigcode", "hidden_size": 8}"#;
    assert!(matches!(
        ModelConfig::from_hf_json(unknown),
        Err(ModelError::UnsupportedArch { .. })
    ));
    assert!(matches!(
        ModelConfig::from_hf_json("{not json"),
        Err(ModelError::Config { .. })
    ));
    let missing = r#"{"model_type": "llama", "hidden_size": 64}"#;
    match ModelConfig::from_hf_json(missing) {
        Err(ModelError::Config { field, .. }) => assert_eq!(field, "num_attention_heads"),
        other => panic!("expected a config error, got {other:?}"),
    }
    let bad_heads = r#"{"model_type": "llama", "vocab_size": 10, "hidden_size": 64, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 3}"#;
    assert!(matches!(
        ModelConfig::from_hf_json(bad_heads),
        Err(ModelError::Config { .. })
    ));
    let yarn = r#"{"model_type": "qwen2", "vocab_size": 10, "hidden_size": 64, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 4, "rope_scaling": {"type": "yarn", "factor": 4.0}}"#;
    match ModelConfig::from_hf_json(yarn) {
        Err(ModelError::Config { field, msg }) => {
            assert_eq!(field, "rope_scaling");
            assert!(msg.contains("yarn"));
        }
        other => panic!("expected a rope_scaling error, got {other:?}"),
    }
}
