//! Weights are nouns: plain structs of backend tensors, loaded by their Hugging Face names.

use std::borrow::Cow;

use crate::backend::{Backend, Linear, Tensor};
use crate::config::ModelConfig;
use crate::error::ModelError;

/// A tensor read into host memory as f32.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Outermost dimension first.
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// A tensor as stored in the file: its type and raw bytes (llama.cpp block layout).
#[derive(Clone, Debug)]
pub struct RawTensor<'a> {
    /// Outermost dimension first.
    pub shape: Vec<usize>,
    pub ty: vkllm_cpu::quant::QuantType,
    /// Borrowed from a memory map, or made on the fly (quantize at load).
    pub bytes: Cow<'a, [u8]>,
}

/// Where weights come from: a safetensors checkpoint, a GGUF file (through a name map), ...
pub trait TensorSource {
    /// The tensor by its Hugging Face name, or `None` when absent.
    fn tensor_f32(&self, name: &str) -> Result<Option<HostTensor>, ModelError>;

    /// The tensor's stored bytes, for backends that read the format directly (GGUF blocks).
    /// `None` when absent or when the source only offers f32.
    fn tensor_raw(&self, _name: &str) -> Result<Option<RawTensor<'_>>, ModelError> {
        Ok(None)
    }
}

/// One decoder layer's weights.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    pub attn_norm: Tensor,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    /// Gemma 2/3: norm of the attention output before the residual add.
    pub post_attn_norm: Option<Tensor>,
    pub ffn_norm: Tensor,
    /// Gemma 2/3: norm of the MLP output before the residual add.
    pub post_ffn_norm: Option<Tensor>,
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

/// All weights of a dense model.
#[derive(Clone, Debug)]
pub struct Weights {
    pub embed: Tensor,
    pub layers: Vec<LayerWeights>,
    pub final_norm: Tensor,
    pub lm_head: Linear,
}

/// Reads tensors by name from a source, checks their shapes and uploads them to a backend.
pub(crate) struct Loader<'a, B: Backend> {
    pub(crate) src: &'a dyn TensorSource,
    pub(crate) b: &'a mut B,
}

impl<B: Backend> Loader<'_, B> {
    pub(crate) fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, ModelError> {
        let data = self.read(name, shape)?;
        self.b.upload_f32(&data)
    }

    pub(crate) fn matrix(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Tensor, ModelError> {
        if let Some(raw) = self.src.tensor_raw(name)? {
            if raw.shape != [rows, cols] {
                return Err(ModelError::TensorShape {
                    name: name.to_string(),
                    expected: vec![rows, cols],
                    found: raw.shape,
                });
            }
            if let Some(t) = self.b.upload_matrix_raw(raw.ty, &raw.bytes, rows, cols)? {
                return Ok(t);
            }
        }
        let data = self.read(name, &[rows, cols])?;
        self.b.upload_matrix(&data, rows, cols)
    }

    pub(crate) fn read(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let HostTensor { shape: found, data } =
            self.src
                .tensor_f32(name)?
                .ok_or_else(|| ModelError::MissingTensor {
                    name: name.to_string(),
                })?;
        if found != shape {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                expected: shape.to_vec(),
                found,
            });
        }
        Ok(data)
    }

    pub(crate) fn optional_matrix(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Option<Tensor>, ModelError> {
        match self.matrix(name, rows, cols) {
            Err(ModelError::MissingTensor { .. }) => Ok(None),
            r => r.map(Some),
        }
    }

    pub(crate) fn linear(
        &mut self,
        prefix: &str,
        rows: usize,
        cols: usize,
        bias: bool,
    ) -> Result<Linear, ModelError> {
        let weight = self.matrix(&format!("{prefix}.weight"), rows, cols)?;
        let bias = if bias {
            Some(self.tensor(&format!("{prefix}.bias"), &[rows])?)
        } else {
            None
        };
        Ok(Linear {
            weight,
            bias,
            rows,
            cols,
        })
    }
}

impl Weights {
    /// Loads every tensor the config calls for, checking each shape.
    pub fn load<B: Backend>(
        cfg: &ModelConfig,
        src: &dyn TensorSource,
        b: &mut B,
    ) -> Result<Self, ModelError> {
        let mut ld = Loader { src, b };
        let (h, ff, hd) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim);
        let embed = ld.matrix("model.embed_tokens.weight", cfg.vocab_size, h)?;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let p = format!("model.layers.{i}");
            let bias = cfg.qkv_bias;
            // Gemma 2/3 call the pre-MLP norm `pre_feedforward_layernorm` and use
            // `post_attention_layernorm` for the attention output; the others use
            // `post_attention_layernorm` as the pre-MLP norm.
            let (ffn_norm_name, post_attn, post_ffn) = if cfg.sandwich_norms {
                (
                    format!("{p}.pre_feedforward_layernorm.weight"),
                    Some(ld.tensor(&format!("{p}.post_attention_layernorm.weight"), &[h])?),
                    Some(ld.tensor(&format!("{p}.post_feedforward_layernorm.weight"), &[h])?),
                )
            } else {
                (format!("{p}.post_attention_layernorm.weight"), None, None)
            };
            let (q_norm, k_norm) = if cfg.qk_norm {
                (
                    Some(ld.tensor(&format!("{p}.self_attn.q_norm.weight"), &[hd])?),
                    Some(ld.tensor(&format!("{p}.self_attn.k_norm.weight"), &[hd])?),
                )
            } else {
                (None, None)
            };
            layers.push(LayerWeights {
                attn_norm: ld.tensor(&format!("{p}.input_layernorm.weight"), &[h])?,
                q: ld.linear(&format!("{p}.self_attn.q_proj"), cfg.q_dim(), h, bias)?,
                k: ld.linear(&format!("{p}.self_attn.k_proj"), cfg.kv_dim(), h, bias)?,
                v: ld.linear(&format!("{p}.self_attn.v_proj"), cfg.kv_dim(), h, bias)?,
                o: ld.linear(&format!("{p}.self_attn.o_proj"), h, cfg.q_dim(), cfg.o_bias)?,
                q_norm,
                k_norm,
                post_attn_norm: post_attn,
                ffn_norm: ld.tensor(&ffn_norm_name, &[h])?,
                post_ffn_norm: post_ffn,
                gate: ld.linear(&format!("{p}.mlp.gate_proj"), ff, h, false)?,
                up: ld.linear(&format!("{p}.mlp.up_proj"), ff, h, false)?,
                down: ld.linear(&format!("{p}.mlp.down_proj"), h, ff, false)?,
            });
        }
        let final_norm = ld.tensor("model.norm.weight", &[h])?;
        let lm_weight = match ld.optional_matrix("lm_head.weight", cfg.vocab_size, h)? {
            Some(t) => t,
            None if cfg.tie_embeddings => embed,
            None => {
                return Err(ModelError::MissingTensor {
                    name: "lm_head.weight".into(),
                });
            }
        };
        let lm_head = Linear {
            weight: lm_weight,
            bias: None,
            rows: cfg.vocab_size,
            cols: h,
        };
        Ok(Weights {
            embed,
            layers,
            final_norm,
            lm_head,
        })
    }
}
