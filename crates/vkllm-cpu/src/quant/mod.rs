//! llama.cpp's weight formats on the CPU: block layouts, dequantization, quantization and the
//! quantized matrix-vector reference.
//!
//! Every format here stores a row as consecutive blocks of [`QuantType::block_size`] elements,
//! each [`QuantType::type_size`] bytes, exactly as ggml lays them out (`ggml-common.h`); all
//! multi-byte fields are little-endian. Dequantization reproduces ggml's reference arithmetic in
//! f32 (scale products rounded to f32 one operation at a time, no fused multiply-add), which is
//! also what the `gguf` Python package's numpy dequantizer computes: the goldens in
//! `fixtures/quant/` (made by that package) are matched bit for bit.
//!
//! Files: `float.rs` (F32, F16, BF16), `legacy.rs` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), `kquants.rs`
//! (Q2_K..Q6_K), `kquantize.rs` / `kquantize23.rs` (K-quant quantizers), `iquants.rs` (IQ4_NL, IQ4_XS),
//! `matvec.rs` ([`matvec_quant`]), `act_q8.rs` ([`matvec_q8act`]: the product with int8-quantized
//! activations, oracle of the GPU's int8 matvec), `moe_q8act.rs` (the MoE experts on it).
//!
//! This crate does not depend on `vkllm-gguf` (both are foundation crates): callers map a GGUF
//! tensor type to [`QuantType`] through its ggml id ([`QuantType::from_ggml_id`]).

mod act_q8;
mod float;
mod iquants;
mod kquantize;
mod kquantize23;
mod kquants;
mod legacy;
mod matvec;
mod moe_q8act;

#[cfg(test)]
mod tests;

pub use act_q8::{ActQ8, TIE_MARGIN, matvec_q8act, quantize_act_q8, unit_offsets};
pub use iquants::KVALUES_IQ4NL;
pub use matvec::matvec_quant;
pub use moe_q8act::{ActNormQ8, moe_down_q8act, moe_gate_up_q8act};

use crate::CpuError;

/// Elements per K-quant super-block (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// The weight formats vkllm-cpu reads; discriminants are ggml's `ggml_type` ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
#[allow(non_camel_case_types)] // ggml's spelling: Q4_K, IQ4_NL, ...
pub enum QuantType {
    /// IEEE binary32.
    F32 = 0,
    /// IEEE binary16.
    F16 = 1,
    /// 32 elements: f16 scale `d`, 4-bit `q`; `x = d * (q - 8)`.
    Q4_0 = 2,
    /// 32 elements: f16 `d`, f16 `m`, 4-bit `q`; `x = d * q + m`.
    Q4_1 = 3,
    /// 32 elements: f16 `d`, 5-bit `q` (high bits in a u32); `x = d * (q - 16)`.
    Q5_0 = 6,
    /// 32 elements: f16 `d`, f16 `m`, 5-bit `q`; `x = d * q + m`.
    Q5_1 = 7,
    /// 32 elements: f16 `d`, i8 `q`; `x = d * q`.
    Q8_0 = 8,
    /// 256 elements: 16 sub-blocks with 4-bit scale and min, 2-bit `q`.
    Q2_K = 10,
    /// 256 elements: 16 sub-blocks with 6-bit signed scales, 3-bit `q`.
    Q3_K = 11,
    /// 256 elements: 8 sub-blocks with 6-bit scale and min, 4-bit `q`.
    Q4_K = 12,
    /// 256 elements: 8 sub-blocks with 6-bit scale and min, 5-bit `q`.
    Q5_K = 13,
    /// 256 elements: 16 sub-blocks with i8 scales, 6-bit `q`.
    Q6_K = 14,
    /// 32 elements: f16 `d`, 4-bit index into a fixed non-linear table.
    IQ4_NL = 20,
    /// 256 elements: 8 sub-blocks with 6-bit scales, 4-bit non-linear indices.
    IQ4_XS = 23,
    /// bfloat16 (the top half of an f32).
    BF16 = 30,
}

