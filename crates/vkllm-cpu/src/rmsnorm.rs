//! RMSNorm, row by row, in Hugging Face transformers' order of operations.
//!
//! Each row of `x` of length `weight.len()` (so the same function does the hidden-state norm and
//! the per-head q/k norm) is normalised as transformers does it in float32:
//!
//! 1. `ms = mean(x^2)`: squares and sum in f64, divided by the row length in f64, rounded once to
//!    f32 (transformers' f32 `x.pow(2).mean(-1)`; the f64 sum is the correctly rounded value its
//!    pairwise sum approximates);
//! 2. `r = 1 / sqrt(ms + eps)`: f32 add, f32 sqrt, f32 divide (`torch.rsqrt`);
//! 3. `out = (x * r) * (weight_offset + w)`: f32 multiply, then the weight term, itself an f32 add.
//!    `weight_offset = 0.0` is Llama/Qwen (`weight * h`; `0 + w == w` exactly), `1.0` is Gemma
//!    (`h * (1 + weight)`).

/// Normalises each row of `x` into `out`; see the module docs for the exact arithmetic.
///
/// # Panics
/// If `weight` is empty, `x.len()` is not a multiple of `weight.len()`, or
/// `out.len() != x.len()` (programming errors).
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, weight_offset: f32, out: &mut [f32]) {
    check(x.len(), weight.len());
    assert_eq!(out.len(), x.len(), "rmsnorm: out and x differ in length");
    let d = weight.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let r = inv_rms(xr, eps);
        for ((o, &xv), &w) in or.iter_mut().zip(xr).zip(weight) {
            *o = (xv * r) * (weight_offset + w);
        }
    }
}

/// [`rmsnorm`] in place.
///
/// # Panics
/// As [`rmsnorm`].
pub fn rmsnorm_inplace(x: &mut [f32], weight: &[f32], eps: f32, weight_offset: f32) {
    check(x.len(), weight.len());
    let d = weight.len();
    for xr in x.chunks_exact_mut(d) {
        let r = inv_rms(xr, eps);
        for (xv, &w) in xr.iter_mut().zip(weight) {
            *xv = (*xv * r) * (weight_offset + w);
        }
    }
}

/// Fused residual add and norm: `residual += x` (f32 adds), then
/// `out = rmsnorm(residual)`; identical to [`crate::add_inplace`] followed by [`rmsnorm`].
///
/// # Panics
/// As [`rmsnorm`], and if `x.len() != residual.len()`.
pub fn add_rmsnorm(
    residual: &mut [f32],
    x: &[f32],
    weight: &[f32],
    eps: f32,
    weight_offset: f32,
    out: &mut [f32],
) {
    assert_eq!(
        residual.len(),
        x.len(),
        "add_rmsnorm: residual and x differ in length"
    );
    for (r, &v) in residual.iter_mut().zip(x) {
        *r += v;
    }
    rmsnorm(residual, weight, eps, weight_offset, out);
}

fn check(x_len: usize, d: usize) {
    assert!(d > 0, "rmsnorm: empty weight");
    assert_eq!(x_len % d, 0, "rmsnorm: x is not [rows, weight.len()]");
}

fn inv_rms(row: &[f32], eps: f32) -> f32 {
    let ss: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let ms = (ss / row.len() as f64) as f32;
    1.0 / (ms + eps).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn hand_values() {
        // x = [3, 4]: mean of squares 12.5, eps 0 -> r = 1/sqrt(12.5).
        let mut out = [f32::NAN; 2];
        rmsnorm(&[3.0, 4.0], &[1.0, 2.0], 0.0, 0.0, &mut out);
        let r = 1.0 / 12.5f64.sqrt();
        assert!((f64::from(out[0]) - 3.0 * r).abs() < 3e-7, "{}", out[0]);
        assert!((f64::from(out[1]) - 8.0 * r).abs() < 6e-7, "{}", out[1]);
        // x = [1, 1, 1, 1] with eps 0: r = 1 exactly; Gemma offset: (1 + w).
        let mut out = [f32::NAN; 4];
        rmsnorm(&[1.0; 4], &[0.5, -1.0, 0.0, 2.0], 0.0, 1.0, &mut out);
        assert_eq!(out, [1.5, 0.0, 1.0, 3.0]);
    }

    #[test]
    fn rows_are_independent_and_match_f64() {
        let mut rng = Rng::new(1);
        let d = 37;
        let rows = 5;
        let x = rng.vec(rows * d);
        let w = rng.vec(d);
        let eps = 1e-6f32;
        for off in [0.0f32, 1.0] {
            let mut out = vec![f32::NAN; rows * d];
            rmsnorm(&x, &w, eps, off, &mut out);
            for r in 0..rows {
                let xr = &x[r * d..(r + 1) * d];
                let ms: f64 = xr.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / d as f64;
                let inv = 1.0 / (ms + f64::from(eps)).sqrt();
                for i in 0..d {
                    let want = f64::from(xr[i]) * inv * (f64::from(off) + f64::from(w[i]));
                    let got = f64::from(out[r * d + i]);
                    assert!(
                        (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                        "{got} {want}"
                    );
                }
            }
            let mut inplace = x.clone();
            rmsnorm_inplace(&mut inplace, &w, eps, off);
            assert_eq!(inplace, out);
        }
    }

    #[test]
    fn fused_add_equals_add_then_norm() {
        let mut rng = Rng::new(2);
        let d = 16;
        let x = rng.vec(3 * d);
        let res0 = rng.vec(3 * d);
        let w = rng.vec(d);
        let mut res = res0.clone();
        let mut out = vec![f32::NAN; 3 * d];
        add_rmsnorm(&mut res, &x, &w, 1e-5, 0.0, &mut out);
        let summed: Vec<f32> = res0.iter().zip(&x).map(|(a, b)| a + b).collect();
        assert_eq!(res, summed);
        let mut want = vec![f32::NAN; 3 * d];
        rmsnorm(&summed, &w, 1e-5, 0.0, &mut want);
        assert_eq!(out, want);
    }
}
