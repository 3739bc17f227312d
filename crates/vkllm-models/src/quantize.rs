//! Quantize at load: a [`TensorSource`] wrapper that hands out llama.cpp blocks made from an
//! f32 (or f16/bf16) checkpoint, with llama.cpp's per-tensor choice of type ([`mix`]).
//!
//! [`QuantizingSource::tensor_raw`] returns the blocks ([`vkllm_cpu::quant::quantize_rows`],
//! byte-identical to ggml's reference quantizers and to the `gguf` Python package's where it
//! has one); [`QuantizingSource::tensor_f32`] returns the same blocks dequantized, so a backend
//! that computes in f32 (the CPU reference) sees exactly the quantized weights. Tensors that
//! stay F32 (norms, biases, every 1-D tensor) pass through untouched.

pub mod mix;

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use vkllm_cpu::QuantType;
use vkllm_cpu::quant::{dequantize_to_vec, quantize_rows};

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::family::Family;
use crate::gguf::gguf_name;
use crate::weights::{HostTensor, RawTensor, TensorSource};

pub use mix::{MixModel, TensorDesc, tensor_type};

/// A `--quant` choice: llama.cpp's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // llama.cpp's spelling
pub enum QuantScheme {
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    /// Q4_K for every quantized matrix (output rule aside).
    Q4_K,
    /// Q6_K for every quantized matrix (llama.cpp's `Q6_K` file type).
    Q6_K,
    /// llama.cpp's `Q4_K_M` mix.
    Q4_K_M,
}

impl QuantScheme {
    /// Every scheme, in the order `--help` lists them.
    pub const ALL: [QuantScheme; 9] = [
        QuantScheme::F16,
        QuantScheme::BF16,
        QuantScheme::Q8_0,
        QuantScheme::Q4_0,
        QuantScheme::Q4_1,
        QuantScheme::Q5_0,
        QuantScheme::Q4_K,
        QuantScheme::Q6_K,
        QuantScheme::Q4_K_M,
    ];

    /// The name `--quant` takes (`q4_k_m`).
    pub fn name(self) -> &'static str {
        match self {
            QuantScheme::F16 => "f16",
            QuantScheme::BF16 => "bf16",
            QuantScheme::Q8_0 => "q8_0",
            QuantScheme::Q4_0 => "q4_0",
            QuantScheme::Q4_1 => "q4_1",
            QuantScheme::Q5_0 => "q5_0",
            QuantScheme::Q4_K => "q4_k",
            QuantScheme::Q6_K => "q6_k",
            QuantScheme::Q4_K_M => "q4_k_m",
        }
    }

    /// The type most tensors get (llama.cpp's `llama_ftype_get_default_type`).
    pub fn default_type(self) -> QuantType {
        match self {
            QuantScheme::F16 => QuantType::F16,
            QuantScheme::BF16 => QuantType::BF16,
            QuantScheme::Q8_0 => QuantType::Q8_0,
            QuantScheme::Q4_0 => QuantType::Q4_0,
            QuantScheme::Q4_1 => QuantType::Q4_1,
            QuantScheme::Q5_0 => QuantType::Q5_0,
            QuantScheme::Q4_K | QuantScheme::Q4_K_M => QuantType::Q4_K,
            QuantScheme::Q6_K => QuantType::Q6_K,
        }
    }

    /// llama.cpp's `general.file_type` (`llama_ftype`) for a file in this scheme; `q4_k` has
    /// none of its own and is written as `Q4_K_S` (14), its nearest.
    pub fn file_type(self) -> u32 {
        match self {
            QuantScheme::F16 => 1,
            QuantScheme::Q4_0 => 2,
            QuantScheme::Q4_1 => 3,
            QuantScheme::Q8_0 => 7,
            QuantScheme::Q5_0 => 8,
            QuantScheme::Q4_K => 14,
            QuantScheme::Q4_K_M => 15,
            QuantScheme::Q6_K => 18,
            QuantScheme::BF16 => 32,
        }
    }

    /// The names, comma-separated (for messages).
    pub fn names() -> String {
        Self::ALL.map(QuantScheme::name).join(", ")
    }
}

impl fmt::Display for QuantScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for QuantScheme {
    type Err = ModelError;

