//! Parity cases of the stateless hybrid (Gated DeltaNet) and MoE kernels: gated RMSNorm,
//! sigmoid gate, MoE routing and MoE experts (the recurrent ones are in `recurrent`). Sizes are
//! odd and not multiples of the workgroup sizes.

use vkllm_kernels::gated_rmsnorm::GatedRmsNorm;
use vkllm_kernels::moe_experts::{MoeExperts, MoeShape as MoeShapeK};
use vkllm_kernels::moe_route::MoeRoute;
use vkllm_kernels::sigmoid_mul::SigmoidMul;

use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, row};
use vkllm_vk::Device;
use vkllm_vk::Result;

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
    // Qwen3.6-35B-A3B routes 8 of 256 experts and a shared one, Qwen3-30B-A3B 8 of 128; 1000
    // fills every register of the shader's invocations; the 77-expert rows' logits all tie
    // (ids 0, 1, ...).
    for (n, e, k, renorm, shared) in [
        (37usize, 60usize, 6usize, true, false),
        (5, 8, 2, false, false),
        (3, 128, 8, true, false),
        (1, 256, 8, true, false),
        (1, 256, 8, true, true),
        (19, 256, 8, false, false),
        (7, 256, 8, false, true),
        (4, 1000, 32, true, false),
        (2, 77, 5, true, false),
        (3, 77, 5, true, true),
    ] {
        let (ew, kk) = (e + shared as usize, k + shared as usize);
        let mut logits = rng.vec(n * ew, -4.0, 4.0);
        if e == 77 {
            logits.fill(0.5);
        }
        let lb = cx.input("logits", &logits)?;
        let (ids, w) = (cx.output("ids", n * kk)?, cx.output("weights", n * kk)?);
        cx.run(&[&ids, &w], |r| {
            r.dispatch(
                MoeRoute {
                    logits: lb.all(),
                    ids: ids.all(),
                    weights: w.all(),
                }
                .dispatch_shared(n, e, k, renorm, shared)?,
            )
        })?;
        let (mut want_ids, mut want_w) = (vec![0u32; n * kk], vec![0.0; n * kk]);
        if shared {
            vkllm_cpu::moe_route_shared(&logits, e, k, renorm, &mut want_ids, &mut want_w);
        } else {
            vkllm_cpu::moe_route(&logits, e, k, renorm, &mut want_ids, &mut want_w);
        }
        let got_ids: Vec<u32> = dev.read_vec(&ids, n * kk)?;
        let got_w = cx.read(&w, n * kk)?;
        let shape = format!(
            "n {n} experts {e} top {k}{}",
            if shared { " + shared" } else { "" }
        );
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
