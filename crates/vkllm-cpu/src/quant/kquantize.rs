//! Quantizers for Q4_K, Q5_K and Q6_K (Q2_K and Q3_K: `kquantize23.rs`): ggml's reference
//! algorithms without an importance matrix, the ones `llama-quantize` and `ggml_quantize_chunk`
//! use when no imatrix is given.
//!
//! - Q4_K follows `quantize_row_q4_K_ref`: each 32-element sub-block gets a scale and a min from
//!   `make_qkx2_quants` (nmax 15; weights `sqrt(mean(x^2)) + |x|`; a grid of 21 inverse scales
//!   `(-1 + 0.1 i + 15) / (max - min)`, each refined by a weighted least-squares fit of scale and
//!   min, keeping the lowest weighted squared error). The 8 scales and 8 mins are then quantized
//!   to 6 bits against the super-block's largest (`d = max_scale / 63`, `dmin = max_min / 63`,
//!   both f16) and every element is re-rounded with the final scale and min.
//! - Q5_K (`quantize_row_q5_K_ref`) is the same with nmax 31 and 16 inverse scales
//!   `(-0.5 + 0.1 i + 31) / (max - min)`.
//! - Q6_K follows `quantize_row_q6_K_ref`: each 16-element sub-block gets a signed scale from
//!   `make_qx_quants` (nmax 32, weights `x^2`, 19 candidate scales around `-32 / max`), the 16
//!   scales are quantized to i8 against the largest in magnitude (`d = max / -128`, f16), and
//!   every element is re-rounded to `-32..=31` with its final scale.
//!
//! Arithmetic is f32 in ggml's operation order with no fused multiply-add; rounding to integers
//! is ggml's `nearest_int` (round half to even). The output is byte-identical to ggml's C
//! reference built with `-ffp-contract=off` (goldens from `fixtures/quant/ggml_kquant_ref.c`);
//! builds of ggml that contract into FMA can differ in rare last-bit ties. The tests also check
//! ggml's round-trip error bound (test-quantize-fns).

use super::kquants::scale_min_k4;
use super::{QK_K, f16_at, f16_bytes};

/// ggml's `GROUP_MAX_EPS`: sub-blocks below it quantize to zero.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round half to even, exact for `|f| < 2^22`. Out of that range (which
/// ggml asserts against) the result is meaningless but never panics.
#[inline(always)]
pub(super) fn nearest_int(f: f32) -> i32 {
    let v = f + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// `make_qkx2_quants`: levels `l[i]` in `0..=nmax`, returns `(scale, -min)` with
/// `x ~= scale * l + min`, `min <= 0`. The error it minimises is weighted squared, or weighted
/// absolute with `use_mad`.
#[allow(clippy::too_many_arguments)]
pub(super) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let nmax_f = nmax as f32;
    let mut iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = q as u8;
        let diff = scale * q as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax_f) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = q as u8;
            let w = weights[i];
            let qf = q as f32;
            sum_l += w * qf;
            sum_l2 += w * qf * qf;
            sum_xl += w * qf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `make_qx_quants` with `rmse_type = 1` and no importance weights: levels `l[i] + nmax` in
/// `0..2 nmax`, returns the signed scale.
fn make_qx_quants_rmse1(nmax: i32, x: &[f32], l: &mut [u8]) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    // One pass of weighted sums for a candidate inverse scale.
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let mut iscale = -nmax_f / max;
    for (o, &v) in l.iter_mut().zip(x) {
        *o = (level(iscale, v) + nmax) as u8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax_f + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in l.iter_mut().zip(x) {
                *o = (level(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// The shared part of Q4_K and Q5_K (`quantize_row_q{4,5}_K_ref`): per 32-element sub-block a
/// scale and min from `make_qkx2_quants`, both quantized to 6 bits into `head` (`d`, `dmin`,
/// 12 scale bytes: the first 16 bytes of the block), then every element re-rounded to
/// `0..=nmax` into `l`.
fn scale_min_block(xb: &[f32], nmax: i32, rmin: f32, nstep: i32, head: &mut [u8], l: &mut [u8]) {
    let mut laux = [0u8; 32];
    let mut weights = [0.0f32; 32];
    let mut mins = [0.0f32; 8];
    let mut scales = [0.0f32; 8];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..8 {
        let xs = &xb[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let lj = &mut l[32 * j..32 * j + 32];
        let (scale, min) =
            make_qkx2_quants(nmax, xs, &weights, lj, &mut laux, rmin, 0.1, nstep, false);
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let sc = &mut head[4..16];
    for j in 0..8 {
        // C converts int -> uint8_t modulo 256, then clamps to 63.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    head[0..2].copy_from_slice(&f16_bytes(max_scale / 63.0));
    head[2..4].copy_from_slice(&f16_bytes(max_min / 63.0));
    let d_all = f16_at(&head[0..2]);
    let dmin_all = f16_at(&head[2..4]);
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, &head[4..16]);
        let d = d_all * f32::from(s);
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * f32::from(m);
        for ii in 0..32 {
            let q = nearest_int((xb[32 * j + ii] + dm) / d).clamp(0, nmax);
            l[32 * j + ii] = q as u8;
        }
    }
}

pub(super) fn quant_q4_k(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(144)) {
        let mut l = [0u8; QK_K];
        scale_min_block(xb, 15, -1.0, 20, &mut y[..16], &mut l);
        let qs = &mut y[16..144];
        for (c, q) in qs.chunks_exact_mut(32).enumerate() {
            let base = 64 * c;
            for i in 0..32 {
                q[i] = l[base + i] | (l[base + i + 32] << 4);
            }
        }
    }
}

pub(super) fn quant_q5_k(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(176)) {
        let mut l = [0u8; QK_K];
        scale_min_block(xb, 31, -0.5, 15, &mut y[..16], &mut l);
        let (qh, ql) = y[16..176].split_at_mut(32);
        qh.fill(0);
        for (c, q) in ql.chunks_exact_mut(32).enumerate() {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for i in 0..32 {
                let (mut l1, mut l2) = (l[64 * c + i], l[64 * c + i + 32]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[i] |= m1;
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[i] |= m2;
                }
                q[i] = l1 | (l2 << 4);
            }
        }
    }
}

pub(super) fn quant_q6_k(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(210)) {
        let mut l = [0u8; QK_K];
        let mut scales = [0.0f32; 16];
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for ib in 0..16 {
            let s = make_qx_quants_rmse1(
                32,
                &xb[16 * ib..16 * ib + 16],
                &mut l[16 * ib..16 * ib + 16],
            );
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            y.fill(0);
            continue;
        }
        let iscale = -128.0 / max_scale;
        y[208..210].copy_from_slice(&f16_bytes(1.0 / iscale));
        for ib in 0..16 {
            y[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
        }
        let d_all = f16_at(&y[208..210]);
        for j in 0..16 {
            let d = d_all * f32::from(y[192 + j] as i8);
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(xb[16 * j + ii] / d).clamp(-32, 31);
                l[16 * j + ii] = (q + 32) as u8;
            }
        }
        let (ql, rest) = y.split_at_mut(128);
        let qh = &mut rest[..64];
        for h in 0..2 {
            let lh = &l[128 * h..128 * h + 128];
            for i in 0..32 {
                let (q1, q2, q3, q4) = (lh[i], lh[i + 32], lh[i + 64], lh[i + 96]);
                ql[64 * h + i] = (q1 & 0x0f) | ((q3 & 0x0f) << 4);
                ql[64 * h + i + 32] = (q2 & 0x0f) | ((q4 & 0x0f) << 4);
                qh[32 * h + i] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
    }
}
