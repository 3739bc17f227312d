//! Comparing an output against its reference: the error metrics of the parity ladder.
//!
//! Every parity check in vkllm (GPU op vs CPU op, CPU model vs transformers, GPU model vs CPU
//! model) reports the same three numbers, so one table can hold them all:
//! - `max_abs`: max |a - b|;
//! - `max_rel`: max |a - b| / max |b| (relative to the reference's scale, not per element, so
//!   near-zero reference values do not blow it up);
//! - `nmse`: normalized mean squared error, sum (a - b)^2 / sum b^2 (ggml's test-backend-ops metric).
//!
//! A NaN or infinity anywhere in `actual` where the reference is finite makes every metric
//! infinite: a kernel that left part of a NaN-poisoned output unwritten can never pass.

/// Error metrics of `actual` against `expected`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Diff {
    pub max_abs: f64,
    pub max_rel: f64,
    pub nmse: f64,
    /// Elements of `actual` that are not finite where `expected` is.
    pub non_finite: usize,
}

impl Diff {
    /// True when nothing is non-finite and both bounds hold.
    pub fn within(&self, max_abs: f64, nmse: f64) -> bool {
        self.non_finite == 0 && self.max_abs <= max_abs && self.nmse <= nmse
    }
}

/// Compares two equally long slices. Panics if the lengths differ (a programming error).
pub fn diff(actual: &[f32], expected: &[f32]) -> Diff {
    assert_eq!(actual.len(), expected.len(), "diff: length mismatch");
    let mut max_abs = 0f64;
    let mut max_ref = 0f64;
    let mut err2 = 0f64;
    let mut ref2 = 0f64;
    let mut non_finite = 0usize;
    for (&a, &b) in actual.iter().zip(expected) {
        let (a, b) = (a as f64, b as f64);
        if !a.is_finite() && b.is_finite() {
            non_finite += 1;
            continue;
        }
        let d = (a - b).abs();
        if d.is_finite() {
            max_abs = max_abs.max(d);
            err2 += d * d;
        }
        max_ref = max_ref.max(b.abs());
        ref2 += b * b;
    }
    if non_finite > 0 {
        return Diff {
            max_abs: f64::INFINITY,
            max_rel: f64::INFINITY,
            nmse: f64::INFINITY,
            non_finite,
        };
    }
    let max_rel = if max_ref > 0.0 {
        max_abs / max_ref
    } else {
        max_abs
    };
    let nmse = if ref2 > 0.0 { err2 / ref2 } else { err2 };
    Diff {
        max_abs,
        max_rel,
        nmse,
        non_finite,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_is_zero() {
        let d = diff(&[1.0, -2.0, 3.5], &[1.0, -2.0, 3.5]);
        assert_eq!(
            (d.max_abs, d.max_rel, d.nmse, d.non_finite),
            (0.0, 0.0, 0.0, 0)
        );
    }

    #[test]
    fn hand_computed_metrics() {
        // errors 0.5 and 0 against reference [2, -4]: max_abs 0.5, max_rel 0.5/4, nmse 0.25/20
        let d = diff(&[2.5, -4.0], &[2.0, -4.0]);
        assert_eq!(d.max_abs, 0.5);
        assert_eq!(d.max_rel, 0.125);
        assert!((d.nmse - 0.0125).abs() < 1e-15);
        assert!(d.within(0.5, 0.02) && !d.within(0.4, 0.02));
    }

    #[test]
    fn nan_in_output_fails_everything() {
        let d = diff(&[1.0, f32::NAN], &[1.0, 2.0]);
        assert_eq!(d.non_finite, 1);
        assert!(!d.within(f64::MAX, f64::MAX));
    }
}
