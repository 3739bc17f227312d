//! Parity case of the grouped MoE experts (`moe_experts_grouped.wgsl`, prompt prefill): tokens
//! grouped by expert, tiles of block-format expert rows against `vkllm_cpu::moe_experts` on
//! the same blocks dequantized; and the same products on cooperative matrices
//! (`moe_experts_coop.wgsl`) against `vkllm_cpu::moe_experts_f16` on the f16-rounded blocks.
//! Outputs and every scratch buffer NaN-poisoned; experts with more slots than one tile (32),
//! row counts that end inside a tile, Q8_0 and a Q4_K gate/up + Q6_K down layout.

use vkllm_kernels::WeightType;
use vkllm_kernels::moe_experts_grouped::MoeExpertsGrouped;
use vkllm_kernels::moe_experts_quant::MoeQuantShape;

use super::matmul_coop::{f16_round, not_applicable};
use super::moe_experts_quant::{MoeCase, moe_case};
use super::{Ctx, KernelParityRow, Rng, Tol, row};
use vkllm_vk::Device;
use vkllm_vk::Result;

pub(crate) fn moe_experts_grouped(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    let (q8, q4k, q6k) = (WeightType::Q8_0, WeightType::Q4_K, WeightType::Q6_K);
    let coop_na = not_applicable(dev);
    // (tokens, experts, top-k, hidden, ff, gate/up type, down type)
    for (n, e, k, h, ff, gu, dn) in [
        (40usize, 9usize, 3usize, 96usize, 64usize, q8, q8),
        (70, 4, 2, 160, 96, q8, q8),
        (37, 6, 2, 512, 256, q4k, q6k),
        (16, 256, 8, 256, 256, q4k, q4k),
        (100, 3, 2, 256, 320, q8, q8),
    ] {
        let c = moe_case(&mut rng, n, e, k, h, ff, gu, dn, false)?;
        let s = MoeQuantShape {
            n,
            top_k: k,
            hidden: h,
            ff,
            n_experts: e,
            gate: gu,
            up: gu,
            down: dn,
        };
        let shape = format!("n {n} experts {e} top {k} H {h} F {ff}");
        let variant = format!("{} gate/up, {} down", gu.name(), dn.name());
        let got = run(&cx, &c, &s, None)?;
        rows.push(row(
            "moe_experts_grouped",
            variant.clone(),
            shape.clone(),
            &got,
            &c.want,
            c.tol,
        ));
        let label = format!("{variant}, cooperative matrices");
        if let Some(why) = &coop_na {
            rows.push(KernelParityRow::not_applicable(
                "moe_experts_grouped",
                format!("{label}, {shape}"),
                why.clone(),
            ));
            continue;
        }
        let c = moe_case(&mut rng, n, e, k, h, ff, gu, dn, true)?;
        let (want, tol) = coop_reference(&c, &s);
        let got = run(&cx, &c, &s, Some(dev.info().subgroup_size))?;
        rows.push(row("moe_experts_grouped", label, shape, &got, &want, tol));
    }
    Ok(rows)
}

/// The five dispatches on NaN-poisoned scratch and output (the cooperative-matrix products
/// with `Some(subgroup size)`); returns the output.
fn run(cx: &Ctx, c: &MoeCase, s: &MoeQuantShape, coop: Option<u32>) -> Result<Vec<f32>> {
    let (n, k, h, ff, e) = (s.n, s.top_k, s.hidden, s.ff, s.n_experts);
    let bufs = (
        cx.input("x", &c.x)?,
        cx.input("ids", &c.ids)?,
        cx.input("w", &c.w)?,
        cx.input("gate", &c.gate)?,
        cx.input("up", &c.up)?,
        cx.input("down", &c.down)?,
    );
    let lw = MoeExpertsGrouped::<()>::list_words(n, e);
    let (act, y, lists, out) = (
        cx.output("act", n * k * ff)?,
        cx.output("y", n * k * h)?,
        cx.output("lists", lw)?,
        cx.output("out", n * h)?,
    );
    cx.run(&[&act, &y, &lists, &out], |r| {
        let g = MoeExpertsGrouped {
            x: bufs.0.all(),
            ids: bufs.1.all(),
            weights: bufs.2.all(),
            gate: bufs.3.all(),
            up: bufs.4.all(),
            down: bufs.5.all(),
            act: act.all(),
            y: y.all(),
            lists: lists.all(),
            out: out.all(),
        };
        let ds = match coop {
            Some(sg) => g.dispatch_coop(s, sg)?,
            None => g.dispatch(s)?,
        };
        for d in ds {
            r.dispatch(d)?;
        }
        Ok(())
    })?;
    cx.read(&out, n * h)
}

/// `vkllm_cpu::moe_experts_f16` on the f16-rounded blocks, and its tolerance: the f32 sums'
/// budget of the dense cooperative-matrix kernel (32 epsilons of the sums of |terms|) plus one
/// f16 rounding step (2^-11 relative) of every activation, which the GPU's f32 gate and up
/// sums may round the other way than the reference's f64 ones.
fn coop_reference(c: &MoeCase, s: &MoeQuantShape) -> (Vec<f32>, Tol) {
    let (n, k, h, ff) = (s.n, s.top_k, s.hidden, s.ff);
    let [gate, up, down] = c.dequant.each_ref().map(|v| f16_round(v));
    let cs = vkllm_cpu::MoeShape {
        n_experts: s.n_experts,
        hidden: h,
        ff,
        top_k: k,
    };
    let mut want = vec![0.0; n * h];
    vkllm_cpu::moe_experts_f16(&cs, &c.x, &gate, &up, &down, &c.ids, &c.w, &mut want);
    let x = f16_round(&c.x);
    let dot = |m: &[f32], v: &[f32]| -> (f64, f64) {
        m.iter().zip(v).fold((0.0, 0.0), |(s, a), (&p, &q)| {
            let t = f64::from(p) * f64::from(q);
            (s + t, a + t.abs())
        })
    };
    let (mut sums, mut acts) = (0f64, 0f64);
    for t in 0..n {
        let xr = &x[t * h..(t + 1) * h];
        let mut out_sum = vec![0f64; h];
        let mut out_act = vec![0f64; h];
        for i in 0..k {
            let ex = c.ids[t * k + i] as usize;
            let wt = f64::from(c.w[t * k + i]);
            let mut a = vec![0f64; ff];
            for (j, aj) in a.iter_mut().enumerate() {
                let row = (ex * ff + j) * h;
                let (g, ga) = dot(&gate[row..row + h], xr);
                let (u, ua) = dot(&up[row..row + h], xr);
                *aj = g / (1.0 + (-g).exp()) * u;
                sums = sums.max(ga).max(ua);
            }
            for c_ in 0..h {
                let row = (ex * h + c_) * ff;
                let (mut sa, mut aa) = (0f64, 0f64);
                for (j, &aj) in a.iter().enumerate() {
                    let d = f64::from(down[row + j]).abs();
                    sa += d * aj.abs();
                    aa += d * aj.abs() * 2f64.powi(-11);
                }
                out_sum[c_] += wt * sa;
                out_act[c_] += wt * aa;
            }
        }
        for c_ in 0..h {
            sums = sums.max(out_sum[c_]);
            acts = acts.max(out_act[c_]);
        }
    }
    let tol = Tol {
        max_abs: 32.0 * f64::from(f32::EPSILON) * sums + acts,
        nmse: 1e-6,
    };
    (want, tol)
}
