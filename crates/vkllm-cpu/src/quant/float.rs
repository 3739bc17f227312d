//! F32, F16 and BF16 rows (block size 1).
//!
//! F16 rounds to nearest even (as numpy's `astype(float16)` and ggml's `GGML_FP32_TO_FP16`).
//! BF16 follows ggml's `ggml_compute_fp32_to_bf16`: a NaN keeps its top 16 bits with the quiet
//! bit forced on; every other value rounds to nearest even on the upper 16 bits (overflow goes
//! to infinity).

use super::f16_at;

pub(super) fn dequant_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.as_chunks::<4>().0) {
        *o = f32::from_le_bytes(*b);
    }
}

pub(super) fn dequant_f16(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.as_chunks::<2>().0) {
        *o = f16_at(b);
    }
}

pub(super) fn dequant_bf16(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.as_chunks::<2>().0) {
        *o = f32::from_bits(u32::from(u16::from_le_bytes(*b)) << 16);
    }
}

pub(super) fn quant_f32(x: &[f32], out: &mut [u8]) {
    for (v, o) in x.iter().zip(out.as_chunks_mut::<4>().0) {
        *o = v.to_le_bytes();
    }
}

pub(super) fn quant_f16(x: &[f32], out: &mut [u8]) {
    for (v, o) in x.iter().zip(out.as_chunks_mut::<2>().0) {
        *o = super::f16_bytes(*v);
    }
}

/// ggml's f32 -> bf16 conversion (see the module docs).
pub(crate) fn f32_to_bf16_bits(v: f32) -> u16 {
    let n = v.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        // NaN: keep sign and payload top, force quiet.
        return ((n >> 16) | 64) as u16;
    }
    // Largest non-NaN input is 0xff80_0000: adding at most 0x8000 cannot overflow.
    ((n + 0x7fff + ((n >> 16) & 1)) >> 16) as u16
}

pub(super) fn quant_bf16(x: &[f32], out: &mut [u8]) {
    for (v, o) in x.iter().zip(out.as_chunks_mut::<2>().0) {
        *o = f32_to_bf16_bits(*v).to_le_bytes();
    }
}
