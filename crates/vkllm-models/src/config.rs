//! The normalised description of a dense model, read from a Hugging Face `config.json`.
//!
//! Both config styles are accepted: transformers 4.x (`rope_theta` + `rope_scaling`,
//! `rope_local_base_freq`, `sliding_window_pattern`) and 5.x (`rope_parameters`, possibly keyed by
//! layer type, and explicit `layer_types`). Everything the forward needs is resolved here, per
//! layer, so the graph code has no family-specific branches beyond the feature flags below.

use serde_json::{Map, Value};
use vkllm_cpu::{Rope, RopeScaling, RopeStyle};

use crate::error::ModelError;
use crate::family::{Activation, Family};
use crate::hybrid::config::{
    HybridConfig, MoeConfig, default_partial_rotary, parse_hybrid, parse_moe,
};

/// Attention and position settings of one decoder layer.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerConfig {
    /// Sliding-window length (a query at position p sees keys j with p - j < window).
    pub window: Option<usize>,
    pub rope: Rope,
}

/// Everything the dense forward needs, resolved from the checkpoint's config.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub family: Family,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rms_eps: f32,
    /// Added to every RMSNorm weight: 1.0 for Gemma's `(1 + w)` norms, else 0.
    pub norm_offset: f32,
    pub activation: Activation,
    pub tie_embeddings: bool,
    /// Gemma multiplies the embeddings by sqrt(hidden_size).
    pub embed_scale: Option<f32>,
    pub qkv_bias: bool,
    /// Bias on the attention output projection (`attention_bias` in Llama-style configs).
    pub o_bias: bool,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// Norms after attention and after the MLP as well as before (Gemma 2 and 3).
    pub sandwich_norms: bool,
    pub attn_scale: f32,
    pub attn_softcap: Option<f32>,
    pub final_softcap: Option<f32>,
    pub max_position: usize,
    pub layers: Vec<LayerConfig>,
    pub bos_token_id: Option<u32>,
    /// Prompts start with the BOS token (the tokenizer adds it).
    pub add_bos: bool,
    pub eos_token_ids: Vec<u32>,
    /// Gated DeltaNet layers (Qwen3-Next, Qwen3.5); `None` for models of attention layers only.
    pub hybrid: Option<HybridConfig>,
    /// Mixture-of-Experts MLPs; `None` for dense MLPs.
    pub moe: Option<MoeConfig>,
}