impl QuantType {
    /// Every format, in ggml id order.
    pub const ALL: [QuantType; 15] = [
        QuantType::F32,
        QuantType::F16,
        QuantType::Q4_0,
        QuantType::Q4_1,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q8_0,
        QuantType::Q2_K,
        QuantType::Q3_K,
        QuantType::Q4_K,
        QuantType::Q5_K,
        QuantType::Q6_K,
        QuantType::IQ4_NL,
        QuantType::IQ4_XS,
        QuantType::BF16,
    ];

    /// The format with ggml type id `id`.
    ///
    /// # Errors
    /// [`CpuError::UnknownGgmlType`] for an id not in [`QuantType::ALL`].
    pub fn from_ggml_id(id: u32) -> Result<Self, CpuError> {
        Self::ALL
            .into_iter()
            .find(|t| t.ggml_id() == id)
            .ok_or(CpuError::UnknownGgmlType { id })
    }

    /// ggml's `ggml_type` id.
    pub fn ggml_id(self) -> u32 {
        self as u32
    }

    /// ggml's name (`"q4_K"`, `"bf16"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            QuantType::F32 => "f32",
            QuantType::F16 => "f16",
            QuantType::Q4_0 => "q4_0",
            QuantType::Q4_1 => "q4_1",
            QuantType::Q5_0 => "q5_0",
            QuantType::Q5_1 => "q5_1",
            QuantType::Q8_0 => "q8_0",
            QuantType::Q2_K => "q2_K",
            QuantType::Q3_K => "q3_K",
            QuantType::Q4_K => "q4_K",
            QuantType::Q5_K => "q5_K",
            QuantType::Q6_K => "q6_K",
            QuantType::IQ4_NL => "iq4_nl",
            QuantType::IQ4_XS => "iq4_xs",
            QuantType::BF16 => "bf16",
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            QuantType::F32 | QuantType::F16 | QuantType::BF16 => 1,
            QuantType::Q4_0
            | QuantType::Q4_1
            | QuantType::Q5_0
            | QuantType::Q5_1
            | QuantType::Q8_0
            | QuantType::IQ4_NL => 32,
            QuantType::Q2_K
            | QuantType::Q3_K
            | QuantType::Q4_K
            | QuantType::Q5_K
            | QuantType::Q6_K
            | QuantType::IQ4_XS => QK_K,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            QuantType::F32 => 4,
            QuantType::F16 | QuantType::BF16 => 2,
            QuantType::Q4_0 | QuantType::IQ4_NL => 2 + 16,
            QuantType::Q4_1 => 2 + 2 + 16,
            QuantType::Q5_0 => 2 + 4 + 16,
            QuantType::Q5_1 => 2 + 2 + 4 + 16,
            QuantType::Q8_0 => 2 + 32,
            QuantType::Q2_K => QK_K / 16 + QK_K / 4 + 2 + 2,
            QuantType::Q3_K => QK_K / 8 + QK_K / 4 + 12 + 2,
            QuantType::Q4_K => 2 + 2 + 12 + QK_K / 2,
            QuantType::Q5_K => 2 + 2 + 12 + QK_K / 8 + QK_K / 2,
            QuantType::Q6_K => QK_K / 2 + QK_K / 4 + QK_K / 16 + 2,
            QuantType::IQ4_XS => 2 + 2 + QK_K / 64 + QK_K / 2,
        }
    }

    /// Bytes that `elements` elements take.
    ///
    /// # Errors
    /// [`CpuError::QuantRowLength`] if `elements` is not a multiple of the block size,
    /// [`CpuError::QuantShapeOverflow`] if the byte count overflows `usize`.
    pub fn row_bytes(self, elements: usize) -> Result<usize, CpuError> {
        let block = self.block_size();
        if !elements.is_multiple_of(block) {
            return Err(CpuError::QuantRowLength {
                ty: self,
                elements,
                block,
            });
        }
        (elements / block)
            .checked_mul(self.type_size())
            .ok_or(CpuError::QuantShapeOverflow {
                ty: self,
                rows: 1,
                cols: elements,
            })
    }

    /// Whether [`quantize_row`] supports this format.
    pub fn can_quantize(self) -> bool {
        matches!(
            self,
            QuantType::F32
                | QuantType::F16
                | QuantType::BF16
                | QuantType::Q4_0
                | QuantType::Q4_1
                | QuantType::Q5_0
                | QuantType::Q5_1
                | QuantType::Q8_0
                | QuantType::Q2_K
                | QuantType::Q3_K
                | QuantType::Q4_K
                | QuantType::Q5_K
                | QuantType::Q6_K
        )
    }
}

