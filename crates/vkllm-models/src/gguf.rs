//! Models from llama.cpp GGUF files: hyperparameters from GGUF metadata, tensors by llama.cpp's
//! names, mapped onto the Hugging Face names the rest of the crate uses.
//!
//! What llama.cpp's converter changes, and how it is undone here:
//! - `llama` (and Mistral saved as `llama`): q and k rows are permuted so that llama.cpp can use
//!   interleaved ("normal") RoPE; we keep the weights and rotate interleaved pairs instead.
//! - Gemma: `1` is added to every RMSNorm weight at conversion; we use plain `w` norms.
//! - Dimensions are stored innermost first (`ne0`): a `[rows, cols]` matrix has dims
//!   `[cols, rows]`; the bytes are the same row-major layout.
//! - Hyperparameters llama.cpp hard-codes are filled in the same way it does (Gemma 3: one global
//!   layer in six with RoPE base 10 000 on the local ones; Gemma 2: alternating, sliding first;
//!   both: attention scale 1/sqrt(head_dim)).

mod rope_freqs;

use std::path::Path;

use serde_json::{Map, Value, json};
use vkllm_cpu::RopeStyle;
use vkllm_gguf::{GgmlType, GgufFile, MetaValueRef};

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::family::Family;
use crate::weights::{HostTensor, RawTensor, TensorSource};

/// A GGUF model file: its config and its tensors under Hugging Face names.
pub struct GgufModel {
    pub file: GgufFile,
    pub config: ModelConfig,
}

impl GgufModel {
    /// Opens and validates the file and reads its hyperparameters.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let file = GgufFile::open(path).map_err(vkllm_gguf::Error::from)?;
        let config = config_from_gguf(&file)?;
        Ok(GgufModel { file, config })
    }

    /// A model from an already opened (or in-memory) GGUF file.
    pub fn from_file(file: GgufFile) -> Result<Self, ModelError> {
        let config = config_from_gguf(&file)?;
        Ok(GgufModel { file, config })
    }
}

