//! RMSNorm gated by SiLU: the output norm of a Gated DeltaNet layer (transformers'
//! `Qwen3NextRMSNormGated`, "norm before gate").
//!
//! Each row of `x` (length `weight.len()`) with its gate row `z`:
//! `out = (weight * (x * r)) * silu(z)` with `r = 1 / sqrt(mean(x^2) + eps)` computed as in
//! [`crate::rmsnorm`] (sum of squares in f64, rounded once; the rest f32), the weight used as is
//! (no `1 +` offset: this norm's weights start at one), `silu` as [`crate::silu`].

use crate::activation::silu;

/// Normalises each row of `x`, scales by `weight` and gates by `silu(z)`; see the module docs.
///
/// # Panics
/// If `weight` is empty or `x`, `z`, `out` are not all `[rows, weight.len()]`.
pub fn gated_rmsnorm(x: &[f32], z: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    assert!(
        d > 0 && x.len().is_multiple_of(d),
        "gated_rmsnorm: x is not [rows, dim]"
    );
    assert!(
        z.len() == x.len() && out.len() == x.len(),
        "gated_rmsnorm: lengths"
    );
    for ((xr, zr), or) in x
        .chunks_exact(d)
        .zip(z.chunks_exact(d))
        .zip(out.chunks_exact_mut(d))
    {
        let ss: f64 = xr.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let ms = (ss / d as f64) as f32;
        let r = 1.0 / (ms + eps).sqrt();
        for (((o, &xv), &zv), &w) in or.iter_mut().zip(xr).zip(zr).zip(weight) {
            *o = (w * (xv * r)) * silu(zv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn hand_values() {
        // x = [3, 4]: mean square 12.5; z = [0, large]: silu(0) = 0, silu(100) = 100.
        let mut out = [f32::NAN; 2];
        gated_rmsnorm(&[3.0, 4.0], &[0.0, 100.0], &[1.0, 0.5], 0.0, &mut out);
        let r = 1.0 / 12.5f64.sqrt();
        assert_eq!(out[0], 0.0);
        assert!(
            (f64::from(out[1]) - 0.5 * 4.0 * r * 100.0).abs() < 1e-4,
            "{}",
            out[1]
        );
    }

    #[test]
    fn matches_f64() {
        let mut rng = Rng::new(9);
        let (rows, d) = (4, 24);
        let x = rng.vec(rows * d);
        let z: Vec<f32> = rng.vec(rows * d).iter().map(|v| 4.0 * v).collect();
        let w = rng.vec(d);
        let mut out = vec![f32::NAN; rows * d];
        gated_rmsnorm(&x, &z, &w, 1e-6, &mut out);
        for r in 0..rows {
            let xr = &x[r * d..(r + 1) * d];
            let ms = xr.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / d as f64;
            let inv = 1.0 / (ms + 1e-6).sqrt();
            for i in 0..d {
                let zi = f64::from(z[r * d + i]);
                let want = f64::from(w[i]) * f64::from(xr[i]) * inv * zi / (1.0 + (-zi).exp());
                let got = f64::from(out[r * d + i]);
                assert!(
                    (got - want).abs() < 2e-6 * (1.0 + want.abs()),
                    "{got} {want}"
                );
            }
        }
    }
}
