//! ggml's legacy 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Layouts (`ggml-common.h`, little-endian): every block starts with the f16 scale `d`; the `_1`
//! formats follow it with the f16 offset `m`. 4-bit quants pack element `j` in the low nibble
//! and element `j + 16` in the high nibble of byte `j`; the 5-bit formats keep bit 4 of element
//! `j` in bit `j` of a u32 `qh`. Q8_0 stores 32 i8 values.
//!
//! Quantizers are ggml's `quantize_row_*_ref` (which the `gguf` package's numpy code reproduces):
//! Q4_0/Q5_0 use the signed value of largest magnitude `max` (first one on ties) with
//! `d = max / -8` (`-16`), `q = min(15, trunc(x / d + 8.5))`; Q4_1/Q5_1 use `d = (max - min) / 15`
//! (`31`), `q = min(15, trunc((x - min) / d + 0.5))`; Q8_0 uses `d = amax / 127`,
//! `q = round_half_away(x / d)`. Each `x / d` is computed as `x * (1 / d)` in f32, and `1 / d` is
//! 0 for an all-zero block. Float-to-int conversions saturate (ggml leaves out-of-range
//! conversions undefined; they only happen when `1 / d` overflows, i.e. block maxima below about
//! 1e-37).

use super::{f16_at, f16_bytes};

const QK: usize = 32;
const HALF: usize = QK / 2;

/// Largest-magnitude element with its sign (the first one on ties), as ggml finds it.
fn signed_absmax(xb: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in xb {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn min_max(xb: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in xb {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

fn inv(d: f32) -> f32 {
    if d == 0.0 { 0.0 } else { 1.0 / d }
}

/// `trunc(v)` clamped to `0..=hi` (saturating: NaN gives 0).
fn trunc_clamp(v: f32, hi: i32) -> u8 {
    (v as i32).clamp(0, hi) as u8
}

/// The 5th bits of 32 quants, bit `j` = bit 4 of `q[j]`.
fn high_bits(q: &[u8; QK]) -> [u8; 4] {
    let mut qh = 0u32;
    for (j, &v) in q.iter().enumerate() {
        qh |= u32::from((v >> 4) & 1) << j;
    }
    qh.to_le_bytes()
}

fn pack_nibbles(q: &[u8; QK], qs: &mut [u8]) {
    for j in 0..HALF {
        qs[j] = (q[j] & 0x0f) | ((q[j + HALF] & 0x0f) << 4);
    }
}

/// Bits `j` and `j + 16` of the u32 `qh`, moved to bit 4.
fn hi5(qh: u32, j: usize) -> (u8, u8) {
    (
        (((qh >> j) & 1) << 4) as u8,
        (((qh >> (j + HALF)) & 1) << 4) as u8,
    )
}

pub(super) fn dequant_q4_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(18).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b);
        let qs = &b[2..18];
        for j in 0..HALF {
            y[j] = d * f32::from(i16::from(qs[j] & 0x0f) - 8);
            y[j + HALF] = d * f32::from(i16::from(qs[j] >> 4) - 8);
        }
    }
}

pub(super) fn dequant_q4_1(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(20).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b);
        let m = f16_at(&b[2..]);
        let qs = &b[4..20];
        for j in 0..HALF {
            y[j] = d * f32::from(qs[j] & 0x0f) + m;
            y[j + HALF] = d * f32::from(qs[j] >> 4) + m;
        }
    }
}

pub(super) fn dequant_q5_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(22).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let qs = &b[6..22];
        for j in 0..HALF {
            let (h0, h1) = hi5(qh, j);
            y[j] = d * f32::from(i16::from((qs[j] & 0x0f) | h0) - 16);
            y[j + HALF] = d * f32::from(i16::from((qs[j] >> 4) | h1) - 16);
        }
    }
}

pub(super) fn dequant_q5_1(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(24).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b);
        let m = f16_at(&b[2..]);
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let qs = &b[8..24];
        for j in 0..HALF {
            let (h0, h1) = hi5(qh, j);
            y[j] = d * f32::from((qs[j] & 0x0f) | h0) + m;
            y[j + HALF] = d * f32::from((qs[j] >> 4) | h1) + m;
        }
    }
}

pub(super) fn dequant_q8_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(34).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b);
        for (o, &q) in y.iter_mut().zip(&b[2..34]) {
            *o = f32::from(q as i8) * d;
        }
    }
}

pub(super) fn quant_q4_0(x: &[f32], out: &mut [u8]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(18)) {
        let d = signed_absmax(xb) / -8.0;
        let id = inv(d);
        let q: [u8; QK] = std::array::from_fn(|j| trunc_clamp(xb[j] * id + 8.5, 15));
        b[0..2].copy_from_slice(&f16_bytes(d));
        pack_nibbles(&q, &mut b[2..18]);
    }
}

pub(super) fn quant_q4_1(x: &[f32], out: &mut [u8]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(20)) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 15.0;
        let id = inv(d);
        let q: [u8; QK] = std::array::from_fn(|j| trunc_clamp((xb[j] - min) * id + 0.5, 15));
        b[0..2].copy_from_slice(&f16_bytes(d));
        b[2..4].copy_from_slice(&f16_bytes(min));
        pack_nibbles(&q, &mut b[4..20]);
    }
}

pub(super) fn quant_q5_0(x: &[f32], out: &mut [u8]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(22)) {
        let d = signed_absmax(xb) / -16.0;
        let id = inv(d);
        let q: [u8; QK] = std::array::from_fn(|j| trunc_clamp(xb[j] * id + 16.5, 31));
        b[0..2].copy_from_slice(&f16_bytes(d));
        b[2..6].copy_from_slice(&high_bits(&q));
        pack_nibbles(&q, &mut b[6..22]);
    }
}

pub(super) fn quant_q5_1(x: &[f32], out: &mut [u8]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(24)) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 31.0;
        let id = inv(d);
        let q: [u8; QK] = std::array::from_fn(|j| trunc_clamp((xb[j] - min) * id + 0.5, 31));
        b[0..2].copy_from_slice(&f16_bytes(d));
        b[2..4].copy_from_slice(&f16_bytes(min));
        b[4..8].copy_from_slice(&high_bits(&q));
        pack_nibbles(&q, &mut b[8..24]);
    }
}

pub(super) fn quant_q8_0(x: &[f32], out: &mut [u8]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(34)) {
        let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inv(d);
        b[0..2].copy_from_slice(&f16_bytes(d));
        for (o, &v) in b[2..34].iter_mut().zip(xb) {
            // f32::round rounds half away from zero, as C's roundf; `as i8` saturates.
            *o = (v * id).round() as i8 as u8;
        }
    }
}