impl ModelConfig {
    /// Width of the q projection output.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of the k and v projection outputs.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Parses a Hugging Face `config.json` text.
    pub fn from_hf_json(text: &str) -> Result<Self, ModelError> {
        let v: Value = serde_json::from_str(text).map_err(|e| ModelError::Config {
            field: "config.json".into(),
            msg: e.to_string(),
        })?;
        let obj = v
            .as_object()
            .ok_or_else(|| cfg_err("config.json", "not a JSON object"))?;
        // Multimodal Gemma 3 and Qwen3.5 checkpoints nest the language model's config.
        let top = obj.get("model_type").and_then(Value::as_str);
        match obj.get("text_config").and_then(Value::as_object) {
            Some(text) if top == Some("gemma3") => Self::from_hf_map(text),
            Some(text) if matches!(top, Some("qwen3_5" | "qwen3_5_moe")) => {
                // Keys the text config leaves out (tie_word_embeddings, token ids) come from the
                // outer config; a text config without model_type is the outer one's text model.
                let mut merged = text.clone();
                for (k, v) in obj {
                    if !matches!(k.as_str(), "text_config" | "vision_config" | "model_type") {
                        merged.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                merged
                    .entry("model_type".to_string())
                    .or_insert_with(|| Value::String(format!("{}_text", top.unwrap_or(""))));
                Self::from_hf_map(&merged)
            }
            _ => Self::from_hf_map(obj),
        }
    }

    pub(crate) fn from_hf_map(c: &Map<String, Value>) -> Result<Self, ModelError> {
        let model_type = get_str(c, "model_type")?;
        let family =
            Family::from_hf_model_type(model_type).ok_or_else(|| ModelError::UnsupportedArch {
                arch: model_type.to_string(),
            })?;
        let hidden_size = get_usize(c, "hidden_size")?;
        let n_heads = get_usize(c, "num_attention_heads")?;
        let n_kv_heads = opt_usize(c, "num_key_value_heads")?.unwrap_or(n_heads);
        let head_dim = opt_usize(c, "head_dim")?.unwrap_or(hidden_size / n_heads.max(1));
        let n_layers = get_usize(c, "num_hidden_layers")?;
        // Nothing is sized from a count before it passes these bounds (far above any real
        // model; a hostile file must not abort the process with a huge allocation).
        for (key, value, max) in [
            ("num_hidden_layers", n_layers, MAX_LAYERS),
            ("hidden_size", hidden_size, MAX_WIDTH),
            ("num_attention_heads", n_heads, MAX_HEADS),
            ("num_key_value_heads", n_kv_heads, MAX_HEADS),
            ("head_dim", head_dim, MAX_WIDTH),
        ] {
            check_count(key, value, max)?;
        }
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 || head_dim == 0 {
            return Err(cfg_err(
                "num_attention_heads",
                &format!(
                    "{n_heads} heads, {n_kv_heads} kv heads, head_dim {head_dim}: need heads % kv_heads == 0"
                ),
            ));
        }
        // Gemma reads `hidden_activation` only (its `hidden_act` is a stale "gelu").
        let act_key = if family.is_gemma() {
            "hidden_activation"
        } else {
            "hidden_act"
        };
        let act_name = c
            .get(act_key)
            .and_then(Value::as_str)
            .unwrap_or(family.default_activation_name());
        let activation = Activation::from_hf_name(act_name).ok_or_else(|| {
            cfg_err(
                "hidden_act",
                &format!("unsupported activation {act_name:?}"),
            )
        })?;

        let attention_bias = c
            .get("attention_bias")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if c.get("mlp_bias").and_then(Value::as_bool).unwrap_or(false) {
            return Err(cfg_err("mlp_bias", "MLP biases are not supported"));
        }
        let layers = resolve_layers(c, family, n_layers, head_dim)?;
        let attn_scale = match family {
            Family::Gemma2 | Family::Gemma3 => {
                let s = opt_f64(c, "query_pre_attn_scalar")?.unwrap_or(head_dim as f64);
                (1.0 / s.sqrt()) as f32
            }
            _ => (1.0 / (head_dim as f64).sqrt()) as f32,
        };
        let eos_token_ids = match c.get("eos_token_id") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_u64)
                .map(|x| x as u32)
                .collect(),
            Some(v) => v.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
            None => vec![],
        };
        // Qwen3.5 MoE has no dense MLP and no intermediate_size.
        let intermediate_size = match (opt_usize(c, "intermediate_size")?, family) {
            (Some(x), _) => x,
            (None, Family::Qwen35Moe) => 0,
            (None, _) => return Err(cfg_err("intermediate_size", "missing")),
        };
        check_count("vocab_size", get_usize(c, "vocab_size")?, MAX_VOCAB)?;
        if intermediate_size > MAX_WIDTH {
            return Err(cfg_err(
                "intermediate_size",
                &format!("{intermediate_size}: more than {MAX_WIDTH}"),
            ));
        }
        let hybrid = parse_hybrid(c, family, n_layers)?;
        let moe = parse_moe(c, family, n_layers)?;
        Ok(ModelConfig {
            family,
            vocab_size: get_usize(c, "vocab_size")?,
            hidden_size,
            intermediate_size,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            rms_eps: opt_f64(c, "rms_norm_eps")?.unwrap_or(1e-6) as f32,
            norm_offset: if family.is_gemma() || family.is_hybrid() {
                1.0
            } else {
                0.0
            },
            activation,
            tie_embeddings: c
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(family.default_tied()),
            embed_scale: family.is_gemma().then(|| (hidden_size as f32).sqrt()),
            qkv_bias: family == Family::Qwen2 || attention_bias,
            o_bias: family != Family::Qwen2 && attention_bias,
            qk_norm: matches!(family, Family::Qwen3 | Family::Gemma3 | Family::Qwen3Moe)
                || family.is_hybrid(),
            sandwich_norms: matches!(family, Family::Gemma2 | Family::Gemma3),
            attn_scale,
            attn_softcap: opt_f64(c, "attn_logit_softcapping")?.map(|x| x as f32),
            final_softcap: opt_f64(c, "final_logit_softcapping")?.map(|x| x as f32),
            max_position: opt_usize(c, "max_position_embeddings")?.unwrap_or(4096),
            layers,
            bos_token_id: c
                .get("bos_token_id")
                .and_then(Value::as_u64)
                .map(|x| x as u32),
            add_bos: c
                .get("add_bos_token")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            eos_token_ids,
            hybrid,
            moe,
        })
    }
}

