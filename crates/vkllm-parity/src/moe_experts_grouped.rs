//! Parity case of the grouped MoE experts (`moe_experts_grouped.wgsl`, prompt prefill): tokens
//! grouped by expert, tiles of block-format expert rows against `vkllm_cpu::moe_experts` on
//! the same blocks dequantized. Outputs and every scratch buffer NaN-poisoned; experts with
//! more slots than one tile (32), row counts that end inside a 64-row tile, Q8_0 and a Q4_K
//! gate/up + Q6_K down layout.

use vkllm_kernels::WeightType;
use vkllm_kernels::moe_experts_grouped::MoeExpertsGrouped;
use vkllm_kernels::moe_experts_quant::MoeQuantShape;

use super::quant::{dequantize, weights};
use super::{Ctx, KernelParityRow, Rng, Tol, row};
use vkllm_vk::Device;
use vkllm_vk::Result;

fn max_abs(x: &[f32]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())))
}

pub(crate) fn moe_experts_grouped(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    let (q8, q4k, q6k) = (WeightType::Q8_0, WeightType::Q4_K, WeightType::Q6_K);
    // (tokens, experts, top-k, hidden, ff, gate/up type, down type)
    for (n, e, k, h, ff, gu, dn) in [
        (40usize, 9usize, 3usize, 96usize, 64usize, q8, q8),
        (70, 4, 2, 160, 96, q8, q8),
        (37, 6, 2, 512, 256, q4k, q6k),
        (16, 256, 8, 256, 256, q4k, q4k),
    ] {
        let x = rng.vec(n * h, -1.0, 1.0);
        let (gate_b, _) = weights(&mut rng, gu, e * ff, h, true)?;
        let (up_b, _) = weights(&mut rng, gu, e * ff, h, false)?;
        let (down_b, _) = weights(&mut rng, dn, e * h, ff, true)?;
        let gate = dequantize(gu, &gate_b, e * ff * h)?;
        let up = dequantize(gu, &up_b, e * ff * h)?;
        let down = dequantize(dn, &down_b, e * h * ff)?;
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
            cx.input("gate", &pad4(&gate_b))?,
            cx.input("up", &pad4(&up_b))?,
            cx.input("down", &pad4(&down_b))?,
        );
        let lw = MoeExpertsGrouped::<()>::list_words(n, e);
        let (act, y, lists, out) = (
            cx.output("act", n * k * ff)?,
            cx.output("y", n * k * h)?,
            cx.output("lists", lw)?,
            cx.output("out", n * h)?,
        );
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
        cx.run(&[&act, &y, &lists, &out], |r| {
            let ds = MoeExpertsGrouped {
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
        let variant = format!("{} gate/up, {} down", gu.name(), dn.name());
        // Two chained f32 dot products of up to 512 terms (GPU order vs the reference's).
        let tol = Tol {
            max_abs: 1e-5 * max_abs(&want).max(1.0),
            nmse: 1e-10,
        };
        rows.push(row("moe_experts_grouped", variant, shape, &got, &want, tol));
    }
    Ok(rows)
}

/// The bytes padded to whole 32-bit words (the kernel reads the weights as u32).
fn pad4(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    v.resize(b.len().div_ceil(4) * 4, 0);
    v
}
