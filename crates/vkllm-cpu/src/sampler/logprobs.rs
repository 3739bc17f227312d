//! Log-probabilities for API output (`logprobs`, `top_logprobs`): reference math in f64.

use std::cmp::Ordering;

/// `log_softmax(l)_i = l_i - (m + ln(sum_j exp(l_j - m)))`, `m = max l`, in f64, each result
/// rounded once to f32. If every logit is `-inf` the result is all `-inf`. NaN propagates.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        return vec![f32::NEG_INFINITY; logits.len()];
    }
    let m = f64::from(m);
    let sum: f64 = logits.iter().map(|&x| (f64::from(x) - m).exp()).sum();
    let lse = m + sum.ln();
    logits
        .iter()
        .map(|&x| (f64::from(x) - lse) as f32)
        .collect()
}

/// The `n` most likely tokens as `(id, logprob)`, by logprob descending then id ascending
/// (NaN ranks last). Fewer than `n` if the vocabulary is smaller.
pub fn top_logprobs(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    let lp = log_softmax(logits);
    let mut all: Vec<(u32, f32)> = lp
        .into_iter()
        .enumerate()
        .map(|(i, x)| (i as u32, x))
        .collect();
    let key = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { x };
    let ord = |a: &(u32, f32), b: &(u32, f32)| match key(b.1).partial_cmp(&key(a.1)) {
        Some(Ordering::Equal) | None => a.0.cmp(&b.0),
        Some(o) => o,
    };
    let n = n.min(all.len());
    if n == 0 {
        return Vec::new();
    }
    if n < all.len() {
        all.select_nth_unstable_by(n - 1, ord);
        all.truncate(n);
    }
    all.sort_unstable_by(ord);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_hand_values() {
        // ln of [0.1, 0.2, 0.3, 0.4] shifted by any constant.
        let probs = [0.1f64, 0.2, 0.3, 0.4];
        let logits: Vec<f32> = probs.iter().map(|p| (p.ln() + 5.0) as f32).collect();
        let lp = log_softmax(&logits);
        for (g, p) in lp.iter().zip(probs) {
            assert!((f64::from(*g) - p.ln()).abs() < 1e-6);
        }
        assert_eq!(
            log_softmax(&[f32::NEG_INFINITY; 2]),
            vec![f32::NEG_INFINITY; 2]
        );
        let lp = log_softmax(&[0.0, f32::NEG_INFINITY]);
        assert_eq!(lp, vec![0.0, f32::NEG_INFINITY]);
        assert!(log_softmax(&[0.0, f32::NAN]).iter().all(|x| x.is_nan()));
    }

    #[test]
    fn top_logprobs_order_and_ties() {
        let clean = [1.0, 3.0, 3.0, 2.0, -1.0, 0.0];
        let top = top_logprobs(&clean, 3);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2, 3]);
        let z: f64 = clean.iter().map(|&x| f64::from(x).exp()).sum();
        assert!((f64::from(top[0].1) - (3.0 - z.ln())).abs() < 1e-6);
        assert_eq!(top[0].1, top[1].1);
        assert_eq!(top_logprobs(&clean, 100).len(), 6);
        assert!(top_logprobs(&clean, 0).is_empty());
    }
}