/// Works out each layer's window and RoPE from whichever config style the file uses.
fn resolve_layers(
    c: &Map<String, Value>,
    family: Family,
    n_layers: usize,
    head_dim: usize,
) -> Result<Vec<LayerConfig>, ModelError> {
    let window = opt_usize(c, "sliding_window")?;
    // Which layers are sliding: explicit layer_types (transformers 5) or the 4.x rules.
    let sliding: Vec<bool> = match c.get("layer_types").and_then(Value::as_array) {
        Some(types) => {
            if types.len() != n_layers {
                return Err(cfg_err(
                    "layer_types",
                    &format!("{} entries for {n_layers} layers", types.len()),
                ));
            }
            types
                .iter()
                .map(|t| match t.as_str() {
                    Some("sliding_attention") => Ok(true),
                    // Gated DeltaNet layers have no window (their settings: hybrid::config).
                    Some("full_attention" | "linear_attention") => Ok(false),
                    other => Err(cfg_err(
                        "layer_types",
                        &format!("unknown layer type {other:?}"),
                    )),
                })
                .collect::<Result<_, _>>()?
        }
        None => (0..n_layers)
            .map(|i| match family {
                Family::Mistral => window.is_some(),
                Family::Gemma2 => i % 2 == 0,
                Family::Gemma3 => {
                    let pattern = opt_usize(c, "sliding_window_pattern")
                        .ok()
                        .flatten()
                        .or(opt_usize(c, "_sliding_window_pattern").ok().flatten())
                        .unwrap_or(6);
                    (i + 1) % pattern.max(1) != 0
                }
                Family::Qwen2 => {
                    let on = c
                        .get("use_sliding_window")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    let from = opt_usize(c, "max_window_layers")
                        .ok()
                        .flatten()
                        .unwrap_or(0);
                    on && i >= from
                }
                _ => false,
            })
            .collect(),
    };
    if sliding.iter().any(|&s| s) && window.is_none() {
        return Err(cfg_err(
            "sliding_window",
            "sliding layers but no sliding_window",
        ));
    }
    // Top level (4.x style), inside rope_parameters (5.x), or the family's default.
    let partial = match opt_f64(c, "partial_rotary_factor")? {
        Some(p) => p,
        None => match c.get("rope_parameters").and_then(Value::as_object) {
            Some(rp) => opt_f64(rp, "partial_rotary_factor")?,
            None => None,
        }
        .unwrap_or(default_partial_rotary(family)),
    };
    let rotary_dim = ((head_dim as f64 * partial) as usize) & !1;
    let global_rope = rope_for(c, "full_attention", rotary_dim)?;
    let local_rope = rope_for(c, "sliding_attention", rotary_dim)?;
    Ok(sliding
        .into_iter()
        .map(|s| LayerConfig {
            window: if s { window } else { None },
            rope: if s { local_rope } else { global_rope },
        })
        .collect())
}

