//! Numerically safe softmax: subtract the maximum, exponentiate and sum in f64, divide in f64,
//! round each probability once to f32.

/// Softmax of `x` in place.
///
/// `p_i = exp(x_i - max) / sum_j exp(x_j - max)`, with `x_i - max` and `exp` in f64 and the sum in
/// f64 in index order. An empty slice is left alone. If every element is `-inf` (a fully masked
/// row) the result is all zeros rather than NaN. NaN inputs propagate.
pub fn softmax(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        x.fill(0.0);
        return;
    }
    let m = f64::from(m);
    let mut sum = 0.0f64;
    for v in x.iter() {
        sum += (f64::from(*v) - m).exp();
    }
    for v in x.iter_mut() {
        *v = ((f64::from(*v) - m).exp() / sum) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_values() {
        let mut x = [0.0, 0.0, 0.0, 0.0];
        softmax(&mut x);
        assert_eq!(x, [0.25; 4]);
        // ln 1, ln 2, ln 3, ln 4 -> 0.1, 0.2, 0.3, 0.4
        let mut x = [0.0, 2f32.ln(), 3f32.ln(), 4f32.ln()];
        softmax(&mut x);
        for (got, want) in x.iter().zip([0.1, 0.2, 0.3, 0.4]) {
            assert!((got - want).abs() < 1e-7);
        }
    }

    #[test]
    fn shift_invariant_and_safe_for_large_values() {
        let mut a = [1000.0f32, 1001.0, 999.0];
        let mut b = [0.0f32, 1.0, -1.0];
        softmax(&mut a);
        softmax(&mut b);
        assert!(a.iter().all(|v| v.is_finite()));
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-7);
        }
        let e = std::f64::consts::E;
        let z = 1.0 + e + 1.0 / e;
        assert!((f64::from(b[1]) - e / z).abs() < 1e-7);
    }

    #[test]
    fn masked_entries_and_fully_masked_rows() {
        let mut x = [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 0.0];
        softmax(&mut x);
        assert_eq!(x, [0.0, 0.5, 0.0, 0.5]);
        let mut x = [f32::NEG_INFINITY; 3];
        softmax(&mut x);
        assert_eq!(x, [0.0; 3]);
        let mut e: [f32; 0] = [];
        softmax(&mut e);
    }
}
