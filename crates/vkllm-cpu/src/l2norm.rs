//! L2 normalisation of rows, as transformers' `l2norm` (the FLA library's convention):
//! `x * rsqrt(sum(x^2) + eps)`.
//!
//! f32 version: the sum of squares in f64 rounded once to f32, `+ eps` and `1 / sqrt` in f32, then
//! one f32 multiply per element (the same steps as [`crate::rmsnorm`], without the mean).
//! [`l2norm_f64`] is the all-f64 variant the gated delta rule uses internally.

/// Normalises each row of `dim` values of `x` into `out`.
///
/// # Panics
/// If `dim` is zero, `x.len()` is not a multiple of `dim` or `out.len() != x.len()`.
pub fn l2norm(x: &[f32], dim: usize, eps: f32, out: &mut [f32]) {
    assert!(
        dim > 0 && x.len().is_multiple_of(dim),
        "l2norm: x is not [rows, dim]"
    );
    assert_eq!(out.len(), x.len(), "l2norm: out and x differ");
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let r = inv_norm(xr, eps);
        for (o, &v) in or.iter_mut().zip(xr) {
            *o = v * r;
        }
    }
}

/// [`l2norm`] in place.
///
/// # Panics
/// As [`l2norm`].
pub fn l2norm_inplace(x: &mut [f32], dim: usize, eps: f32) {
    assert!(
        dim > 0 && x.len().is_multiple_of(dim),
        "l2norm: x is not [rows, dim]"
    );
    for xr in x.chunks_exact_mut(dim) {
        let r = inv_norm(xr, eps);
        xr.iter_mut().for_each(|v| *v *= r);
    }
}

/// One row normalised in f64: `x / sqrt(sum(x^2) + eps)`.
pub fn l2norm_f64(x: &[f32], eps: f64) -> Vec<f64> {
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let r = 1.0 / (ss + eps).sqrt();
    x.iter().map(|&v| f64::from(v) * r).collect()
}

fn inv_norm(row: &[f32], eps: f32) -> f32 {
    let ss: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    1.0 / ((ss as f32) + eps).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn hand_values() {
        // [3, 4] has norm 5; eps 0.
        let mut out = [f32::NAN; 4];
        l2norm(&[3.0, 4.0, 0.0, -2.0], 2, 0.0, &mut out);
        assert_eq!(out, [0.6, 0.8, 0.0, -1.0]);
        // A zero row stays zero with eps > 0 (no NaN).
        let mut z = [0.0f32; 3];
        l2norm_inplace(&mut z, 3, 1e-6);
        assert_eq!(z, [0.0; 3]);
    }

    #[test]
    fn matches_f64_and_unit_norm() {
        let mut rng = Rng::new(3);
        let (rows, d) = (6, 19);
        let x = rng.vec(rows * d);
        let mut out = vec![f32::NAN; rows * d];
        l2norm(&x, d, 1e-6, &mut out);
        for r in 0..rows {
            let want = l2norm_f64(&x[r * d..(r + 1) * d], 1e-6);
            let norm: f64 = want.iter().map(|v| v * v).sum();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
            for i in 0..d {
                assert!((f64::from(out[r * d + i]) - want[i]).abs() < 3e-7);
            }
        }
        let mut inplace = x.clone();
        l2norm_inplace(&mut inplace, d, 1e-6);
        assert_eq!(inplace, out);
    }
}
