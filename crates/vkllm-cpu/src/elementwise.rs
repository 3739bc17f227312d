//! Elementwise ops: add, scale, softcap. All in f32, one rounding per operation.

/// `out[i] = a[i] + b[i]`.
///
/// # Panics
/// If the three lengths differ (a programming error).
pub fn add(a: &[f32], b: &[f32], out: &mut [f32]) {
    assert!(
        a.len() == b.len() && a.len() == out.len(),
        "add: length mismatch"
    );
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

/// `acc[i] += x[i]` (the residual add).
///
/// # Panics
/// If the lengths differ (a programming error).
pub fn add_inplace(acc: &mut [f32], x: &[f32]) {
    assert_eq!(acc.len(), x.len(), "add_inplace: length mismatch");
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += v;
    }
}

/// `x[i] *= s`.
pub fn scale(x: &mut [f32], s: f32) {
    for v in x {
        *v *= s;
    }
}

/// `x[r, c] *= row[c]` for every row of `row.len()` values (a trailing partial row included).
pub fn mul_rows(x: &mut [f32], row: &[f32]) {
    if row.is_empty() {
        return;
    }
    for chunk in x.chunks_mut(row.len()) {
        for (v, &s) in chunk.iter_mut().zip(row) {
            *v *= s;
        }
    }
}

/// Logit soft-capping (Gemma 2/3 attention and final logits): `x = cap * tanh(x / cap)`, in
/// transformers' order: f32 divide, f32 `tanh`, f32 multiply.
pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x {
        *v = softcap_one(*v, cap);
    }
}

/// [`softcap`] of one value.
#[inline]
pub fn softcap_one(v: f32, cap: f32) -> f32 {
    (v / cap).tanh() * cap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_scale() {
        let mut out = [f32::NAN; 3];
        add(&[1.0, 2.0, 3.0], &[0.5, -2.0, 1e8], &mut out);
        assert_eq!(out, [1.5, 0.0, 1e8 + 3.0]);
        let mut acc = [1.0, 1.0];
        add_inplace(&mut acc, &[2.0, -3.0]);
        assert_eq!(acc, [3.0, -2.0]);
        scale(&mut acc, 0.5);
        assert_eq!(acc, [1.5, -1.0]);
    }

    #[test]
    fn softcap_values() {
        let cap = 30.0f32;
        let mut x = [0.0, 30.0, -60.0, 1e6, 0.3];
        softcap(&mut x, cap);
        let t1 = 30.0 * 1f64.tanh();
        let t2 = -30.0 * 2f64.tanh();
        let t4 = 30.0 * 0.01f64.tanh();
        assert_eq!(x[0], 0.0);
        assert!((f64::from(x[1]) - t1).abs() < 1e-5);
        assert!((f64::from(x[2]) - t2).abs() < 1e-5);
        assert_eq!(x[3], 30.0);
        assert!((f64::from(x[4]) - t4).abs() < 1e-7);
        // Small values pass nearly unchanged; large ones saturate at +-cap.
        assert!(x.iter().all(|v| v.abs() <= cap));
    }
}
