//! Parity cases of the recurrent kernels of a Gated DeltaNet layer (causal conv1d, gated delta
//! rule) over a slot-major state of several sequences.
//!
//! Each shape runs three calls on one state of `SLOTS` sequences: a prefill of several tokens
//! into slot 1, one decode token into slot 1 (sequence mode), then a batched decode step in
//! per-row mode (row t = slot t) where slot 1 is idle. The reference is the single-sequence CPU
//! op on each slot's part of the state; the whole state is compared after every call, so a
//! write into another slot (or into the idle one) fails, and the idle row's output must be zero.
//! Outputs are NaN-poisoned before each dispatch; sizes are odd and not multiples of the
//! workgroup sizes; value heads of 70 span two 64-column blocks; convolutions run prompts over
//! several row blocks.

use vkllm_cpu::DeltaShape;
use vkllm_kernels::causal_conv1d::{CausalConv1d, ConvShape};
use vkllm_kernels::gated_delta_rule::{
    DeltaNorm, DeltaShape as DeltaShapeK, GatedDeltaRule, StateRows,
};

use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, row};
use vkllm_vk::Device;
use vkllm_vk::Result;

/// Sequences in the state of every case.
const SLOTS: usize = 3;
/// The capacity per-row calls are told; slot 1's position is past it (idle).
const CAPACITY: usize = 40;

fn max_abs(x: &[f32]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())))
}

