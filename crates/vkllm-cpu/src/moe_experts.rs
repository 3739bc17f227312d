//! The routed experts of a Mixture-of-Experts block (transformers' `Qwen2MoeExperts` /
//! `Qwen3NextExperts` with SiLU): for each token and each of its `top_k` experts `e` with weight
//! `w`, `out += w * down_e(silu(gate_e x) * up_e x)`, the experts of a token added in routing
//! order. Each projection is a [`crate::matvec`] (f64 accumulation, rounded once), the
//! activation [`crate::silu_mul`], the weighted add one f32 multiply and add.
//!
//! Weights are stacked: expert `e`'s gate and up rows are `e * ff..(e + 1) * ff` of `gate` and
//! `up` (`[n_experts * ff, hidden]`), its down rows `e * hidden..(e + 1) * hidden` of `down`
//! (`[n_experts * hidden, ff]`).

use crate::activation::silu_mul;
use crate::matvec::matvec;

/// Sizes of a MoE block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    pub n_experts: usize,
    pub hidden: usize,
    /// Intermediate size of one expert.
    pub ff: usize,
    pub top_k: usize,
}

/// `out[t] = sum_i weights[t, i] * expert_{ids[t, i]}(x[t])` for `n = x.len() / hidden` tokens.
///
/// # Panics
/// If a length does not match the module docs or an id is not below `n_experts` (ids come from
/// [`crate::moe_route`]: a bad one is a programming error).
#[allow(clippy::too_many_arguments)]
pub fn moe_experts(
    s: &MoeShape,
    x: &[f32],
    gate: &[f32],
    up: &[f32],
    down: &[f32],
    ids: &[u32],
    weights: &[f32],
    out: &mut [f32],
) {
    experts(s, x, gate, up, down, ids, weights, false, out);
}

/// [`moe_experts`] with the rounding of the cooperative-matrix kernels: each token's `x` and
/// each expert's activation `silu(gate x) * up x` rounded to f16 before their products (the
/// weights are used as given: pass them f16-rounded for those kernels).
///
/// # Panics
/// As [`moe_experts`].
#[allow(clippy::too_many_arguments)]
pub fn moe_experts_f16(
    s: &MoeShape,
    x: &[f32],
    gate: &[f32],
    up: &[f32],
    down: &[f32],
    ids: &[u32],
    weights: &[f32],
    out: &mut [f32],
) {
    experts(s, x, gate, up, down, ids, weights, true, out);
}

fn round_f16(v: &mut [f32]) {
    v.iter_mut()
        .for_each(|x| *x = half::f16::from_f32(*x).to_f32());
}

