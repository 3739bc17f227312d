//! ggml tensor element types: ids, block sizes and block byte sizes.
//!
//! The ids are the values of `enum ggml_type` in llama.cpp's `ggml/include/ggml.h`; they are
//! what a GGUF tensor-info record stores. Block geometry follows the `block_*` structs of
//! `ggml-common.h` (`type_size` is `sizeof(block_x)`).

use std::fmt;
use std::str::FromStr;

/// Elements per super-block of the k-quant and i-quant families (`QK_K` in ggml).
pub const QK_K: u64 = 256;

/// A ggml tensor element type as stored in GGUF tensor infos.
///
/// Ids not listed here (4, 5, 31-33, 36-38 were removed from ggml; anything newer than
/// `MXFP4` is not known to this crate) are rejected by the reader with
/// [`GgufErrorKind::UnknownType`](crate::GgufErrorKind::UnknownType).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// 32-bit IEEE float.
    F32 = 0,
    /// 16-bit IEEE float.
    F16 = 1,
    /// 4-bit, 32 per block, f16 scale.
    Q4_0 = 2,
    /// 4-bit, 32 per block, f16 scale and min.
    Q4_1 = 3,
    /// 5-bit, 32 per block, f16 scale.
    Q5_0 = 6,
    /// 5-bit, 32 per block, f16 scale and min.
    Q5_1 = 7,
    /// 8-bit, 32 per block, f16 scale.
    Q8_0 = 8,
    /// 8-bit, 32 per block, f16 scale and f16 sum (an activation format).
    Q8_1 = 9,
    /// 2-bit k-quant (256 per super-block).
    Q2_K = 10,
    /// 3-bit k-quant.
    Q3_K = 11,
    /// 4-bit k-quant.
    Q4_K = 12,
    /// 5-bit k-quant.
    Q5_K = 13,
    /// 6-bit k-quant.
    Q6_K = 14,
    /// 8-bit k-quant (f32 scale, block sums; an activation format).
    Q8_K = 15,
    /// i-quant, 2.06 bits per weight.
    IQ2_XXS = 16,
    /// i-quant, 2.31 bits per weight.
    IQ2_XS = 17,
    /// i-quant, 3.06 bits per weight.
    IQ3_XXS = 18,
    /// i-quant, 1.56 bits per weight.
    IQ1_S = 19,
    /// 4-bit non-linear, 32 per block.
    IQ4_NL = 20,
    /// i-quant, 3.44 bits per weight.
    IQ3_S = 21,
    /// i-quant, 2.5 bits per weight.
    IQ2_S = 22,
    /// 4-bit non-linear, 256 per super-block.
    IQ4_XS = 23,
    /// 8-bit signed integer.
    I8 = 24,
    /// 16-bit signed integer.
    I16 = 25,
    /// 32-bit signed integer.
    I32 = 26,
    /// 64-bit signed integer.
    I64 = 27,
    /// 64-bit IEEE float.
    F64 = 28,
    /// i-quant, 1.75 bits per weight.
    IQ1_M = 29,
    /// bfloat16.
    BF16 = 30,
    /// Ternary, 1.69 bits per weight.
    TQ1_0 = 34,
    /// Ternary, 2.06 bits per weight.
    TQ2_0 = 35,
    /// OCP microscaling FP4 (e2m1 values, one e8m0 scale per 32).
    MXFP4 = 39,
}