/// Reads the hyperparameters into a Hugging Face-style config and resolves it like one.
pub fn config_from_gguf(f: &GgufFile) -> Result<ModelConfig, ModelError> {
    let arch = f
        .get_str("general.architecture")
        .map_err(vkllm_gguf::Error::from)?;
    let family = Family::from_gguf_arch(arch).ok_or_else(|| ModelError::UnsupportedArch {
        arch: arch.to_string(),
    })?;
    let key = |k: &str| format!("{arch}.{k}");
    let num = |k: &str| -> Option<Value> {
        f.get(&key(k)).and_then(|v| match v {
            MetaValueRef::F32(x) => Some(json!(x as f64)),
            MetaValueRef::F64(x) => Some(json!(x)),
            other => other.as_u64().map(|x| json!(x)),
        })
    };
    let need = |k: &str| num(k).ok_or_else(|| cfg_missing(&key(k)));

    let embd = f
        .require_tensor("token_embd.weight")
        .map_err(vkllm_gguf::Error::from)?;
    let vocab = embd.dims().get(1).copied().unwrap_or(0);
    let hidden = need("embedding_length")?;
    let n_heads = need("attention.head_count")?;
    let mut c = Map::new();
    c.insert("model_type".into(), json!(hf_model_type(family)));
    c.insert("vocab_size".into(), json!(vocab));
    c.insert("hidden_size".into(), hidden.clone());
    match num("feed_forward_length") {
        Some(ff) => {
            c.insert("intermediate_size".into(), ff);
        }
        // MoE files may have no dense feed-forward size.
        None if family.is_moe() => {}
        None => return Err(cfg_missing(&key("feed_forward_length"))),
    }
    let blocks = need("block_count")?;
    check_blocks(f, &key("block_count"), &blocks)?;
    c.insert("num_hidden_layers".into(), blocks);
    c.insert("num_attention_heads".into(), n_heads.clone());
    if let Some(kv) = num("attention.head_count_kv") {
        c.insert("num_key_value_heads".into(), kv);
    }
    let head_dim = match num("attention.key_length") {
        Some(k) => k,
        None => json!(hidden.as_u64().unwrap_or(0) / n_heads.as_u64().unwrap_or(1).max(1)),
    };
    c.insert("head_dim".into(), head_dim.clone());
    if let Some(eps) = num("attention.layer_norm_rms_epsilon") {
        c.insert("rms_norm_eps".into(), eps);
    }
    if let Some(ctx) = num("context_length") {
        c.insert("max_position_embeddings".into(), ctx);
    }
    c.insert(
        "rope_theta".into(),
        num("rope.freq_base").unwrap_or(json!(10000.0)),
    );
    if let (Some(rot), Some(hd)) = (num("rope.dimension_count"), head_dim.as_u64()) {
        let rot = rot.as_u64().unwrap_or(hd);
        if rot != hd && hd > 0 {
            c.insert(
                "partial_rotary_factor".into(),
                json!(rot as f64 / hd as f64),
            );
        }
    }
    match f.get(&key("rope.scaling.type")).and_then(|v| v.as_str()) {
        None | Some("none") => {}
        Some("linear") => {
            c.insert(
                "rope_scaling".into(),
                json!({"rope_type": "linear", "factor": need("rope.scaling.factor")?}),
            );
        }
        Some("yarn") => {
            // llama.cpp's YaRN: the factor as stored over the original context (the training
            // context when absent), cos/sin times mscale(factor) * yarn_attn_factor.
            let f = |k: &str| num(k).and_then(|v| v.as_f64());
            let factor =
                f("rope.scaling.factor").ok_or_else(|| cfg_missing(&key("rope.scaling.factor")))?;
            let ext = f("rope.scaling.yarn_ext_factor").unwrap_or(-1.0);
            let log_mul = f("rope.scaling.yarn_log_multiplier").unwrap_or(0.0);
            if !(ext < 0.0 || ext == 1.0) || log_mul != 0.0 {
                return Err(ModelError::Config {
                    field: key("rope.scaling"),
                    msg: format!(
                        "YaRN with ext_factor {ext} / log multiplier {log_mul} is not supported \
                         (only the standard ramp)"
                    ),
                });
            }
            let mscale = if factor > 1.0 {
                0.1 * factor.ln() + 1.0
            } else {
                1.0
            };
            let mut y = json!({
                "rope_type": "yarn",
                "factor": factor,
                "attention_factor": mscale * f("rope.scaling.yarn_attn_factor").unwrap_or(1.0),
            });
            for (g, h) in [
                (
                    "rope.scaling.original_context_length",
                    "yarn_original_context",
                ),
                ("rope.scaling.yarn_beta_fast", "beta_fast"),
                ("rope.scaling.yarn_beta_slow", "beta_slow"),
            ] {
                if let Some(v) = num(g) {
                    y[h] = v;
                }
            }
            c.insert("rope_scaling".into(), y);
        }
        Some(other) => {
            return Err(ModelError::Config {
                field: key("rope.scaling.type"),
                msg: format!("unsupported rope scaling {other:?}"),
            });
        }
    }
    if f.tensor("rope_freqs.weight").is_some() {
        let theta = num("rope.freq_base")
            .and_then(|v| v.as_f64())
            .unwrap_or(1e4);
        let rot = num("rope.dimension_count")
            .or_else(|| Some(head_dim.clone()))
            .and_then(|v| v.as_u64())
            .unwrap_or(0) as usize;
        let scaling = rope_freqs::recognise(f, theta as f32, rot)?;
        c.insert("rope_scaling".into(), scaling);
    }
    if let Some(w) = num("attention.sliding_window") {
        c.insert("sliding_window".into(), w);
    }
    for (gguf_key, hf_key) in [
        ("attn_logit_softcapping", "attn_logit_softcapping"),
        ("final_logit_softcapping", "final_logit_softcapping"),
    ] {
        if let Some(v) = num(gguf_key) {
            c.insert(hf_key.into(), v);
        }
    }
    match family {
        Family::Gemma2 | Family::Gemma3 => {
            // llama.cpp scales scores by 1/sqrt(head_dim) for these sizes.
            c.insert("query_pre_attn_scalar".into(), head_dim);
            if family == Family::Gemma3 {
                c.insert("rope_local_base_freq".into(), json!(10000.0));
                c.insert("sliding_window_pattern".into(), json!(6));
            }
        }
        _ => {}
    }
    c.insert(
        "tie_word_embeddings".into(),
        json!(f.tensor("output.weight").is_none()),
    );
    if let Some(bos) = f
        .get("tokenizer.ggml.bos_token_id")
        .and_then(|v| v.as_u64())
    {
        c.insert("bos_token_id".into(), json!(bos));
    }
    // Whether prompts start with BOS: the file's flag, else llama.cpp's default (SentencePiece
    // vocabularies add it, BPE ones do not).
    let add_bos = match f.get("tokenizer.ggml.add_bos_token") {
        Some(MetaValueRef::Bool(b)) => b,
        _ => matches!(f.get("tokenizer.ggml.model"), Some(MetaValueRef::String(m)) if m == "llama"),
    };
    c.insert("add_bos_token".into(), json!(add_bos));
    if let Some(eos) = f
        .get("tokenizer.ggml.eos_token_id")
        .and_then(|v| v.as_u64())
    {
        c.insert("eos_token_id".into(), json!(eos));
    }
    crate::gguf_hybrid::add_keys(f, arch, family, &mut c)?;
    let mut cfg = ModelConfig::from_hf_map(&c).map_err(|e| gguf_key(e, arch))?;
    crate::gguf_hybrid::fix_config(f, &mut cfg);
    // What the converter changed (see the module doc).
    if matches!(family, Family::Llama | Family::Mistral) {
        for l in &mut cfg.layers {
            l.rope.style = RopeStyle::Interleaved;
        }
    }
    if family.is_gemma() {
        cfg.norm_offset = 0.0;
    }
    cfg.qkv_bias = f.tensor("blk.0.attn_q.bias").is_some();
    cfg.o_bias = f.tensor("blk.0.attn_output.bias").is_some();
    Ok(cfg)
}