impl std::fmt::Display for QuantType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks that `bytes` holds exactly `elements` elements of `ty`.
fn check_len(ty: QuantType, bytes: usize, elements: usize) -> Result<(), CpuError> {
    let expected = ty.row_bytes(elements)?;
    if bytes != expected {
        return Err(CpuError::QuantByteLength {
            ty,
            elements,
            expected,
            got: bytes,
        });
    }
    Ok(())
}

/// Dequantizes `bytes` (whole blocks of `ty`) into `out`; `out.len()` is the element count.
///
/// The values are those of ggml's `dequantize_row_*` reference (and of the `gguf` package's
/// numpy dequantizer), bit for bit.
///
/// # Errors
/// [`CpuError::QuantRowLength`] if `out.len()` is not a whole number of blocks,
/// [`CpuError::QuantByteLength`] if `bytes` is not exactly that many blocks.
pub fn dequantize_row(ty: QuantType, bytes: &[u8], out: &mut [f32]) -> Result<(), CpuError> {
    check_len(ty, bytes.len(), out.len())?;
    match ty {
        QuantType::F32 => float::dequant_f32(bytes, out),
        QuantType::F16 => float::dequant_f16(bytes, out),
        QuantType::BF16 => float::dequant_bf16(bytes, out),
        QuantType::Q4_0 => legacy::dequant_q4_0(bytes, out),
        QuantType::Q4_1 => legacy::dequant_q4_1(bytes, out),
        QuantType::Q5_0 => legacy::dequant_q5_0(bytes, out),
        QuantType::Q5_1 => legacy::dequant_q5_1(bytes, out),
        QuantType::Q8_0 => legacy::dequant_q8_0(bytes, out),
        QuantType::Q2_K => kquants::dequant_q2_k(bytes, out),
        QuantType::Q3_K => kquants::dequant_q3_k(bytes, out),
        QuantType::Q4_K => kquants::dequant_q4_k(bytes, out),
        QuantType::Q5_K => kquants::dequant_q5_k(bytes, out),
        QuantType::Q6_K => kquants::dequant_q6_k(bytes, out),
        QuantType::IQ4_NL => iquants::dequant_iq4_nl(bytes, out),
        QuantType::IQ4_XS => iquants::dequant_iq4_xs(bytes, out),
    }
    Ok(())
}

/// [`dequantize_row`] into a new vector of `elements` values.
///
/// # Errors
/// As [`dequantize_row`].
pub fn dequantize_to_vec(
    ty: QuantType,
    bytes: &[u8],
    elements: usize,
) -> Result<Vec<f32>, CpuError> {
    check_len(ty, bytes.len(), elements)?;
    let mut out = vec![0.0f32; elements];
    dequantize_row(ty, bytes, &mut out)?;
    Ok(out)
}

/// Quantizes `x` (a whole number of blocks) to `ty`'s block layout.
///
/// F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 are byte-identical to ggml's
/// `quantize_row_*_ref` and to the `gguf` package's numpy quantizer (for finite inputs whose
/// block scales are normal f32 numbers). The K-quants are ggml's `quantize_row_q{2..6}_K_ref`
/// (Q4_K/Q5_K: `make_qkx2_quants`; Q6_K: `make_qx_quants`; Q2_K: `make_qkx2_quants` with absolute
/// error; Q3_K: `make_q3_quants`), the algorithms llama.cpp uses without an importance matrix,
/// byte-identical to that C code built without FMA contraction (described in
/// `quant/kquantize.rs` and `quant/kquantize23.rs`). IQ4_NL and IQ4_XS have no quantizer.
///
/// # Errors
/// [`CpuError::UnsupportedQuant`] for a format without a quantizer
/// ([`QuantType::can_quantize`]), [`CpuError::QuantRowLength`] if `x.len()` is not a whole
/// number of blocks.
pub fn quantize_row(ty: QuantType, x: &[f32]) -> Result<Vec<u8>, CpuError> {
    let n = ty.row_bytes(x.len())?;
    let mut out = vec![0u8; n];
    quantize_row_into(ty, x, &mut out)?;
    Ok(out)
}

