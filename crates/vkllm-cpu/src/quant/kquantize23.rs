//! Quantizers for Q2_K and Q3_K: ggml's `quantize_row_q2_K_ref` and `quantize_row_q3_K_ref`
//! (no importance matrix), in f32 with ggml's operation order and no fused multiply-add.
//!
//! - Q2_K: each 16-element sub-block gets a scale and a min from `make_qkx2_quants` (nmax 3,
//!   weights `|x|`, 16 inverse scales `(-0.5 + 0.1 i + 3) / (max - min)`, weighted *absolute*
//!   error); scales and mins are quantized to 4 bits against the largest of each
//!   (`d = max_scale / 15`, `dmin = max_min / 15`, f16), then every element is re-rounded to
//!   `0..=3` with its final scale and min.
//! - Q3_K: each 16-element sub-block gets a signed scale from `make_q3_quants` (nmax 4, levels
//!   `-4..=3`, then up to 5 passes moving single levels while the `x^2`-weighted fit improves);
//!   the 16 scales are quantized to 6 bits against the largest in magnitude
//!   (`d = max / -32`, f16), then every element is re-rounded to `-4..=3`; bit 2 of each level
//!   goes to `hmask`.

use super::kquantize::{GROUP_MAX_EPS, make_qkx2_quants, nearest_int};
use super::{QK_K, f16_at, f16_bytes};

/// Packs 2-bit levels: byte `32 h + l` of `qs` holds elements `128 h + 32 k + l`, k = 0..4, at
/// bits `2 k`.
fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8]) {
    for h in 0..2 {
        for i in 0..32 {
            let e = 128 * h + i;
            qs[32 * h + i] = l[e] | (l[e + 32] << 2) | (l[e + 64] << 4) | (l[e + 96] << 6);
        }
    }
}

pub(super) fn quant_q2_k(x: &[f32], out: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    for (xb, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(84)) {
        let mut l = [0u8; QK_K];
        let mut laux = [0u8; 16];
        let mut weights = [0.0f32; 16];
        let mut mins = [0.0f32; 16];
        let mut scales = [0.0f32; 16];
        let mut max_scale = 0.0f32;
        let mut max_min = 0.0f32;
        for j in 0..16 {
            let xs = &xb[16 * j..16 * j + 16];
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let lj = &mut l[16 * j..16 * j + 16];
            let (scale, min) =
                make_qkx2_quants(3, xs, &weights, lj, &mut laux, -0.5, 0.1, 15, true);
            scales[j] = scale;
            mins[j] = min;
            if scale > max_scale {
                max_scale = scale;
            }
            if min > max_min {
                max_min = min;
            }
        }
        let (sc, rest) = y.split_at_mut(16);
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                // C stores the int into a uint8_t (modulo 256).
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            rest[64..66].copy_from_slice(&f16_bytes(max_scale / Q4SCALE));
        } else {
            sc.fill(0);
            rest[64..66].copy_from_slice(&f16_bytes(0.0));
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                sc[j] |= nearest_int(iscale * mins[j]).wrapping_shl(4) as u8;
            }
            rest[66..68].copy_from_slice(&f16_bytes(max_min / Q4SCALE));
        } else {
            rest[66..68].copy_from_slice(&f16_bytes(0.0));
        }
        let d_all = f16_at(&rest[64..66]);
        let dmin_all = f16_at(&rest[66..68]);
        for j in 0..16 {
            let d = d_all * f32::from(sc[j] & 0x0f);
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * f32::from(sc[j] >> 4);
            for ii in 0..16 {
                let q = nearest_int((xb[16 * j + ii] + dm) / d).clamp(0, 3);
                l[16 * j + ii] = q as u8;
            }
        }
        pack_2bit(&l, &mut rest[..64]);
    }
}

/// `make_q3_quants(n, nmax, x, L, do_rmse = true)`: levels `l[i] + nmax` in `0..2 nmax`,
/// returns the signed scale.
fn make_q3_quants_rmse(nmax: i32, x: &[f32], out: &mut [u8]) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        out.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut l = [0i32; 16];
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (li, &v) in l.iter_mut().zip(x) {
        *li = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        let w = v * v;
        let lf = *li as f32;
        sumlx += w * v * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (li, &v) in l.iter_mut().zip(x) {
            let w = v * v;
            let lf = *li as f32;
            let mut slx = sumlx - w * v * lf;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * lf * lf;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *li {
                    let nf = new_l as f32;
                    slx += w * v * nf;
                    sl2 += w * nf * nf;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *li = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for (o, &li) in out.iter_mut().zip(&l) {
        *o = (li + nmax) as u8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

pub(super) fn quant_q3_k(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(110)) {
        let mut l = [0u8; QK_K];
        let mut scales = [0.0f32; 16];
        let mut max_scale = 0.0f32;
        let mut amax = 0.0f32;
        for j in 0..16 {
            let s = make_q3_quants_rmse(4, &xb[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            scales[j] = s;
            if s.abs() > amax {
                amax = s.abs();
                max_scale = s;
            }
        }
        let (hmask, rest) = y.split_at_mut(32);
        let (qs, rest) = rest.split_at_mut(64);
        let (sc, d_bytes) = rest.split_at_mut(12);
        sc.fill(0);
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                // C: int8_t l = nearest_int(..) (modulo 256), clamp to -32..=31, + 32.
                let lv = (i32::from(nearest_int(iscale * scales[j]) as i8)).clamp(-32, 31) + 32;
                let lv = lv as u8;
                if j < 8 {
                    sc[j] = lv & 0x0f;
                } else {
                    sc[j - 8] |= (lv & 0x0f) << 4;
                }
                sc[j % 4 + 8] |= (lv >> 4) << (2 * (j / 4));
            }
            d_bytes.copy_from_slice(&f16_bytes(1.0 / iscale));
        } else {
            d_bytes.copy_from_slice(&f16_bytes(0.0));
        }
        let d_all = f16_at(d_bytes);
        for j in 0..16 {
            let lo = if j < 8 { sc[j] & 0x0f } else { sc[j - 8] >> 4 };
            let hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
            let s = i32::from(lo | (hi << 4)) - 32;
            let d = d_all * s as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(xb[16 * j + ii] / d).clamp(-4, 3);
                l[16 * j + ii] = (q + 4) as u8;
            }
        }
        hmask.fill(0);
        for (j, lj) in l.iter_mut().enumerate() {
            if *lj > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                *lj -= 4;
            }
        }
        pack_2bit(&l, qs);
    }
}
