//! Parity case of the grouped MoE experts (`moe_experts_grouped.wgsl`, prompt prefill): tokens
//! grouped by expert, tiles of block-format expert rows against `vkllm_cpu::moe_experts` on
//! the same blocks dequantized. Outputs and every scratch buffer NaN-poisoned; experts with
//! more slots than one tile (32), row counts that end inside a 64-row tile, Q8_0 and a Q4_K
//! gate/up + Q6_K down layout.

use vkllm_kernels::WeightType;
use vkllm_kernels::moe_experts_grouped::MoeExpertsGrouped;
use vkllm_kernels::moe_experts_quant::MoeQuantShape;

use super::moe_experts_quant::moe_case;
use super::{Ctx, KernelParityRow, Rng, row};
use vkllm_vk::Device;
use vkllm_vk::Result;

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
        let c = moe_case(&mut rng, n, e, k, h, ff, gu, dn)?;
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
        let got = cx.read(&out, n * h)?;
        let shape = format!("n {n} experts {e} top {k} H {h} F {ff}");
        let variant = format!("{} gate/up, {} down", gu.name(), dn.name());
        rows.push(row(
            "moe_experts_grouped",
            variant,
            shape,
            &got,
            &c.want,
            c.tol,
        ));
    }
    Ok(rows)
}