/// The RoPE of one layer type, from `rope_parameters` (5.x, flat or keyed by layer type) or from
/// `rope_theta` + `rope_scaling` (+ Gemma 3's `rope_local_base_freq` for sliding layers) in 4.x.
fn rope_for(
    c: &Map<String, Value>,
    layer_type: &str,
    rotary_dim: usize,
) -> Result<Rope, ModelError> {
    let params: Option<&Map<String, Value>> =
        match c.get("rope_parameters").and_then(Value::as_object) {
            Some(p) if p.contains_key("full_attention") || p.contains_key("sliding_attention") => {
                match p.get(layer_type).and_then(Value::as_object) {
                    Some(lp) => Some(lp),
                    None => p.get("full_attention").and_then(Value::as_object),
                }
            }
            Some(p) => Some(p),
            None => None,
        };
    let (theta, scaling_obj) = match params {
        Some(p) => (opt_f64(p, "rope_theta")?.unwrap_or(10000.0), Some(p)),
        None => {
            let mut theta = opt_f64(c, "rope_theta")?.unwrap_or(10000.0);
            let mut scaling = c.get("rope_scaling").and_then(Value::as_object);
            // Gemma 3 (4.x): local layers use their own base and no scaling.
            if layer_type == "sliding_attention"
                && let Some(local) = opt_f64(c, "rope_local_base_freq")?
            {
                theta = local;
                scaling = None;
            }
            (theta, scaling)
        }
    };
    let scaling = match scaling_obj {
        None => RopeScaling::None,
        Some(s) => {
            let kind = s
                .get("rope_type")
                .or_else(|| s.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("default");
            match kind {
                "default" => RopeScaling::None,
                "linear" => RopeScaling::Linear {
                    factor: get_f64(s, "factor")? as f32,
                },
                "llama3" => RopeScaling::Llama3 {
                    factor: get_f64(s, "factor")? as f32,
                    low_freq_factor: get_f64(s, "low_freq_factor")? as f32,
                    high_freq_factor: get_f64(s, "high_freq_factor")? as f32,
                    original_max_position: get_usize(s, "original_max_position_embeddings")?,
                },
                "yarn" => yarn(c, s)?,
                other => {
                    return Err(cfg_err(
                        "rope_scaling",
                        &format!("unsupported rope type {other:?}"),
                    ));
                }
            }
        }
    };
    Ok(Rope {
        theta: theta as f32,
        rotary_dim,
        style: RopeStyle::NeoX,
        scaling,
    })
}

/// Most layers a config may declare.
pub const MAX_LAYERS: usize = 4096;
/// Most attention (or kv) heads.
pub const MAX_HEADS: usize = 1 << 16;
/// Widest hidden, head or feed-forward size.
pub const MAX_WIDTH: usize = 1 << 20;
/// Largest vocabulary (the sampler's bound).
pub const MAX_VOCAB: usize = 1 << 24;

/// `value` of `key` must be in `1..=max`.
fn check_count(key: &str, value: usize, max: usize) -> Result<(), ModelError> {
    if value == 0 || value > max {
        return Err(cfg_err(key, &format!("{value}: expected 1 to {max}")));
    }
    Ok(())
}

/// YaRN as transformers' `_compute_yarn_parameters` reads it: with
/// `original_max_position_embeddings` the factor is `max_position_embeddings` over it; the
/// attention factor defaults to `mscale(factor)` (`0.1 ln(factor) + 1`, or the ratio of the
/// `mscale` and `mscale_all_dim` forms when both are set). A GGUF's settings come as
/// `yarn_original_context` (llama.cpp's `rope.scaling.original_context_length`, the factor as
/// stored) and an explicit `attention_factor`.
fn yarn(c: &Map<String, Value>, s: &Map<String, Value>) -> Result<RopeScaling, ModelError> {
    let max_pos = opt_usize(c, "max_position_embeddings")?.unwrap_or(4096);
    let (factor, orig) = match opt_usize(s, "original_max_position_embeddings")? {
        Some(0) => {
            return Err(cfg_err(
                "rope_scaling",
                "original_max_position_embeddings 0",
            ));
        }
        Some(o) => (max_pos as f64 / o as f64, o),
        None => (
            get_f64(s, "factor")?,
            opt_usize(s, "yarn_original_context")?.unwrap_or(max_pos),
        ),
    };
    if !(factor.is_finite() && factor > 0.0) || orig == 0 {
        return Err(cfg_err(
            "rope_scaling",
            &format!("yarn factor {factor} over {orig} positions"),
        ));
    }
    let mscale = |scale: f64, m: f64| match scale <= 1.0 {
        true => 1.0,
        false => 0.1 * m * scale.ln() + 1.0,
    };
    let attention_factor = match opt_f64(s, "attention_factor")? {
        Some(a) => a,
        None => match (opt_f64(s, "mscale")?, opt_f64(s, "mscale_all_dim")?) {
            (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                mscale(factor, m) / mscale(factor, all)
            }
            _ => mscale(factor, 1.0),
        },
    };
    // transformers' `get("beta_fast") or 32`: a missing or zero value takes the default.
    let beta = |key: &str, default: f64| -> Result<f32, ModelError> {
        Ok(opt_f64(s, key)?.filter(|&b| b != 0.0).unwrap_or(default) as f32)
    };
    Ok(RopeScaling::Yarn {
        factor: factor as f32,
        original_max_position: orig,
        beta_fast: beta("beta_fast", 32.0)?,
        beta_slow: beta("beta_slow", 1.0)?,
        attention_factor: attention_factor as f32,
        truncate: s.get("truncate").and_then(Value::as_bool).unwrap_or(true),
    })
}

fn cfg_err(field: &str, msg: &str) -> ModelError {
    ModelError::Config {
        field: field.to_string(),
        msg: msg.to_string(),
    }
}

fn get_str<'a>(c: &'a Map<String, Value>, key: &str) -> Result<&'a str, ModelError> {
    c.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| cfg_err(key, "missing or not a string"))
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

fn get_usize(c: &Map<String, Value>, key: &str) -> Result<usize, ModelError> {
    opt_usize(c, key)?.ok_or_else(|| cfg_err(key, "missing"))
}

fn opt_f64(c: &Map<String, Value>, key: &str) -> Result<Option<f64>, ModelError> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| cfg_err(key, "not a number")),
    }
}

fn get_f64(c: &Map<String, Value>, key: &str) -> Result<f64, ModelError> {
    opt_f64(c, key)?.ok_or_else(|| cfg_err(key, "missing"))
}