/// The three calls of a case: label, state rows, token count.
fn calls(n: usize) -> [(&'static str, StateRows, usize); 3] {
    [
        ("prefill slot 1", StateRows::Sequence { slot: 1 }, n),
        ("decode slot 1", StateRows::Sequence { slot: 1 }, 1),
        (
            "per-row, slot 1 idle",
            StateRows::PerRow { capacity: CAPACITY },
            SLOTS,
        ),
    ]
}

/// Positions of a per-row call: slots 0 and 2 live, slot 1 idle.
fn positions() -> Vec<u32> {
    vec![7, CAPACITY as u32 + 3, 21]
}

/// For each row of a call, the slot whose state it uses (None: idle).
fn row_slots(rows: StateRows, t: usize) -> Vec<Option<usize>> {
    match rows {
        StateRows::Sequence { slot } => vec![Some(slot); t],
        StateRows::PerRow { capacity } => positions()
            .iter()
            .enumerate()
            .map(|(i, &p)| ((p as usize) < capacity).then_some(i))
            .collect(),
    }
}

pub(crate) fn causal_conv1d(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut out_rows = Vec::new();
    let pos = cx.input("pos", &positions())?;
    // n past one 16-row block (37), shorter than the state (2 < k - 1), and a kernel longer
    // than a row block (20 taps: blocks of 19 rows).
    for (c, k, n) in [
        (131usize, 4usize, 7usize),
        (70, 2, 3),
        (67, 4, 37),
        (40, 4, 2),
        (33, 20, 45),
    ] {
        let len = (k - 1) * c;
        let w = rng.vec(c * k, -0.7, 0.7);
        let st0 = rng.vec(SLOTS * len, -2.0, 2.0);
        let (wb, sb) = (cx.input("w", &w)?, cx.input("state", &st0)?);
        let mut cpu_state = st0.clone();
        for (label, rows, t) in calls(n) {
            let x = rng.vec(t * c, -2.0, 2.0);
            let xb = cx.input("x", &x)?;
            let out = cx.output("out", t * c)?;
            let s = ConvShape {
                n: t,
                channels: c,
                kernel: k,
                silu: true,
                rows,
            };
            cx.run(&[&out], |r| {
                r.dispatch(
                    CausalConv1d {
                        x: xb.all(),
                        w: wb.all(),
                        state: sb.all(),
                        out: out.all(),
                        pos: pos.all(),
                    }
                    .dispatch(&s)?,
                )
            })?;
            let mut want = vec![0.0; t * c];
            let slots = row_slots(rows, t);
            if let StateRows::Sequence { slot } = rows {
                let st = &mut cpu_state[slot * len..(slot + 1) * len];
                vkllm_cpu::causal_conv1d(&x, c, &w, st, true, &mut want);
            } else {
                for (i, s) in slots.iter().enumerate() {
                    let Some(s) = *s else { continue };
                    let st = &mut cpu_state[s * len..(s + 1) * len];
                    let o = &mut want[i * c..(i + 1) * c];
                    vkllm_cpu::causal_conv1d(&x[i * c..(i + 1) * c], c, &w, st, true, o);
                }
            }
            let got = cx.read(&out, t * c)?;
            let shape = format!("n {t} C {c} K {k} slots {SLOTS}");
            let tol = Tol {
                max_abs: 4e-6 * max_abs(&want).max(1.0),
                nmse: 1e-10,
            };
            out_rows.push(row("causal_conv1d", label, &shape, &got, &want, tol));
            let st = cx.read(&sb, SLOTS * len)?;
            let variant = format!("{label} state");
            out_rows.push(row(
                "causal_conv1d",
                variant,
                &shape,
                &st,
                &cpu_state,
                EXACT,
            ));
        }
    }
    Ok(out_rows)
}

/// The kernels' shape of `n` rows of `d`.
fn kernel_shape(d: &DeltaShape, n: usize, rows: StateRows) -> DeltaShapeK {
    DeltaShapeK {
        n,
        n_k_heads: d.n_k_heads,
        n_v_heads: d.n_v_heads,
        k_dim: d.k_dim,
        v_dim: d.v_dim,
        tiled_v_heads: d.tiled_v_heads,
        rows,
    }
}

/// The CPU gated delta rule of `t` rows of `qkv` on one slot's state.
#[allow(clippy::too_many_arguments)]
fn delta_ref(
    d: &DeltaShape,
    qkv: &[f32],
    a: &[f32],
    b: &[f32],
    a_log: &[f32],
    dt_bias: &[f32],
    state: &mut [f32],
    out: &mut [f32],
) {
    let (qw, hv) = (d.qk_width(), d.n_v_heads);
    let width = 2 * qw + d.v_width();
    let t = qkv.len() / width;
    let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for r in qkv.chunks_exact(width) {
        q.extend_from_slice(&r[..qw]);
        k.extend_from_slice(&r[qw..2 * qw]);
        v.extend_from_slice(&r[2 * qw..]);
    }
    let (mut g, mut beta) = (vec![0.0; t * hv], vec![0.0; t * hv]);
    vkllm_cpu::delta_gates(a, b, a_log, dt_bias, &mut g, &mut beta);
    vkllm_cpu::gated_delta_rule(d, &q, &k, &v, &g, &beta, state, out);
}

fn delta_shapes() -> [(DeltaShape, usize); 3] {
    [
        (
            DeltaShape {
                n_k_heads: 2,
                n_v_heads: 6,
                k_dim: 20,
                v_dim: 70,
                tiled_v_heads: false,
            },
            9,
        ),
        (
            DeltaShape {
                n_k_heads: 2,
                n_v_heads: 4,
                k_dim: 128,
                v_dim: 128,
                tiled_v_heads: false,
            },
            3,
        ),
        (
            DeltaShape {
                n_k_heads: 3,
                n_v_heads: 6,
                k_dim: 16,
                v_dim: 33,
                tiled_v_heads: true,
            },
            4,
        ),
    ]
}

/// Which launch of the recurrent form a run of the calls takes.
#[derive(Clone, Copy, PartialEq)]
enum DeltaLaunch {
    /// `main`.
    Plain,
    /// The register-resident `main_wide`.
    Wide,
    /// `main_wide` with the layer's gated RMSNorm fused into its output.
    WideNorm,
}

/// The recurrent form's launches, each over its own run of the calls.
pub(crate) fn gated_delta_rule(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let mut rows = delta_rule_rows(dev, seed, DeltaLaunch::Plain)?;
    rows.extend(delta_rule_rows(dev, seed, DeltaLaunch::Wide)?);
    rows.extend(delta_rule_rows(dev, seed, DeltaLaunch::WideNorm)?);
    Ok(rows)
}

/// The gated RMSNorm of the rule's output `o` (`vkllm_cpu::gated_rmsnorm`, rows of `z.len() /
/// rows` heads), and its tolerance given the rule output's `tol_o`: per head row
/// `max |w silu(z)| * 2 tol_o / rms(o)` (an error `d` in o moves o / rms by at most 2 d / rms),
/// plus f32 rounding of the norm itself.
fn norm_ref(o: &[f32], z: &[f32], w: &[f32], eps: f32, tol_o: f64) -> (Vec<f32>, Tol) {
    let mut want = vec![0.0; o.len()];
    vkllm_cpu::gated_rmsnorm(o, z, w, eps, &mut want);
    let dv = w.len();
    let mut bound = 0f64;
    for (orow, zrow) in o.chunks_exact(dv).zip(z.chunks_exact(dv)) {
        let ms = orow
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            / dv as f64;
        let rms = (ms + f64::from(eps)).sqrt();
        let gain = w.iter().zip(zrow).fold(0f64, |m, (&wj, &zj)| {
            let zj = f64::from(zj);
            m.max((f64::from(wj) * zj / (1.0 + (-zj).exp())).abs())
        });
        bound = bound.max(gain * 2.0 * tol_o / rms);
    }
    let tol = Tol {
        max_abs: bound + 1e-6 * max_abs(&want).max(1.0),
        nmse: 1e-9,
    };
    (want, tol)
}

fn delta_rule_rows(dev: &Device, seed: u64, launch: DeltaLaunch) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows_out = Vec::new();
    let pos = cx.input("pos", &positions())?;
    for (d, n) in delta_shapes() {
        let (qw, vw, hv, len) = (d.qk_width(), d.v_width(), d.n_v_heads, d.state_len());
        let width = 2 * qw + vw;
        let a_log: Vec<f32> = (0..hv).map(|_| rng.f32(0.01, 4.0).ln()).collect();
        let dt_bias = rng.vec(hv, -1.0, 1.0);
        let st0 = rng.vec(SLOTS * len, -0.5, 0.5);
        let (lb, db, sb) = (
            cx.input("a_log", &a_log)?,
            cx.input("dt_bias", &dt_bias)?,
            cx.input("state", &st0)?,
        );
        let mut cpu_state = st0.clone();
        for (label, rows, t) in calls(n) {
            let label = match launch {
                DeltaLaunch::Plain => label.to_string(),
                DeltaLaunch::Wide => format!("wide {label}"),
                DeltaLaunch::WideNorm => format!("wide + norm {label}"),
            };
            let qkv = rng.vec(t * width, -1.5, 1.5);
            let (a, b) = (rng.vec(t * hv, -3.0, 3.0), rng.vec(t * hv, -3.0, 3.0));
            let (qb, ab, bb) = (
                cx.input("qkv", &qkv)?,
                cx.input("a", &a)?,
                cx.input("b", &b)?,
            );
            let out = cx.output("out", t * vw)?;
            let (z, nw, eps) = (rng.vec(t * vw, -3.0, 3.0), rng.vec(d.v_dim, 0.5, 1.5), 1e-6);
            let (zb, nwb) = (cx.input("z", &z)?, cx.input("norm_w", &nw)?);
            let before = cx.read(&sb, SLOTS * len)?;
            cx.run(&[&out], |r| {
                let k = GatedDeltaRule {
                    qkv: qb.all(),
                    a: ab.all(),
                    b: bb.all(),
                    a_log: lb.all(),
                    dt_bias: db.all(),
                    state: sb.all(),
                    out: out.all(),
                    pos: pos.all(),
                };
                let shape = kernel_shape(&d, t, rows);
                r.dispatch(match launch {
                    DeltaLaunch::Plain => k.dispatch(&shape)?,
                    DeltaLaunch::Wide => k.dispatch_wide(&shape)?,
                    DeltaLaunch::WideNorm => {
                        let dn = DeltaNorm {
                            z: zb.all(),
                            weight: nwb.all(),
                            eps,
                        };
                        k.dispatch_wide_norm(&shape, dn)?
                    }
                })
            })?;
            let mut want = vec![0.0; t * vw];
            let gates = (&a_log[..], &dt_bias[..]);
            if let StateRows::Sequence { slot } = rows {
                let st = &mut cpu_state[slot * len..(slot + 1) * len];
                delta_ref(&d, &qkv, &a, &b, gates.0, gates.1, st, &mut want);
            } else {
                for (i, s) in row_slots(rows, t).iter().enumerate() {
                    let Some(s) = *s else { continue };
                    let st = &mut cpu_state[s * len..(s + 1) * len];
                    delta_ref(
                        &d,
                        &qkv[i * width..(i + 1) * width],
                        &a[i * hv..(i + 1) * hv],
                        &b[i * hv..(i + 1) * hv],
                        gates.0,
                        gates.1,
                        st,
                        &mut want[i * vw..(i + 1) * vw],
                    );
                }
            }
            let got = cx.read(&out, t * vw)?;
            let shape = format!(
                "n {t} heads {}/{hv}{} dk {} dv {}",
                d.n_k_heads,
                if d.tiled_v_heads { " tiled" } else { "" },
                d.k_dim,
                d.v_dim
            );
            // f32 recurrences against the f64 reference: a few ulps per token of history.
            let tol = Tol {
                max_abs: 1e-6 * max_abs(&want).max(1.0),
                nmse: 1e-9,
            };
            let (want, tol) = match launch {
                DeltaLaunch::WideNorm => norm_ref(&want, &z, &nw, eps, tol.max_abs),
                _ => (want, tol),
            };
            rows_out.push(row("gated_delta_rule", &label, &shape, &got, &want, tol));
            let st = cx.read(&sb, SLOTS * len)?;
            // Untouched slots must keep their exact bits (the device's own, from before the call).
            let touched: Vec<usize> = match rows {
                StateRows::Sequence { slot } => vec![slot],
                StateRows::PerRow { .. } => row_slots(rows, t).into_iter().flatten().collect(),
            };
            let (mut live_got, mut live_want, mut kept_got, mut kept_want) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for s in 0..SLOTS {
                let r = s * len..(s + 1) * len;
                if touched.contains(&s) {
                    live_got.extend_from_slice(&st[r.clone()]);
                    live_want.extend_from_slice(&cpu_state[r]);
                } else {
                    kept_got.extend_from_slice(&st[r.clone()]);
                    kept_want.extend_from_slice(&before[r]);
                }
            }
            let tol = Tol {
                max_abs: 2e-6 * max_abs(&live_want).max(1.0),
                nmse: 1e-9,
            };
            let v = format!("{label} state");
            rows_out.push(row(
                "gated_delta_rule",
                v,
                &shape,
                &live_got,
                &live_want,
                tol,
            ));
            let v = format!("{label} other slots");
            rows_out.push(row(
                "gated_delta_rule",
                v,
                &shape,
                &kept_got,
                &kept_want,
                EXACT,
            ));
        }
    }
    Ok(rows_out)
}