/// A config error under the GGUF key the field came from (the user's file has no
/// `num_attention_heads`, it has `llama.attention.head_count`).
fn gguf_key(e: ModelError, arch: &str) -> ModelError {
    match e {
        ModelError::Config { field, msg } => {
            let k = match field.as_str() {
                "num_hidden_layers" => "block_count",
                "hidden_size" => "embedding_length",
                "num_attention_heads" => "attention.head_count",
                "num_key_value_heads" => "attention.head_count_kv",
                "head_dim" => "attention.key_length",
                "intermediate_size" => "feed_forward_length",
                "vocab_size" => {
                    return ModelError::Config {
                        field: "token_embd.weight (vocabulary rows)".into(),
                        msg,
                    };
                }
                _ => return ModelError::Config { field, msg },
            };
            ModelError::Config {
                field: format!("{arch}.{k}"),
                msg,
            }
        }
        other => other,
    }
}

/// `{arch}.block_count` against the tensors: at least one block, and no more blocks than the
/// file has `blk.N.` tensors for (files may carry extra blocks, e.g. MTP layers).
fn check_blocks(f: &GgufFile, key: &str, value: &serde_json::Value) -> Result<(), ModelError> {
    let in_file = f
        .tensors()
        .iter()
        .filter_map(|t| {
            t.name()
                .strip_prefix("blk.")?
                .split('.')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .map(|i| i + 1)
        .max()
        .unwrap_or(0);
    match value.as_u64() {
        Some(n) if n >= 1 && n <= in_file => Ok(()),
        _ => Err(ModelError::Config {
            field: key.to_string(),
            msg: format!("{value}, but the file has tensors for {in_file} blocks"),
        }),
    }
}

fn hf_model_type(f: Family) -> &'static str {
    match f {
        Family::Gemma3 => "gemma3_text",
        Family::Qwen35 => "qwen3_5_text",
        Family::Qwen35Moe => "qwen3_5_moe_text",
        other => other.name(),
    }
}

fn cfg_missing(key: &str) -> ModelError {
    ModelError::Config {
        field: key.to_string(),
        msg: "missing from the GGUF metadata".into(),
    }
}

/// The llama.cpp name of a Hugging Face tensor name, for this family.
pub fn gguf_name(hf: &str, family: Family) -> Option<String> {
    if family.is_hybrid_or_moe()
        && let Some(n) = crate::gguf_hybrid::gguf_name(hf, family, None)
    {
        return Some(n);
    }
    match hf {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, name) = rest.split_once('.')?;
    let sandwich = matches!(family, Family::Gemma2 | Family::Gemma3);
    let (base, suffix) = name.rsplit_once('.')?;
    let mapped = match base {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "post_attention_layernorm" if sandwich => "post_attention_norm",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" => "ffn_norm",
        "post_feedforward_layernorm" => "post_ffw_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{mapped}.{suffix}"))
}

