//! Which type each tensor gets: llama.cpp's `llama-quantize` rules (`src/llama-quant.cpp`:
//! `tensor_allows_quantization`, `llama_tensor_get_type_impl`, `tensor_type_fallback`) for the
//! schemes vkllm offers, restated here from that source. Names are llama.cpp's GGUF names.
//!
//! - Only tensors of two or more dimensions whose name ends in `weight` and not in
//!   `_norm.weight` are quantized (plus llama.cpp's short list of small exceptions such as MoE
//!   router weights and conv1d kernels); the rest stay F32.
//! - The output matrix, and the token embedding when it is tied to the output, become Q6_K
//!   (Q8_0 stays Q8_0; a row length not a multiple of the scheme's block size gives Q8_0).
//!   An untied token embedding keeps the scheme's type.
//! - Q4_K_M raises `attn_v` (and the attn_v-like fused `attn_qkv`, `attn_kv_b`) and `ffn_down`
//!   to Q6_K in the layers
//!   `use_more_bits` picks: the first and last eighth, and every third layer in between
//!   (`i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2`). The counter is the tensor's index among
//!   the tensors of its kind in llama.cpp's iteration order (layer order in current llama.cpp;
//!   older builds counted in file order, which is why some published files differ).
//! - A row length that is not a multiple of the chosen type's block size falls back as
//!   llama.cpp does: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0, and F16 when
//!   even that does not divide. For the legacy types (Q4_0, Q4_1, Q5_0, Q8_0), where
//!   `llama-quantize` stops with an error, the fallback is F16 as in `convert_hf_to_gguf.py`.
//! - F16 and BF16 are not quantized types: every quantizable tensor takes them, nothing else
//!   changes.

use vkllm_cpu::QuantType;

use super::QuantScheme;

/// llama.cpp's broad tensor categories (`tensor_category`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    TokenEmbd,
    Output,
    AttnQ,
    AttnK,
    AttnV,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other,
}

impl Category {
    /// The category of a GGUF tensor name (`tensor_get_category`).
    pub fn of(name: &str) -> Category {
        if name == "output.weight" {
            return Category::Output;
        }
        if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
            return Category::TokenEmbd;
        }
        for (pat, cat) in [
            ("attn_qkv.weight", Category::AttnQkv),
            ("attn_kv_b.weight", Category::AttnKvB),
            ("attn_v.weight", Category::AttnV),
            ("attn_k.weight", Category::AttnK),
            ("attn_q.weight", Category::AttnQ),
            ("attn_output.weight", Category::AttnOutput),
            ("ffn_up", Category::FfnUp),
            ("ffn_gate", Category::FfnGate),
            ("ffn_down", Category::FfnDown),
        ] {
            if name.contains(pat) {
                return cat;
            }
        }
        Category::Other
    }

    /// attn_v-like tensors (counted together by llama.cpp).
    pub fn is_attn_v(self) -> bool {
        matches!(
            self,
            Category::AttnV | Category::AttnQkv | Category::AttnKvB
        )
    }
}

/// Whether llama.cpp quantizes this tensor at all (`tensor_allows_quantization`, for the
/// architectures vkllm runs; `n_dims` counts the tensor's dimensions).
pub fn allows_quantization(name: &str, n_dims: usize) -> bool {
    if n_dims < 2 || !name.ends_with("weight") || name.contains("_norm.weight") {
        return false;
    }
    const KEEP: [&str; 6] = [
        "ffn_gate_inp.weight",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
    ];
    !KEEP.iter().any(|k| name.contains(k))
}

/// llama.cpp's `use_more_bits(i_layer, n_layers)`.
pub fn use_more_bits(i: usize, n: usize) -> bool {
    let (i, n) = (i as i64, n as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// One tensor as the type rules see it.
#[derive(Clone, Copy, Debug)]
pub struct TensorDesc<'a> {
    /// llama.cpp's name (`blk.3.attn_v.weight`).
    pub name: &'a str,
    /// Row length (ggml's `ne[0]`).
    pub cols: usize,
    /// Number of dimensions.
    pub n_dims: usize,
    /// Index of this tensor among those of its kind (attn_v-like, ffn_down) in llama.cpp's
    /// iteration order: the layer index in current llama.cpp.
    pub counter: usize,
}

/// What the rules need to know about the model.
#[derive(Clone, Copy, Debug)]
pub struct MixModel {
    /// Decoder layers (`n_layer`, also the attn_v count of a dense model).
    pub n_layers: usize,
    /// No `output.weight`: the token embedding is the output matrix too.
    pub tied: bool,
}

/// The type llama.cpp gives `t` under `scheme`; F32 for tensors it does not quantize.
pub fn tensor_type(scheme: QuantScheme, t: &TensorDesc<'_>, m: &MixModel) -> QuantType {
    if !allows_quantization(t.name, t.n_dims) {
        return QuantType::F32;
    }
    let default = scheme.default_type();
    if matches!(default, QuantType::F16 | QuantType::BF16 | QuantType::F32) {
        return default;
    }
    let cat = Category::of(t.name);
    let mut ty = default;
    if cat == Category::Output || (m.tied && cat == Category::TokenEmbd) {
        if !t.cols.is_multiple_of(default.block_size()) {
            ty = QuantType::Q8_0;
        } else if default != QuantType::Q8_0 {
            ty = QuantType::Q6_K;
        }
    } else if scheme == QuantScheme::Q4_K_M {
        let more_bits = match cat {
            c if c.is_attn_v() => use_more_bits(t.counter, m.n_layers),
            Category::FfnDown => use_more_bits(t.counter, m.n_layers),
            _ => false,
        };
        if more_bits {
            ty = QuantType::Q6_K;
        }
    }
    fallback(ty, t.cols)
}

/// `tensor_type_fallback`: a type whose block divides `cols` (see the module doc).
pub fn fallback(ty: QuantType, cols: usize) -> QuantType {
    if cols.is_multiple_of(ty.block_size()) {
        return ty;
    }
    let next = match ty {
        QuantType::Q2_K | QuantType::Q3_K => QuantType::Q4_0,
        QuantType::Q4_K => QuantType::Q5_0,
        QuantType::Q5_K => QuantType::Q5_1,
        QuantType::Q6_K => QuantType::Q8_0,
        QuantType::IQ4_XS => QuantType::IQ4_NL,
        _ => QuantType::F16,
    };
    if cols.is_multiple_of(next.block_size()) {
        next
    } else {
        QuantType::F16
    }
}

/// The layer of a `blk.N.` name.
pub fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}
