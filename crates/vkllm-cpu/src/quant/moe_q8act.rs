//! The routed experts of a MoE block over int8-quantized activations: the oracle of the GPU's
//! int8 expert launches (vkllm-kernels `moe_experts_q8a`). Gate and up are [`matvec_q8act`]
//! products of each selected expert's rows with the token's x quantized per 32
//! ([`quantize_act_q8`]), the activation `silu(g) * u` ([`crate::silu_mul`]); down is the
//! product of each expert's rows with that slot's activations quantized per 32, the slots
//! weighed by their routing weights and summed in f64, rounded once.
//!
//! Weights are stacked GGUF blocks as in [`crate::moe_experts`]: expert `e`'s gate and up rows
//! `e * ff..(e + 1) * ff` of `[n_experts * ff, hidden]`, its down rows `e * hidden..` of
//! `[n_experts * hidden, ff]`.

use super::{QuantType, matvec_q8act, quantize_act_q8};
use crate::{CpuError, MoeShape};

/// RMSNorm folded into the products as the GPU's int8 kernels do it: x is weighted by
/// `offset + weight` before quantization and each finished product multiplied by
/// `1 / sqrt(mean(x^2) + eps)` (f64, rounded once).
#[derive(Clone, Copy, Debug)]
pub struct ActNormQ8<'a> {
    pub weight: &'a [f32],
    pub offset: f32,
    pub eps: f32,
}

/// `act[t, s] = silu(gate_e x[t]) * (up_e x[t])` (`[n, top_k, ff]`) for `e = ids[t, s]`, both
/// products over the int8-quantized `x[t]` (with `norm`, over its normed form: [`ActNormQ8`]).
///
/// # Errors
/// Weight bytes that are not whole rows of `ty` ([`matvec_q8act`]'s errors).
///
/// # Panics
/// If a length does not match the module docs or an id is not below `n_experts` (ids come from
/// the router: a bad one is a programming error).
#[allow(clippy::too_many_arguments)]
pub fn moe_gate_up_q8act(
    s: &MoeShape,
    ty: QuantType,
    gate: &[u8],
    up: &[u8],
    x: &[f32],
    norm: Option<ActNormQ8<'_>>,
    ids: &[u32],
    act: &mut [f32],
) -> Result<(), CpuError> {
    let (h, ff, k) = (s.hidden, s.ff, s.top_k);
    let n = check(s, x.len(), ids.len(), act.len());
    let rb = ty.row_bytes(h)? * ff;
    assert!(
        gate.len() == s.n_experts * rb && up.len() == s.n_experts * rb,
        "moe_gate_up_q8act: stacked weights"
    );
    let (mut g, mut u) = (vec![0f32; ff], vec![0f32; ff]);
    for t in 0..n {
        let xt = &x[t * h..(t + 1) * h];
        let (xq, inv) = match norm {
            Some(nm) => {
                assert_eq!(nm.weight.len(), h, "moe_gate_up_q8act: norm weight");
                let ss: f64 = xt.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
                let inv = (1.0 / (ss / h as f64 + f64::from(nm.eps)).sqrt()) as f32;
                let v: Vec<f32> = xt
                    .iter()
                    .zip(nm.weight)
                    .map(|(&a, &w)| a * (nm.offset + w))
                    .collect();
                (quantize_act_q8(&v), Some(inv))
            }
            None => (quantize_act_q8(xt), None),
        };
        for i in 0..k {
            let e = expert(s, ids[t * k + i]);
            matvec_q8act(ty, &gate[e * rb..(e + 1) * rb], ff, h, &xq, &mut g)?;
            matvec_q8act(ty, &up[e * rb..(e + 1) * rb], ff, h, &xq, &mut u)?;
            if let Some(inv) = inv {
                g.iter_mut().chain(u.iter_mut()).for_each(|v| *v *= inv);
            }
            let a = &mut act[(t * k + i) * ff..(t * k + i + 1) * ff];
            crate::silu_mul(&g, &u, a);
        }
    }
    Ok(())
}

/// `out[t] = sum_s weights[t, s] * (down_e q8(act[t, s]))` (`[n, hidden]`), `e = ids[t, s]`.
///
/// # Errors
/// As [`moe_gate_up_q8act`].
///
/// # Panics
/// As [`moe_gate_up_q8act`].
#[allow(clippy::too_many_arguments)]
pub fn moe_down_q8act(
    s: &MoeShape,
    ty: QuantType,
    down: &[u8],
    act: &[f32],
    ids: &[u32],
    weights: &[f32],
    out: &mut [f32],
) -> Result<(), CpuError> {
    let (h, ff, k) = (s.hidden, s.ff, s.top_k);
    let n = check(s, out.len(), ids.len(), act.len());
    assert_eq!(weights.len(), ids.len(), "moe_down_q8act: routing");
    let rb = ty.row_bytes(ff)? * h;
    assert_eq!(
        down.len(),
        s.n_experts * rb,
        "moe_down_q8act: stacked weights"
    );
    let mut y = vec![0f32; h];
    let mut acc = vec![0f64; h];
    for t in 0..n {
        acc.fill(0.0);
        for i in 0..k {
            let e = expert(s, ids[t * k + i]);
            let rows = &down[e * rb..(e + 1) * rb];
            let aq = quantize_act_q8(&act[(t * k + i) * ff..(t * k + i + 1) * ff]);
            matvec_q8act(ty, rows, h, ff, &aq, &mut y)?;
            let w = f64::from(weights[t * k + i]);
            acc.iter_mut()
                .zip(&y)
                .for_each(|(a, &v)| *a += w * f64::from(v));
        }
        for (o, &a) in out[t * h..(t + 1) * h].iter_mut().zip(&acc) {
            *o = a as f32;
        }
    }
    Ok(())
}

/// Tokens of a call whose token-major buffer has `len_h` = n * hidden elements, `len_k` =
/// n * top_k routing entries and `len_a` = n * top_k * ff activations.
fn check(s: &MoeShape, len_h: usize, len_k: usize, len_a: usize) -> usize {
    let (h, ff, k) = (s.hidden, s.ff, s.top_k);
    let n = len_h / h.max(1);
    assert!(
        h > 0 && ff > 0 && k > 0 && len_h == n * h && len_k == n * k && len_a == n * k * ff,
        "moe q8act: {len_h} / {len_k} / {len_a} elements for {s:?}"
    );
    n
}

fn expert(s: &MoeShape, id: u32) -> usize {
    let e = id as usize;
    assert!(e < s.n_experts, "moe q8act: expert {e} of {}", s.n_experts);
    e
}
