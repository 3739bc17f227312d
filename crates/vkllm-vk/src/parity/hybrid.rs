//! Parity cases of the hybrid (Gated DeltaNet) and MoE kernels: causal conv1d, gated delta
//! rule, gated RMSNorm, sigmoid gate, MoE routing and MoE experts.
//!
//! Stateful kernels run twice (a prefill of several tokens, then one decode token) so the state
//! they leave behind is checked as well as their outputs. Sizes are odd and not multiples of the
//! workgroup sizes; value heads of 70 span two 64-column blocks.

use vkllm_cpu::DeltaShape;
use vkllm_kernels::causal_conv1d::{CausalConv1d, ConvShape};
use vkllm_kernels::gated_delta_rule::{DeltaShape as DeltaShapeK, GatedDeltaRule};
use vkllm_kernels::gated_rmsnorm::GatedRmsNorm;
use vkllm_kernels::moe_experts::{MoeExperts, MoeShape as MoeShapeK};
use vkllm_kernels::moe_route::MoeRoute;
use vkllm_kernels::sigmoid_mul::SigmoidMul;

use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, row};
use crate::device::Device;
use crate::error::Result;

fn max_abs(x: &[f32]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())))
}

/// A few f32 roundings per element of O(1) values.
fn tol_f32(want: &[f32]) -> Tol {
    Tol {
        max_abs: 4e-6 * max_abs(want).max(1.0),
        nmse: 1e-10,
    }
}

pub(crate) fn causal_conv1d(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for (c, k, n) in [(131usize, 4usize, 7usize), (70, 2, 3)] {
        let w = rng.vec(c * k, -0.7, 0.7);
        let x0 = rng.vec(n * c, -2.0, 2.0);
        let x1 = rng.vec(c, -2.0, 2.0);
        let st0 = rng.vec((k - 1) * c, -2.0, 2.0);
        let (wb, sb) = (cx.input("w", &w)?, cx.input("state", &st0)?);
        let mut cpu_state = st0.clone();
        for (label, x) in [("prefill", &x0), ("decode", &x1)] {
            let t = x.len() / c;
            let xb = cx.input("x", x)?;
            let out = cx.output("out", t * c)?;
            let s = ConvShape {
                n: t,
                channels: c,
                kernel: k,
                silu: true,
            };
            cx.run(&[&out], |r| {
                r.dispatch(
                    CausalConv1d {
                        x: xb.all(),
                        w: wb.all(),
                        state: sb.all(),
                        out: out.all(),
                    }
                    .dispatch(&s)?,
                )
            })?;
            let mut want = vec![0.0; t * c];
            vkllm_cpu::causal_conv1d(x, c, &w, &mut cpu_state, true, &mut want);
            let got = cx.read(&out, t * c)?;
            let shape = format!("n {t} C {c} K {k}");
            rows.push(row(
                "causal_conv1d",
                label,
                &shape,
                &got,
                &want,
                tol_f32(&want),
            ));
            let st = cx.read(&sb, (k - 1) * c)?;
            rows.push(row(
                "causal_conv1d",
                format!("{label} state"),
                &shape,
                &st,
                &cpu_state,
                EXACT,
            ));
        }
    }
    Ok(rows)
}