/// [`quantize_row`] into `out`, which must be exactly `ty.row_bytes(x.len())` bytes.
///
/// # Errors
/// As [`quantize_row`], and [`CpuError::QuantByteLength`] if `out` has the wrong length.
pub fn quantize_row_into(ty: QuantType, x: &[f32], out: &mut [u8]) -> Result<(), CpuError> {
    check_len(ty, out.len(), x.len())?;
    match ty {
        QuantType::F32 => float::quant_f32(x, out),
        QuantType::F16 => float::quant_f16(x, out),
        QuantType::BF16 => float::quant_bf16(x, out),
        QuantType::Q4_0 => legacy::quant_q4_0(x, out),
        QuantType::Q4_1 => legacy::quant_q4_1(x, out),
        QuantType::Q5_0 => legacy::quant_q5_0(x, out),
        QuantType::Q5_1 => legacy::quant_q5_1(x, out),
        QuantType::Q8_0 => legacy::quant_q8_0(x, out),
        QuantType::Q2_K => kquantize23::quant_q2_k(x, out),
        QuantType::Q3_K => kquantize23::quant_q3_k(x, out),
        QuantType::Q4_K => kquantize::quant_q4_k(x, out),
        QuantType::Q5_K => kquantize::quant_q5_k(x, out),
        QuantType::Q6_K => kquantize::quant_q6_k(x, out),
        QuantType::IQ4_NL | QuantType::IQ4_XS => {
            return Err(CpuError::UnsupportedQuant { ty, op: "quantize" });
        }
    }
    Ok(())
}

/// Quantizes a `[rows, cols]` matrix (`x.len() == rows * cols`) row by row on several threads;
/// the bytes are those of [`quantize_row`] on each row, concatenated (the thread count never
/// changes them).
///
/// # Errors
/// As [`quantize_row`] for a row of `cols`; [`CpuError::QuantByteLength`] if `x.len()` is not
/// a multiple of `cols` (or `cols` is zero).
pub fn quantize_rows(ty: QuantType, x: &[f32], cols: usize) -> Result<Vec<u8>, CpuError> {
    if !ty.can_quantize() {
        return Err(CpuError::UnsupportedQuant { ty, op: "quantize" });
    }
    let row_bytes = ty.row_bytes(cols)?;
    if cols == 0 || !x.len().is_multiple_of(cols) {
        return Err(CpuError::QuantMatrixShape {
            ty,
            len: x.len(),
            cols,
        });
    }
    let rows = x.len() / cols;
    let total = rows
        .checked_mul(row_bytes)
        .ok_or(CpuError::QuantShapeOverflow { ty, rows, cols })?;
    let mut out = vec![0u8; total];
    if total == 0 {
        return Ok(out);
    }
    // About 1 MiB of input per part.
    let per_part = ((1usize << 18) / cols.max(1)).max(1);
    crate::threads::for_each_part(&mut out, row_bytes, per_part, |first_row, part| {
        for (i, dst) in part.chunks_exact_mut(row_bytes).enumerate() {
            let r = first_row + i;
            // Lengths were checked above: this cannot fail.
            let _ = quantize_row_into(ty, &x[r * cols..(r + 1) * cols], dst);
        }
    });
    Ok(out)
}

/// A little-endian f16 at `b[0..2]`, widened to f32 (exact).
#[inline(always)]
fn f16_at(b: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// `v` rounded to f16 (round to nearest even), little-endian.
#[inline(always)]
fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}