#[allow(clippy::too_many_arguments)]
fn experts(
    s: &MoeShape,
    x: &[f32],
    gate: &[f32],
    up: &[f32],
    down: &[f32],
    ids: &[u32],
    weights: &[f32],
    f16_act: bool,
    out: &mut [f32],
) {
    let (h, ff, k) = (s.hidden, s.ff, s.top_k);
    assert!(h > 0 && ff > 0 && k > 0, "moe_experts: empty shape {s:?}");
    let n = x.len() / h;
    assert_eq!(x.len(), n * h, "moe_experts: x");
    assert_eq!(out.len(), n * h, "moe_experts: out");
    assert!(
        ids.len() == n * k && weights.len() == n * k,
        "moe_experts: routing"
    );
    assert_eq!(gate.len(), s.n_experts * ff * h, "moe_experts: gate");
    assert_eq!(up.len(), s.n_experts * ff * h, "moe_experts: up");
    assert_eq!(down.len(), s.n_experts * h * ff, "moe_experts: down");
    let (mut g, mut u, mut a, mut y) = (
        vec![0f32; ff],
        vec![0f32; ff],
        vec![0f32; ff],
        vec![0f32; h],
    );
    let mut xh = vec![0f32; h];
    for t in 0..n {
        let mut xr = &x[t * h..(t + 1) * h];
        if f16_act {
            xh.copy_from_slice(xr);
            round_f16(&mut xh);
            xr = &xh;
        }
        let orow = &mut out[t * h..(t + 1) * h];
        orow.fill(0.0);
        for i in 0..k {
            let e = ids[t * k + i] as usize;
            assert!(
                e < s.n_experts,
                "moe_experts: expert {e} of {}",
                s.n_experts
            );
            matvec(&gate[e * ff * h..(e + 1) * ff * h], ff, h, xr, &mut g);
            matvec(&up[e * ff * h..(e + 1) * ff * h], ff, h, xr, &mut u);
            silu_mul(&g, &u, &mut a);
            if f16_act {
                round_f16(&mut a);
            }
            matvec(&down[e * h * ff..(e + 1) * h * ff], h, ff, &a, &mut y);
            let w = weights[t * k + i];
            orow.iter_mut().zip(&y).for_each(|(o, &v)| *o += w * v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn hand_values() {
        // hidden 2, ff 1, two experts. Expert 0: gate [1, 0], up [0, 1], down [[1], [2]];
        // expert 1: gate [0, 0] (silu(0) = 0: contributes nothing), up [1, 1], down [[5], [5]].
        // x = [2, 3]: expert 0 -> silu(2) * 3 = 3 * 2 / (1 + e^-2), out = that * [1, 2].
        let s = MoeShape {
            n_experts: 2,
            hidden: 2,
            ff: 1,
            top_k: 2,
        };
        let gate = [1.0, 0.0, 0.0, 0.0];
        let up = [0.0, 1.0, 1.0, 1.0];
        let down = [1.0, 2.0, 5.0, 5.0];
        let mut out = [f32::NAN; 2];
        moe_experts(
            &s,
            &[2.0, 3.0],
            &gate,
            &up,
            &down,
            &[1, 0],
            &[0.25, 0.5],
            &mut out,
        );
        let a = 3.0 * 2.0 / (1.0 + (-2f64).exp());
        assert!((f64::from(out[0]) - 0.5 * a).abs() < 1e-6, "{out:?}");
        assert!((f64::from(out[1]) - 0.5 * 2.0 * a).abs() < 1e-6, "{out:?}");
    }

    #[test]
    fn f16_rounds_input_and_activation() {
        // The hand_values block with x = [2 + 2^-12, 3]: the f16 form sees x = [2, 3] and the
        // activation silu(2) * 3 rounded to f16 (spacing 2^-9 in [2, 4)).
        let s = MoeShape {
            n_experts: 2,
            hidden: 2,
            ff: 1,
            top_k: 2,
        };
        let (gate, up, down) = (
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 1.0, 1.0],
            [1.0, 2.0, 5.0, 5.0],
        );
        let x = [2.0 + 2f32.powi(-12), 3.0];
        let mut out = [f32::NAN; 2];
        moe_experts_f16(&s, &x, &gate, &up, &down, &[1, 0], &[0.25, 0.5], &mut out);
        let a = half::f16::from_f64(3.0 * 2.0 / (1.0 + (-2f64).exp())).to_f64();
        assert!((f64::from(out[0]) - 0.5 * a).abs() < 1e-6, "{out:?}");
        assert!((f64::from(out[1]) - a).abs() < 1e-6, "{out:?}");
        let mut exact = [f32::NAN; 2];
        moe_experts(&s, &x, &gate, &up, &down, &[1, 0], &[0.25, 0.5], &mut exact);
        assert!((exact[1] - out[1]).abs() > 1e-4, "{exact:?} vs {out:?}");
    }

    #[test]
    fn matches_dense_f64() {
        let mut rng = Rng::new(21);
        let s = MoeShape {
            n_experts: 5,
            hidden: 7,
            ff: 3,
            top_k: 2,
        };
        let n = 4;
        let x = rng.vec(n * s.hidden);
        let gate = rng.vec(s.n_experts * s.ff * s.hidden);
        let up = rng.vec(s.n_experts * s.ff * s.hidden);
        let down = rng.vec(s.n_experts * s.hidden * s.ff);
        let ids = [4u32, 0, 1, 2, 3, 3, 0, 4];
        let w = [0.7f32, 0.3, 0.5, 0.5, 0.9, 0.1, 0.2, 0.8];
        let mut out = vec![f32::NAN; n * s.hidden];
        moe_experts(&s, &x, &gate, &up, &down, &ids, &w, &mut out);
        let (h, ff) = (s.hidden, s.ff);
        for t in 0..n {
            for c in 0..h {
                let mut want = 0f64;
                for i in 0..s.top_k {
                    let e = ids[t * 2 + i] as usize;
                    let mut acc = 0f64;
                    for f in 0..ff {
                        let dot = |m: &[f32]| -> f64 {
                            (0..h)
                                .map(|j| {
                                    f64::from(m[(e * ff + f) * h + j]) * f64::from(x[t * h + j])
                                })
                                .sum()
                        };
                        let (g, u) = (dot(&gate), dot(&up));
                        acc += f64::from(down[(e * h + c) * ff + f]) * g / (1.0 + (-g).exp()) * u;
                    }
                    want += f64::from(w[t * 2 + i]) * acc;
                }
                let got = f64::from(out[t * h + c]);
                assert!((got - want).abs() < 1e-5, "t {t} c {c}: {got} {want}");
            }
        }
    }
}