impl GgmlType {
    /// Every type this crate knows, in id order.
    pub const ALL: [GgmlType; 32] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::Q8_K,
        Self::IQ2_XXS,
        Self::IQ2_XS,
        Self::IQ3_XXS,
        Self::IQ1_S,
        Self::IQ4_NL,
        Self::IQ3_S,
        Self::IQ2_S,
        Self::IQ4_XS,
        Self::I8,
        Self::I16,
        Self::I32,
        Self::I64,
        Self::F64,
        Self::IQ1_M,
        Self::BF16,
        Self::TQ1_0,
        Self::TQ2_0,
        Self::MXFP4,
    ];

    /// The type with ggml id `id`, or `None` for an id this crate does not know.
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.iter().copied().find(|t| t.id() == id)
    }

    /// The ggml id (the `enum ggml_type` value written in GGUF files).
    pub fn id(self) -> u32 {
        self as u32
    }

    /// (elements per block, bytes per block, ggml name).
    fn traits(self) -> (u64, u64, &'static str) {
        use GgmlType::*;
        match self {
            F32 => (1, 4, "f32"),
            F16 => (1, 2, "f16"),
            Q4_0 => (32, 18, "q4_0"),
            Q4_1 => (32, 20, "q4_1"),
            Q5_0 => (32, 22, "q5_0"),
            Q5_1 => (32, 24, "q5_1"),
            Q8_0 => (32, 34, "q8_0"),
            Q8_1 => (32, 36, "q8_1"),
            Q2_K => (QK_K, 84, "q2_K"),
            Q3_K => (QK_K, 110, "q3_K"),
            Q4_K => (QK_K, 144, "q4_K"),
            Q5_K => (QK_K, 176, "q5_K"),
            Q6_K => (QK_K, 210, "q6_K"),
            Q8_K => (QK_K, 292, "q8_K"),
            IQ2_XXS => (QK_K, 66, "iq2_xxs"),
            IQ2_XS => (QK_K, 74, "iq2_xs"),
            IQ3_XXS => (QK_K, 98, "iq3_xxs"),
            IQ1_S => (QK_K, 50, "iq1_s"),
            IQ4_NL => (32, 18, "iq4_nl"),
            IQ3_S => (QK_K, 110, "iq3_s"),
            IQ2_S => (QK_K, 82, "iq2_s"),
            IQ4_XS => (QK_K, 136, "iq4_xs"),
            I8 => (1, 1, "i8"),
            I16 => (1, 2, "i16"),
            I32 => (1, 4, "i32"),
            I64 => (1, 8, "i64"),
            F64 => (1, 8, "f64"),
            IQ1_M => (QK_K, 56, "iq1_m"),
            BF16 => (1, 2, "bf16"),
            TQ1_0 => (QK_K, 54, "tq1_0"),
            TQ2_0 => (QK_K, 66, "tq2_0"),
            MXFP4 => (32, 17, "mxfp4"),
        }
    }

    /// Elements per block (`ggml_blck_size`): 1 for plain types, 32 or 256 for quantized ones.
    pub fn block_size(self) -> u64 {
        self.traits().0
    }

    /// Bytes per block (`ggml_type_size`, i.e. `sizeof(block_x)`).
    pub fn type_size(self) -> u64 {
        self.traits().1
    }

    /// ggml's name for the type (`ggml_type_name`): `"f32"`, `"q4_0"`, `"q4_K"`, `"iq2_xxs"`, ...
    pub fn name(self) -> &'static str {
        self.traits().2
    }

    /// True for block-quantized types (block size above 1).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes of a row of `ne0` elements (`ggml_row_size`), or `None` when `ne0` is not a
    /// multiple of [`block_size`](Self::block_size) or the size overflows `u64`.
    pub fn row_size(self, ne0: u64) -> Option<u64> {
        if !ne0.is_multiple_of(self.block_size()) {
            return None;
        }
        (ne0 / self.block_size()).checked_mul(self.type_size())
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of [`GgmlType::from_str`]: the name is not a known ggml type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown ggml type name {0:?} (expected e.g. f32, f16, bf16, q8_0, q4_0, q4_K)")]
pub struct UnknownGgmlTypeName(pub String);

impl FromStr for GgmlType {
    type Err = UnknownGgmlTypeName;

    /// Parses a ggml type name, ignoring ASCII case (`"q4_k"`, `"Q4_K"`, `"q4_K"` all work).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownGgmlTypeName(s.to_string()))
    }
}
