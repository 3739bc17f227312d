//! Mixture-of-Experts routing: softmax over the router logits, the top-k experts, optionally
//! renormalised (transformers' `Qwen2MoeTopKRouter` / `Qwen3NextTopKRouter`).
//!
//! For each token row of `n_experts` logits: `p = softmax(logits)` (as [`crate::softmax`]: f64
//! inside, each probability rounded once to f32); the `top_k` largest probabilities, largest
//! first, ties to the lower expert index; with `renormalize`, each weight divided by their f32
//! sum (summed largest first, as `torch.sum` of the top-k values).

use crate::softmax::softmax;

/// Routes `n = logits.len() / n_experts` tokens: `ids[t * top_k + i]` is token t's i-th expert and
/// `weights[...]` its weight; see the module docs.
///
/// # Panics
/// If `top_k` is zero or above `n_experts`, or the lengths are not `[n, n_experts]` and
/// `[n, top_k]` (programming errors: configs are validated when parsed).
pub fn moe_route(
    logits: &[f32],
    n_experts: usize,
    top_k: usize,
    renormalize: bool,
    ids: &mut [u32],
    weights: &mut [f32],
) {
    assert!(
        top_k > 0 && top_k <= n_experts,
        "moe_route: top_k {top_k} of {n_experts}"
    );
    assert!(logits.len().is_multiple_of(n_experts), "moe_route: logits");
    let n = logits.len() / n_experts;
    assert!(
        ids.len() == n * top_k && weights.len() == n * top_k,
        "moe_route: outputs"
    );
    let mut p = vec![0f32; n_experts];
    let mut order: Vec<usize> = Vec::with_capacity(n_experts);
    for t in 0..n {
        p.copy_from_slice(&logits[t * n_experts..(t + 1) * n_experts]);
        softmax(&mut p);
        order.clear();
        order.extend(0..n_experts);
        // Stable sort by descending probability: ties keep the lower index first.
        order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
        let (ir, wr) = (
            &mut ids[t * top_k..(t + 1) * top_k],
            &mut weights[t * top_k..(t + 1) * top_k],
        );
        for (i, &e) in order[..top_k].iter().enumerate() {
            ir[i] = e as u32;
            wr[i] = p[e];
        }
        if renormalize {
            let sum: f32 = wr.iter().sum();
            wr.iter_mut().for_each(|w| *w /= sum);
        }
    }
}

/// [`moe_route`] with a shared expert routed as expert `n_experts` in the last of each token's
/// `top_k + 1` slots: each logits row holds the `n_experts` router logits, then the shared
/// expert's gate logit (`[n, n_experts + 1]`); the routed slots are [`moe_route`]'s, the last
/// one is expert `n_experts` with weight `sigmoid(gate logit)` (transformers' Qwen2-MoE /
/// Qwen3-Next `sigmoid(shared_expert_gate(x)) * shared_expert(x)`, here one more weighted
/// expert of the sum).
///
/// # Panics
/// As [`moe_route`], for `[n, n_experts + 1]` logits and `[n, top_k + 1]` outputs.
pub fn moe_route_shared(
    logits: &[f32],
    n_experts: usize,
    top_k: usize,
    renormalize: bool,
    ids: &mut [u32],
    weights: &mut [f32],
) {
    let (w, k) = (n_experts + 1, top_k + 1);
    assert!(logits.len().is_multiple_of(w), "moe_route_shared: logits");
    let n = logits.len() / w;
    assert!(
        ids.len() == n * k && weights.len() == n * k,
        "moe_route_shared: outputs"
    );
    for t in 0..n {
        let row = &logits[t * w..(t + 1) * w];
        let (ir, wr) = (
            &mut ids[t * k..(t + 1) * k],
            &mut weights[t * k..(t + 1) * k],
        );
        moe_route(
            &row[..n_experts],
            n_experts,
            top_k,
            renormalize,
            &mut ir[..top_k],
            &mut wr[..top_k],
        );
        ir[top_k] = n_experts as u32;
        wr[top_k] = crate::sigmoid(row[n_experts]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_slot_follows_the_routed_ones() {
        // Two tokens of 3 experts + the shared gate logit: top 1 each, then expert 3 with
        // sigmoid(gate).
        let logits = [0.0f32, 2.0, 1.0, 0.0, 5.0, 1.0, 3.0, -2.0];
        let (mut ids, mut w) = ([9u32; 4], [f32::NAN; 4]);
        moe_route_shared(&logits, 3, 1, true, &mut ids, &mut w);
        assert_eq!(ids, [1, 3, 0, 3]);
        assert_eq!(w[0], 1.0);
        assert_eq!(w[2], 1.0);
        assert!((w[1] - 0.5).abs() < 1e-7, "{w:?}");
        assert!(
            (f64::from(w[3]) - 1.0 / (1.0 + 2f64.exp())).abs() < 1e-7,
            "{w:?}"
        );
    }

    #[test]
    fn hand_values() {
        // logits ln [1, 4, 2, 3] -> p = [0.1, 0.4, 0.2, 0.3]; top 2: experts 1 (0.4), 3 (0.3);
        // renormalised: 4/7, 3/7.
        let logits: Vec<f32> = [1f32, 4.0, 2.0, 3.0].iter().map(|x| x.ln()).collect();
        let (mut ids, mut w) = ([9u32; 2], [f32::NAN; 2]);
        moe_route(&logits, 4, 2, false, &mut ids, &mut w);
        assert_eq!(ids, [1, 3]);
        assert!(
            (w[0] - 0.4).abs() < 1e-7 && (w[1] - 0.3).abs() < 1e-7,
            "{w:?}"
        );
        moe_route(&logits, 4, 2, true, &mut ids, &mut w);
        assert_eq!(ids, [1, 3]);
        assert!(
            (w[0] - 4.0 / 7.0).abs() < 1e-7 && (w[1] - 3.0 / 7.0).abs() < 1e-7,
            "{w:?}"
        );
    }

    #[test]
    fn ties_go_to_lower_index_and_rows_are_independent() {
        // Row 0: all equal -> experts 0, 1, 2 with 1/4 each. Row 1: expert 3 dominant, then
        // 0 and 2 tied -> 3, 0, 2.
        let logits = [0.0, 0.0, 0.0, 0.0, 1.0, -5.0, 1.0, 9.0];
        let (mut ids, mut w) = ([9u32; 6], [f32::NAN; 6]);
        moe_route(&logits, 4, 3, false, &mut ids, &mut w);
        assert_eq!(ids, [0, 1, 2, 3, 0, 2]);
        assert_eq!(&w[..3], &[0.25; 3]);
        assert_eq!(w[4], w[5]);
        // Renormalised: sums to 1.
        moe_route(&logits, 4, 3, true, &mut ids, &mut w);
        assert!((w[3..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}
