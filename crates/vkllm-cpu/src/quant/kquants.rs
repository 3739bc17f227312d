//! Dequantization of ggml's K-quants: 256-element super-blocks ([`QK_K`]) split into sub-blocks
//! with their own quantized scales.
//!
//! Layouts (`ggml-common.h`, little-endian f16 fields), element `e` of the super-block:
//!
//! - Q2_K (84 B): `scales[16]`, `qs[64]`, `d`, `dmin`. `e = 128h + 32j + l`:
//!   `q = (qs[32h + l] >> 2j) & 3`; sub-block `e / 16` has 4-bit scale `sc & 15` and min
//!   `sc >> 4`; `x = (d * scale) * q - dmin * min`.
//! - Q3_K (110 B): `hmask[32]`, `qs[64]`, `scales[12]`, `d`. Low 2 bits as Q2_K; bit 2 is
//!   `hmask[l] >> (e / 32)`, and a *clear* bit subtracts 4: `q = lo - 4 * (1 - hbit)`. The 16
//!   6-bit scales: low nibble `scales[i % 8] >> 4 * (i / 8)`, high pair
//!   `scales[8 + i % 4] >> 2 * (i / 4)`, biased by 32; `x = (d * scale) * q`.
//! - Q4_K (144 B): `d`, `dmin`, `scales[12]`, `qs[128]`. Sub-block `s = e / 32` reads nibble
//!   `s % 2` of `qs[32 * (s / 2) + l]`; its 6-bit scale and min come from [`scale_min_k4`];
//!   `x = (d * scale) * q - dmin * min`.
//! - Q5_K (176 B): as Q4_K plus `qh[32]` before `qs`; bit 4 of element `32s + l` is
//!   `qh[l] >> s`.
//! - Q6_K (210 B): `ql[128]`, `qh[64]`, `scales[16]` (i8), `d`. `e = 128h + 32k + l`: low
//!   nibble `k / 2` of `ql[64h + 32(k % 2) + l]`, high pair `qh[32h + l] >> 2k`, biased by 32;
//!   `x = (d * scales[e / 16]) * q`.

use super::{QK_K, f16_at};

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block's 12 scale bytes.
#[inline(always)]
pub(super) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

pub(super) fn dequant_q2_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(84).zip(out.chunks_exact_mut(QK_K)) {
        let scales = &b[0..16];
        let qs = &b[16..80];
        let d = f16_at(&b[80..]);
        let dmin = f16_at(&b[82..]);
        for (e, o) in y.iter_mut().enumerate() {
            let (h, j, l) = (e / 128, (e / 32) % 4, e % 32);
            let q = (qs[32 * h + l] >> (2 * j)) & 3;
            let sc = scales[e / 16];
            let dl = d * f32::from(sc & 0x0f);
            let ml = dmin * f32::from(sc >> 4);
            *o = dl * f32::from(q) - ml;
        }
    }
}

pub(super) fn dequant_q3_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(110).zip(out.chunks_exact_mut(QK_K)) {
        let hmask = &b[0..32];
        let qs = &b[32..96];
        let sb = &b[96..108];
        let d = f16_at(&b[108..]);
        let dl: [f32; 16] = std::array::from_fn(|i| {
            let lo = (sb[i % 8] >> (4 * (i / 8))) & 0x0f;
            let hi = (sb[8 + i % 4] >> (2 * (i / 4))) & 3;
            d * f32::from(((lo | (hi << 4)) as i8) - 32)
        });
        for (e, o) in y.iter_mut().enumerate() {
            let (h, j, l) = (e / 128, (e / 32) % 4, e % 32);
            let lo = ((qs[32 * h + l] >> (2 * j)) & 3) as i8;
            let hbit = (hmask[l] >> (e / 32)) & 1;
            let q = if hbit == 1 { lo } else { lo - 4 };
            *o = dl[e / 16] * f32::from(q);
        }
    }
}

pub(super) fn dequant_q4_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(144).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(b);
        let dmin = f16_at(&b[2..]);
        let sc = &b[4..16];
        let qs = &b[16..144];
        for (s, ys) in y.chunks_exact_mut(32).enumerate() {
            let (scale, min) = scale_min_k4(s, sc);
            let d1 = d * f32::from(scale);
            let m1 = dmin * f32::from(min);
            let shift = 4 * (s % 2);
            for (l, o) in ys.iter_mut().enumerate() {
                let q = (qs[32 * (s / 2) + l] >> shift) & 0x0f;
                *o = d1 * f32::from(q) - m1;
            }
        }
    }
}

pub(super) fn dequant_q5_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(176).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(b);
        let dmin = f16_at(&b[2..]);
        let sc = &b[4..16];
        let qh = &b[16..48];
        let qs = &b[48..176];
        for (s, ys) in y.chunks_exact_mut(32).enumerate() {
            let (scale, min) = scale_min_k4(s, sc);
            let d1 = d * f32::from(scale);
            let m1 = dmin * f32::from(min);
            let shift = 4 * (s % 2);
            for (l, o) in ys.iter_mut().enumerate() {
                let lo = (qs[32 * (s / 2) + l] >> shift) & 0x0f;
                let hi = ((qh[l] >> s) & 1) << 4;
                *o = d1 * f32::from(lo | hi) - m1;
            }
        }
    }
}

pub(super) fn dequant_q6_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(210).zip(out.chunks_exact_mut(QK_K)) {
        let ql = &b[0..128];
        let qh = &b[128..192];
        let scales = &b[192..208];
        let d = f16_at(&b[208..]);
        for (e, o) in y.iter_mut().enumerate() {
            let (h, k, l) = (e / 128, (e / 32) % 4, e % 32);
            let lo = (ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0f;
            let hi = (qh[32 * h + l] >> (2 * k)) & 3;
            let q = ((lo | (hi << 4)) as i8) - 32;
            *o = d * f32::from(scales[e / 16] as i8) * f32::from(q);
        }
    }
}