/// Dequantizes one tensor's bytes to f32.
fn to_f32(name: &str, ty: GgmlType, bytes: &[u8], n: usize) -> Result<Vec<f32>, ModelError> {
    let mut out = vec![0f32; n];
    let q = vkllm_cpu::quant::QuantType::from_ggml_id(ty.id()).map_err(|_| {
        ModelError::UnsupportedTensorType {
            name: name.to_string(),
            ty: ty.name().to_string(),
        }
    })?;
    vkllm_cpu::quant::dequantize_row(q, bytes, &mut out)?;
    Ok(out)
}

impl GgufModel {
    /// The GGUF tensor `gname` dequantized to f32, outermost dimension first.
    pub(crate) fn read_f32(&self, gname: &str) -> Result<Option<HostTensor>, ModelError> {
        let Some(info) = self.file.tensor(gname) else {
            return Ok(None);
        };
        let shape: Vec<usize> = info.dims().iter().rev().map(|&d| d as usize).collect();
        let n = info.n_elements() as usize;
        let data = to_f32(gname, info.ggml_type(), self.file.tensor_bytes(info), n)?;
        Ok(Some(HostTensor { shape, data }))
    }

    /// The GGUF tensor `gname` as stored.
    pub(crate) fn raw(&self, gname: &str) -> Result<Option<RawTensor<'_>>, ModelError> {
        let Some(info) = self.file.tensor(gname) else {
            return Ok(None);
        };
        let ty = info.ggml_type();
        let ty = vkllm_cpu::quant::QuantType::from_ggml_id(ty.id()).map_err(|_| {
            ModelError::UnsupportedTensorType {
                name: gname.to_string(),
                ty: ty.name().to_string(),
            }
        })?;
        let shape = info.dims().iter().rev().map(|&d| d as usize).collect();
        Ok(Some(RawTensor {
            shape,
            ty,
            bytes: std::borrow::Cow::Borrowed(self.file.tensor_bytes(info)),
        }))
    }

    fn name_of(&self, hf: &str) -> Option<String> {
        let family = self.config.family;
        if family.is_hybrid_or_moe()
            && let Some(n) = crate::gguf_hybrid::gguf_name(hf, family, Some(&self.file))
        {
            return Some(n);
        }
        gguf_name(hf, family)
    }
}

impl TensorSource for GgufModel {
    fn tensor_f32(&self, name: &str) -> Result<Option<HostTensor>, ModelError> {
        if let Some(t) = crate::gguf_hybrid::tensor_f32(self, name)? {
            return Ok(t);
        }
        match self.name_of(name) {
            Some(gname) => self.read_f32(&gname),
            None => Ok(None),
        }
    }

    fn tensor_raw(&self, name: &str) -> Result<Option<RawTensor<'_>>, ModelError> {
        if let Some(t) = crate::gguf_hybrid::tensor_raw(self, name)? {
            return Ok(t);
        }
        match self.name_of(name) {
            Some(gname) => self.raw(&gname),
            None => Ok(None),
        }
    }
}