    /// Parses a name, ignoring ASCII case (`Q4_K_M` works too).
    fn from_str(s: &str) -> Result<Self, ModelError> {
        Self::ALL
            .into_iter()
            .find(|q| q.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| ModelError::UnknownQuantScheme {
                name: s.to_string(),
                known: Self::names(),
            })
    }
}

/// One tensor after quantization.
#[derive(Clone, Debug)]
pub struct QuantizedTensor {
    /// Outermost dimension first.
    pub shape: Vec<usize>,
    pub ty: QuantType,
    /// `ty`'s blocks, row after row.
    pub bytes: Vec<u8>,
}

/// A [`TensorSource`] that quantizes another source's tensors as they are read.
pub struct QuantizingSource<'a> {
    inner: &'a dyn TensorSource,
    scheme: QuantScheme,
    family: Family,
    model: MixModel,
}

impl<'a> QuantizingSource<'a> {
    /// Quantizes `inner` (a checkpoint with config `cfg`) to `scheme`. The token embedding is
    /// taken as tied to the output when `cfg.tie_embeddings` says so; see [`Self::tied`].
    pub fn new(inner: &'a dyn TensorSource, cfg: &ModelConfig, scheme: QuantScheme) -> Self {
        QuantizingSource {
            inner,
            scheme,
            family: cfg.family,
            model: MixModel {
                n_layers: cfg.n_layers,
                tied: cfg.tie_embeddings,
            },
        }
    }

    /// Overrides whether the embedding doubles as the output matrix (llama.cpp decides by the
    /// absence of `output.weight`; a checkpoint may hold `lm_head.weight` despite its config).
    pub fn tied(mut self, tied: bool) -> Self {
        self.model.tied = tied;
        self
    }

    pub fn scheme(&self) -> QuantScheme {
        self.scheme
    }

    /// The type the tensor `name` (Hugging Face name) of `shape` gets; F32 when it is not
    /// quantized.
    pub fn target_type(&self, name: &str, shape: &[usize]) -> QuantType {
        let gname = gguf_name(name, self.family);
        let gname = gname.as_deref().unwrap_or(name);
        let desc = TensorDesc {
            name: gname,
            cols: shape.last().copied().unwrap_or(0),
            n_dims: shape.len(),
            counter: mix::layer_of(gname).unwrap_or(0),
        };
        tensor_type(self.scheme, &desc, &self.model)
    }

    /// The tensor `name` quantized to its target type (F32 tensors come back as F32 bytes);
    /// `None` when the inner source does not have it.
    pub fn quantize(&self, name: &str) -> Result<Option<QuantizedTensor>, ModelError> {
        let Some(t) = self.inner.tensor_f32(name)? else {
            return Ok(None);
        };
        let ty = self.target_type(name, &t.shape);
        let cols = t.shape.last().copied().unwrap_or(1).max(1);
        let bytes = quantize_rows(ty, &t.data, cols).map_err(|source| ModelError::Quantize {
            name: name.to_string(),
            ty: ty.name().to_string(),
            source,
        })?;
        Ok(Some(QuantizedTensor {
            shape: t.shape,
            ty,
            bytes,
        }))
    }
}

impl TensorSource for QuantizingSource<'_> {
    fn tensor_f32(&self, name: &str) -> Result<Option<HostTensor>, ModelError> {
        let Some(t) = self.inner.tensor_f32(name)? else {
            return Ok(None);
        };
        let ty = self.target_type(name, &t.shape);
        if ty == QuantType::F32 {
            return Ok(Some(t));
        }
        let cols = t.shape.last().copied().unwrap_or(1).max(1);
        let err = |source| ModelError::Quantize {
            name: name.to_string(),
            ty: ty.name().to_string(),
            source,
        };
        let bytes = quantize_rows(ty, &t.data, cols).map_err(err)?;
        let data = dequantize_to_vec(ty, &bytes, t.data.len()).map_err(err)?;
        Ok(Some(HostTensor {
            shape: t.shape,
            data,
        }))
    }

    fn tensor_raw(&self, name: &str) -> Result<Option<RawTensor<'_>>, ModelError> {
        match self.quantize(name)? {
            Some(q) if q.ty != QuantType::F32 => Ok(Some(RawTensor {
                shape: q.shape,
                ty: q.ty,
                bytes: Cow::Owned(q.bytes),
            })),
            _ => Ok(None),
        }
    }
}
