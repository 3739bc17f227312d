//! Gated activations of the MLP: `out = act(gate) * up`, all in f32 in PyTorch's order.
//!
//! - SiLU: `silu(g) = g / (1 + exp(-g))` (PyTorch's CPU kernel), one f32 rounding per step.
//! - GELU, tanh approximation (`gelu_pytorch_tanh`, `nn.functional.gelu(approximate="tanh")`):
//!   `inner = kBeta * (g + kKappa * g*g*g)` with `kBeta = sqrt(2/pi)` and `kKappa = 0.044715`
//!   rounded to f32, then `0.5 * g * (1 + tanh(inner))`, left to right, as PyTorch computes it.

/// `sqrt(2 / pi)` rounded to f32.
const K_BETA: f32 = 0.797_884_6;
/// The cubic coefficient of the tanh approximation.
const K_KAPPA: f32 = 0.044_715;

/// SiLU (swish): `x * sigmoid(x)`, computed as `x / (1 + exp(-x))` in f32.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU with PyTorch's tanh approximation; see the module docs for the order of operations.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    let x_cube = x * x * x;
    let inner = K_BETA * (x + K_KAPPA * x_cube);
    0.5 * x * (1.0 + inner.tanh())
}

/// Logistic sigmoid `1 / (1 + exp(-x))` in f32 (`torch.sigmoid`).
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `x *= sigmoid(gate)` for `x` of `rows` rows: elementwise when `gate.len() == x.len()` (the
/// gated attention's output gate), one gate per row when `gate.len() == rows` (the shared
/// expert's scalar gate).
///
/// # Panics
/// If `gate` has neither length, or `x` is not `rows` whole rows.
pub fn sigmoid_mul(x: &mut [f32], gate: &[f32], rows: usize) {
    assert!(
        rows > 0 && x.len().is_multiple_of(rows),
        "sigmoid_mul: x is not [rows, cols]"
    );
    let cols = x.len() / rows;
    if gate.len() == x.len() {
        x.iter_mut().zip(gate).for_each(|(v, &g)| *v *= sigmoid(g));
    } else {
        assert_eq!(
            gate.len(),
            rows,
            "sigmoid_mul: gate is neither [rows, cols] nor [rows]"
        );
        for (row, &g) in x.chunks_exact_mut(cols).zip(gate) {
            let s = sigmoid(g);
            row.iter_mut().for_each(|v| *v *= s);
        }
    }
}

/// `out[i] = silu(gate[i]) * up[i]` (Llama, Qwen, Mistral MLPs).
///
/// # Panics
/// If the three lengths differ (a programming error).
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    gated(gate, up, out, silu);
}

/// `out[i] = gelu_tanh(gate[i]) * up[i]` (Gemma MLPs).
///
/// # Panics
/// If the three lengths differ (a programming error).
pub fn gelu_tanh_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    gated(gate, up, out, gelu_tanh);
}

fn gated(gate: &[f32], up: &[f32], out: &mut [f32], act: fn(f32) -> f32) {
    assert!(
        gate.len() == up.len() && gate.len() == out.len(),
        "gated activation: length mismatch"
    );
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = act(g) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    fn silu_f64(x: f64) -> f64 {
        x / (1.0 + (-x).exp())
    }

    fn gelu_tanh_f64(x: f64) -> f64 {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
    }

    #[test]
    fn constants() {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        assert_eq!(K_BETA, k as f32);
    }

    #[test]
    fn hand_values() {
        assert_eq!(silu(0.0), 0.0);
        // silu(1) = 1 / (1 + e^-1) = 0.7310585786...
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-7);
        assert_eq!(silu(-200.0), -0.0);
        assert_eq!(silu(200.0), 200.0);
        assert_eq!(gelu_tanh(0.0), 0.0);
        // gelu_tanh(1) = 0.5 * (1 + tanh(0.7978845608 * 1.044715)) = 0.8411919906...
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-6);
        assert_eq!(gelu_tanh(10.0), 10.0);
        assert!(gelu_tanh(-10.0).abs() < 1e-6);
    }

    #[test]
    fn sigmoid_gates() {
        assert_eq!(sigmoid(0.0), 0.5);
        // sigmoid(ln 3) = 3 / 4.
        let mut x = [4.0, 8.0, 1.0, 2.0];
        sigmoid_mul(&mut x, &[3f32.ln(), 0.0, -200.0, 200.0], 2);
        assert!(
            (x[0] - 3.0).abs() < 1e-6 && x[1] == 4.0 && x[2] == 0.0 && x[3] == 2.0,
            "{x:?}"
        );
        // One gate per row of 2.
        let mut y = [4.0, 8.0, 1.0, 2.0];
        sigmoid_mul(&mut y, &[0.0, 200.0], 2);
        assert_eq!(y, [2.0, 4.0, 1.0, 2.0]);
    }

    #[test]
    fn gated_match_f64() {
        let mut rng = Rng::new(4);
        let n = 101;
        let g: Vec<f32> = rng.vec(n).iter().map(|v| v * 8.0).collect();
        let u = rng.vec(n);
        let mut s = vec![f32::NAN; n];
        let mut t = vec![f32::NAN; n];
        silu_mul(&g, &u, &mut s);
        gelu_tanh_mul(&g, &u, &mut t);
        for i in 0..n {
            let (gi, ui) = (f64::from(g[i]), f64::from(u[i]));
            assert!(
                (f64::from(s[i]) - silu_f64(gi) * ui).abs() < 4e-6,
                "silu {i}"
            );
            assert!(
                (f64::from(t[i]) - gelu_tanh_f64(gi) * ui).abs() < 4e-6,
                "gelu {i}"
            );
        }
    }
}