/// The chunked form (prefill) against the CPU recurrence: prompts of several 16-token chunks
/// (the last one partial) into slot 1 of the state, then a second prompt continuing from the
/// state the first left. Both launches (`main`, then the register-resident `main_wide`: 32
/// columns by 8 row groups, which k_dim 20 and v_dim 70 / 33 do not fill), each on inputs of
/// its own.
pub(crate) fn gated_delta_rule_chunked(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let mut rows = chunked_rows(dev, seed, false)?;
    rows.extend(chunked_rows(dev, seed ^ 0x9e37_79b9_7f4a_7c15, true)?);
    Ok(rows)
}

fn chunked_rows(dev: &Device, seed: u64, wide: bool) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let kind = if wide { "chunked wide" } else { "chunked" };
    let mut rng = Rng::new(seed);
    let mut rows_out = Vec::new();
    let pos = cx.input("pos", &positions())?;
    let shapes = delta_shapes();
    for (d, n) in [(shapes[0].0, 37usize), (shapes[1].0, 20), (shapes[2].0, 16)] {
        let (qw, vw, hv, len) = (d.qk_width(), d.v_width(), d.n_v_heads, d.state_len());
        let width = 2 * qw + vw;
        let a_log: Vec<f32> = (0..hv).map(|_| rng.f32(0.01, 4.0).ln()).collect();
        let dt_bias = rng.vec(hv, -1.0, 1.0);
        let st0 = rng.vec(SLOTS * len, -0.5, 0.5);
        let (lb, db, sb) = (
            cx.input("a_log", &a_log)?,
            cx.input("dt_bias", &dt_bias)?,
            cx.input("state", &st0)?,
        );
        let mut cpu_state = st0.clone();
        for (label, t) in [("prompt", n), ("continued", 5)] {
            let qkv = rng.vec(t * width, -1.5, 1.5);
            let (a, b) = (rng.vec(t * hv, -3.0, 3.0), rng.vec(t * hv, -3.0, 3.0));
            let (qb, ab, bb) = (
                cx.input("qkv", &qkv)?,
                cx.input("a", &a)?,
                cx.input("b", &b)?,
            );
            let out = cx.output("out", t * vw)?;
            let before = cx.read(&sb, SLOTS * len)?;
            cx.run(&[&out], |r| {
                let k = GatedDeltaRule {
                    qkv: qb.all(),
                    a: ab.all(),
                    b: bb.all(),
                    a_log: lb.all(),
                    dt_bias: db.all(),
                    state: sb.all(),
                    out: out.all(),
                    pos: pos.all(),
                };
                let shape = kernel_shape(&d, t, StateRows::Sequence { slot: 1 });
                r.dispatch(if wide {
                    k.dispatch_chunked_wide(&shape)?
                } else {
                    k.dispatch_chunked(&shape)?
                })
            })?;
            let mut want = vec![0.0; t * vw];
            let st = &mut cpu_state[len..2 * len];
            delta_ref(&d, &qkv, &a, &b, &a_log, &dt_bias, st, &mut want);
            let got = cx.read(&out, t * vw)?;
            let shape = format!(
                "n {t} heads {}/{hv}{} dk {} dv {}",
                d.n_k_heads,
                if d.tiled_v_heads { " tiled" } else { "" },
                d.k_dim,
                d.v_dim
            );
            // f32 chunks (forward substitution over 16 tokens) against the f64 recurrence: the
            // recurrent kernel's tolerances.
            let tol = Tol {
                max_abs: 1e-6 * max_abs(&want).max(1.0),
                nmse: 1e-9,
            };
            let v = format!("{kind} {label}");
            rows_out.push(row("gated_delta_rule", v, &shape, &got, &want, tol));
            let st = cx.read(&sb, SLOTS * len)?;
            let tol = Tol {
                max_abs: 2e-6 * max_abs(&cpu_state[len..2 * len]).max(1.0),
                nmse: 1e-9,
            };
            let v = format!("{kind} {label} state");
            let (g, w) = (&st[len..2 * len], &cpu_state[len..2 * len]);
            rows_out.push(row("gated_delta_rule", v, &shape, g, w, tol));
            let kept: Vec<f32> = [&st[..len], &st[2 * len..]].concat();
            let kept_want: Vec<f32> = [&before[..len], &before[2 * len..]].concat();
            let v = format!("{kind} {label} other slots");
            rows_out.push(row("gated_delta_rule", v, &shape, &kept, &kept_want, EXACT));
        }
    }
    Ok(rows_out)
}