pub(crate) fn gated_delta_rule(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for (d, n) in [
        (
            DeltaShape {
                n_k_heads: 2,
                n_v_heads: 6,
                k_dim: 20,
                v_dim: 70,
                tiled_v_heads: false,
            },
            9usize,
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
    ] {
        let (qw, vw, hv) = (d.qk_width(), d.v_width(), d.n_v_heads);
        let width = 2 * qw + vw;
        let a_log: Vec<f32> = (0..hv).map(|_| rng.f32(0.01, 4.0).ln()).collect();
        let dt_bias = rng.vec(hv, -1.0, 1.0);
        let st0 = rng.vec(d.state_len(), -0.5, 0.5);
        let (lb, db, sb) = (
            cx.input("a_log", &a_log)?,
            cx.input("dt_bias", &dt_bias)?,
            cx.input("state", &st0)?,
        );
        let mut cpu_state = st0.clone();
        for (label, t) in [("prefill", n), ("decode", 1)] {
            let qkv = rng.vec(t * width, -1.5, 1.5);
            let (a, b) = (rng.vec(t * hv, -3.0, 3.0), rng.vec(t * hv, -3.0, 3.0));
            let (qb, ab, bb) = (
                cx.input("qkv", &qkv)?,
                cx.input("a", &a)?,
                cx.input("b", &b)?,
            );
            let out = cx.output("out", t * vw)?;
            cx.run(&[&out], |r| {
                r.dispatch(
                    GatedDeltaRule {
                        qkv: qb.all(),
                        a: ab.all(),
                        b: bb.all(),
                        a_log: lb.all(),
                        dt_bias: db.all(),
                        state: sb.all(),
                        out: out.all(),
                    }
                    .dispatch(&DeltaShapeK {
                        n: t,
                        n_k_heads: d.n_k_heads,
                        n_v_heads: hv,
                        k_dim: d.k_dim,
                        v_dim: d.v_dim,
                        tiled_v_heads: d.tiled_v_heads,
                    })?,
                )
            })?;
            let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
            for r in qkv.chunks_exact(width) {
                q.extend_from_slice(&r[..qw]);
                k.extend_from_slice(&r[qw..2 * qw]);
                v.extend_from_slice(&r[2 * qw..]);
            }
            let (mut g, mut beta) = (vec![0.0; t * hv], vec![0.0; t * hv]);
            vkllm_cpu::delta_gates(&a, &b, &a_log, &dt_bias, &mut g, &mut beta);
            let mut want = vec![0.0; t * vw];
            vkllm_cpu::gated_delta_rule(&d, &q, &k, &v, &g, &beta, &mut cpu_state, &mut want);
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
            rows.push(row("gated_delta_rule", label, &shape, &got, &want, tol));
            let st = cx.read(&sb, d.state_len())?;
            let tol = Tol {
                max_abs: 2e-6 * max_abs(&cpu_state).max(1.0),
                nmse: 1e-9,
            };
            rows.push(row(
                "gated_delta_rule",
                format!("{label} state"),
                &shape,
                &st,
                &cpu_state,
                tol,
            ));
        }
    }
    Ok(rows)
}

pub(crate) fn gated_rmsnorm(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for (nr, n, eps) in [(21usize, 100usize, 1e-6f32), (8, 128, 1e-2)] {
        let x = rng.vec(nr * n, -2.0, 2.0);
        let z = rng.vec(nr * n, -5.0, 5.0);
        let w = rng.vec(n, 0.5, 1.5);
        let (xb, zb, wb) = (cx.input("x", &x)?, cx.input("z", &z)?, cx.input("w", &w)?);
        let out = cx.output("out", nr * n)?;
        cx.run(&[&out], |r| {
            r.dispatch(
                GatedRmsNorm {
                    x: xb.all(),
                    z: zb.all(),
                    weight: wb.all(),
                    out: out.all(),
                }
                .dispatch(nr, n, eps)?,
            )
        })?;
        let mut want = vec![0.0; nr * n];
        vkllm_cpu::gated_rmsnorm(&x, &z, &w, eps, &mut want);
        let got = cx.read(&out, nr * n)?;
        let shape = format!("{nr} x {n} eps {eps:e}");
        rows.push(row(
            "gated_rmsnorm",
            "f32",
            shape,
            &got,
            &want,
            tol_f32(&want),
        ));
    }
    Ok(rows)
}

pub(crate) fn sigmoid_mul(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for (nr, nc, per_row) in [(5usize, 333usize, false), (7, 65, true)] {
        let x = rng.vec(nr * nc, -3.0, 3.0);
        let gate = rng.vec(if per_row { nr } else { nr * nc }, -6.0, 6.0);
        // x is read and written: poisoning it is not possible; a fresh copy per case instead.
        let (xb, gb) = (cx.input("x", &x)?, cx.input("gate", &gate)?);
        cx.run(&[], |r| {
            r.dispatch(
                SigmoidMul {
                    x: xb.all(),
                    gate: gb.all(),
                }
                .dispatch(nr, nc, per_row)?,
            )
        })?;
        let mut want = x.clone();
        vkllm_cpu::sigmoid_mul(&mut want, &gate, nr);
        let got = cx.read(&xb, nr * nc)?;
        let variant = if per_row { "per row" } else { "elementwise" };
        rows.push(row(
            "sigmoid_mul",
            variant,
            format!("{nr} x {nc}"),
            &got,
            &want,
            tol_f32(&want),
        ));
    }
    Ok(rows)
}

pub(crate) fn moe_route(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for (n, e, k, renorm) in [
        (37usize, 60usize, 6usize, true),
        (5, 8, 2, false),
        (3, 128, 8, true),
    ] {
        let logits = rng.vec(n * e, -4.0, 4.0);
        let lb = cx.input("logits", &logits)?;
        let (ids, w) = (cx.output("ids", n * k)?, cx.output("weights", n * k)?);
        cx.run(&[&ids, &w], |r| {
            r.dispatch(
                MoeRoute {
                    logits: lb.all(),
                    ids: ids.all(),
                    weights: w.all(),
                }
                .dispatch(n, e, k, renorm)?,
            )
        })?;
        let (mut want_ids, mut want_w) = (vec![0u32; n * k], vec![0.0; n * k]);
        vkllm_cpu::moe_route(&logits, e, k, renorm, &mut want_ids, &mut want_w);
        let got_ids: Vec<u32> = dev.read_vec(&ids, n * k)?;
        let got_w = cx.read(&w, n * k)?;
        let shape = format!("n {n} experts {e} top {k}");
        let variant = if renorm { "renormalised" } else { "softmax" };
        let as_f = |v: &[u32]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
        rows.push(row(
            "moe_route",
            format!("{variant} ids"),
            &shape,
            &as_f(&got_ids),
            &as_f(&want_ids),
            EXACT,
        ));
        let tol = Tol {
            max_abs: 1e-6,
            nmse: 1e-10,
        };
        rows.push(row(
            "moe_route",
            format!("{variant} weights"),
            &shape,
            &got_w,
            &want_w,
            tol,
        ));
    }
    Ok(rows)
}

pub(crate) fn moe_experts(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for (n, e, k, h, ff) in [
        (5usize, 7usize, 3usize, 70usize, 33usize),
        (1, 16, 4, 130, 96),
    ] {
        let x = rng.vec(n * h, -2.0, 2.0);
        let gate = rng.vec(e * ff * h, -0.3, 0.3);
        let up = rng.vec(e * ff * h, -0.3, 0.3);
        let down = rng.vec(e * h * ff, -0.3, 0.3);
        // Distinct experts per token, weights in (0, 1).
        let mut ids = Vec::with_capacity(n * k);
        for _ in 0..n {
            let mut picked: Vec<u32> = Vec::new();
            while picked.len() < k {
                let c = rng.below(e as u64) as u32;
                if !picked.contains(&c) {
                    picked.push(c);
                }
            }
            ids.extend(picked);
        }
        let w = rng.vec(n * k, 0.05, 1.0);
        let bufs = (
            cx.input("x", &x)?,
            cx.input("ids", &ids)?,
            cx.input("w", &w)?,
            cx.input("gate", &gate)?,
            cx.input("up", &up)?,
            cx.input("down", &down)?,
        );
        let (act, out) = (cx.output("act", n * k * ff)?, cx.output("out", n * h)?);
        let s = MoeShapeK {
            n,
            top_k: k,
            hidden: h,
            ff,
            n_experts: e,
        };
        cx.run(&[&act, &out], |r| {
            let ds = MoeExperts {
                x: bufs.0.all(),
                ids: bufs.1.all(),
                weights: bufs.2.all(),
                gate: bufs.3.all(),
                up: bufs.4.all(),
                down: bufs.5.all(),
                act: act.all(),
                out: out.all(),
            }
            .dispatch(&s)?;
            for d in ds {
                r.dispatch(d)?;
            }
            Ok(())
        })?;
        let mut want = vec![0.0; n * h];
        let cs = vkllm_cpu::MoeShape {
            n_experts: e,
            hidden: h,
            ff,
            top_k: k,
        };
        vkllm_cpu::moe_experts(&cs, &x, &gate, &up, &down, &ids, &w, &mut want);
        let got = cx.read(&out, n * h)?;
        let shape = format!("n {n} experts {e} top {k} H {h} F {ff}");
        rows.push(row(
            "moe_experts",
            "f32",
            shape,
            &got,
            &want,
            tol_f32(&want),
        ));
    }
    Ok(rows)
}
