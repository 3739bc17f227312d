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
    let longrope = r#"{"model_type": "qwen2", "vocab_size": 10, "hidden_size": 64, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 4, "rope_scaling": {"type": "longrope", "factor": 4.0}}"#;
    match ModelConfig::from_hf_json(longrope) {
        Err(ModelError::Config { field, msg }) => {
            assert_eq!(field, "rope_scaling");
            assert!(msg.contains("longrope"));
        }
        other => panic!("expected a rope_scaling error, got {other:?}"),
    }
}

/// YaRN read as transformers' `_compute_yarn_parameters` does: with
/// `original_max_position_embeddings` the factor is max_position_embeddings over it (131072 /
/// 32768 = 4), the attention factor 0.1 ln 4 + 1 unless given, betas 32 and 1 unless given (0
/// counts as missing), `truncate` true unless false; `mscale` with `mscale_all_dim` gives their
/// ratio; without an original size the factor is taken as written over max_position_embeddings.
#[test]
fn yarn_rope_scaling() {
    let cfg = |max_pos: usize, scaling: &str| {
        let json = format!(
            r#"{{"model_type": "qwen2", "vocab_size": 10, "hidden_size": 64, "intermediate_size": 8,
              "num_hidden_layers": 1, "num_attention_heads": 4, "max_position_embeddings": {max_pos},
              "rope_theta": 1000000.0, "rope_scaling": {scaling}}}"#
        );
        ModelConfig::from_hf_json(&json).expect("config").layers[0]
            .rope
            .scaling
    };
    let qwen = cfg(
        131072,
        r#"{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}"#,
    );
    assert_eq!(
        qwen,
        RopeScaling::Yarn {
            factor: 4.0,
            original_max_position: 32768,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: (0.1 * 4f64.ln() + 1.0) as f32,
            truncate: true,
        }
    );
    let given = cfg(
        8192,
        r#"{"rope_type": "yarn", "factor": 2.0, "attention_factor": 0.5, "beta_fast": 0,
            "beta_slow": 2.0, "truncate": false}"#,
    );
    assert_eq!(
        given,
        RopeScaling::Yarn {
            factor: 2.0,
            original_max_position: 8192,
            beta_fast: 32.0,
            beta_slow: 2.0,
            attention_factor: 0.5,
            truncate: false,
        }
    );
    let ratio = cfg(
        4096,
        r#"{"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.5}"#,
    );
    let m = |k: f64| 0.1 * k * 40f64.ln() + 1.0;
    match ratio {
        RopeScaling::Yarn {
            attention_factor, ..
        } => assert_eq!(attention_factor, (m(1.0) / m(0.5)) as f32),
        other => panic!("{other:?}"),
    }
}

/// A GGUF's YaRN keys (llama.cpp's names) read as llama.cpp applies them: the factor as stored
/// over `original_context_length`, the attention factor mscale(factor) times `yarn_attn_factor`;
/// a non-standard ramp (`yarn_ext_factor` 0.5) or DeepSeek's log multiplier is a typed error.
#[test]
fn gguf_yarn_keys() {
    use vkllm_gguf::writer::GgufWriter;
    use vkllm_gguf::{GgmlType, GgufFile};
    let file = |extra: &[(&str, f32)]| {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", "qwen2").unwrap();
        for (k, v) in [
            ("block_count", 1u32),
            ("context_length", 32768),
            ("embedding_length", 64),
            ("feed_forward_length", 8),
            ("attention.head_count", 4),
            ("attention.head_count_kv", 4),
            ("rope.scaling.original_context_length", 8192),
        ] {
            w.add_metadata(format!("qwen2.{k}"), v).unwrap();
        }
        w.add_metadata("qwen2.rope.freq_base", 1_000_000.0f32)
            .unwrap();
        w.add_metadata("qwen2.rope.scaling.type", "yarn").unwrap();
        w.add_metadata("qwen2.rope.scaling.factor", 4.0f32).unwrap();
        for (k, v) in extra {
            w.add_metadata(format!("qwen2.rope.scaling.{k}"), *v)
                .unwrap();
        }
        w.add_tensor(
            "token_embd.weight",
            GgmlType::F32,
            &[64, 10],
            vec![0u8; 4 * 640],
        )
        .unwrap();
        w.add_tensor(
            "blk.0.attn_norm.weight",
            GgmlType::F32,
            &[64],
            vec![0u8; 4 * 64],
        )
        .unwrap();
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    };
    let cfg =
        vkllm_models::gguf::config_from_gguf(&file(&[("yarn_attn_factor", 0.5)])).expect("config");
    assert_eq!(
        cfg.layers[0].rope.scaling,
        RopeScaling::Yarn {
            factor: 4.0,
            original_max_position: 8192,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: ((0.1 * 4f64.ln() + 1.0) * 0.5) as f32,
            truncate: true,
        }
    );
    for bad in [("yarn_ext_factor", 0.5f32), ("yarn_log_multiplier", 0.1)] {
        match vkllm_models::gguf::config_from_gguf(&file(&[bad])) {
            Err(ModelError::Config { field, msg }) => {
                assert_eq!(field, "qwen2.rope.scaling", "{msg}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}
