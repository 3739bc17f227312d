//! Dequantization of ggml's 4-bit non-linear formats, IQ4_NL and IQ4_XS.
//!
//! Both map a 4-bit index through ggml's fixed table [`KVALUES_IQ4NL`]. Layouts
//! (`ggml-common.h`, little-endian):
//!
//! - IQ4_NL (32 elements, 18 B): f16 `d`, `qs[16]`; element `j` is the low nibble of `qs[j]`,
//!   element `j + 16` the high nibble; `x = d * table[idx]`.
//! - IQ4_XS (256 elements, 136 B): f16 `d`, u16 `scales_h`, `scales_l[4]`, `qs[128]`. Sub-block
//!   `ib` (0..8) of 32 has the 6-bit scale
//!   `ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 15) | (((scales_h >> 2 * ib) & 3) << 4)` and
//!   reads `qs[16 ib..16 ib + 16]` as IQ4_NL does; `x = (d * (ls - 32)) * table[idx]`.

use super::{QK_K, f16_at};

/// ggml's `kvalues_iq4nl`: the 16 levels of the IQ4 formats.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

fn level(idx: u8) -> f32 {
    f32::from(KVALUES_IQ4NL[usize::from(idx & 0x0f)])
}

/// 32 elements from 16 bytes of nibble indices, scaled by `d`.
fn nl32(d: f32, qs: &[u8], y: &mut [f32]) {
    for j in 0..16 {
        y[j] = d * level(qs[j]);
        y[j + 16] = d * level(qs[j] >> 4);
    }
}

pub(super) fn dequant_iq4_nl(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(18).zip(out.chunks_exact_mut(32)) {
        nl32(f16_at(b), &b[2..18], y);
    }
}

pub(super) fn dequant_iq4_xs(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(136).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(b);
        let scales_h = u16::from_le_bytes([b[2], b[3]]);
        let scales_l = &b[4..8];
        let qs = &b[8..136];
        for (ib, ys) in y.chunks_exact_mut(32).enumerate() {
            let lo = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
            let hi = ((scales_h >> (2 * ib)) & 3) as u8;
            let ls = i16::from(lo | (hi << 4)) - 32;
            nl32(d * f32::from(ls), &qs[16 * ib..16 * ib + 16], ys);
        }
    }
}
