//! Parity case of the MoE experts over quantized expert weights (`moe_experts_quant.wgsl`):
//! the stacked expert matrices as llama.cpp blocks (random blocks or `quantize_row` output, see
//! `quant`), against `vkllm_cpu::moe_experts` on the same blocks dequantized by
//! `vkllm_cpu::quant::dequantize_row`. Outputs NaN-poisoned; Q8_0 rows of 3 blocks, Q4_K rows
//! of 2 super-blocks, a mixed Q4_K gate/up + Q6_K down file layout, and one decode row.

use vkllm_kernels::WeightType;
use vkllm_kernels::moe_experts_quant::{MoeExpertsQuant, MoeQuantShape};

use super::quant::{dequantize, weights};
use super::{Ctx, KernelParityRow, Rng, Tol, row};
use vkllm_vk::Device;
use vkllm_vk::Result;

fn max_abs(x: &[f32]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())))
}

/// One parity case's inputs: activations, routing, the stacked expert blocks (gate, up, down)
/// and the CPU reference output on the same blocks dequantized.
pub(crate) struct MoeCase {
    pub x: Vec<f32>,
    pub ids: Vec<u32>,
    pub w: Vec<f32>,
    pub gate: Vec<u8>,
    pub up: Vec<u8>,
    pub down: Vec<u8>,
    /// The blocks dequantized (`[e * ff, h]`, `[e * ff, h]`, `[e * h, ff]`).
    pub dequant: [Vec<f32>; 3],
    pub want: Vec<f32>,
    pub tol: Tol,
}

/// Random inputs for `n` tokens routed to `k` distinct of `e` experts (hidden `h`, expert
/// width `ff`; gate/up in `gu`, down in `dn`) and `vkllm_cpu::moe_experts` on them. The up
/// blocks are random bytes (any scale) unless `f16_range`, which quantizes all three from
/// values in [-1, 1] (what the f16 inputs of the cooperative-matrix kernels can hold).
#[allow(clippy::too_many_arguments)]
pub(crate) fn moe_case(
    rng: &mut Rng,
    n: usize,
    e: usize,
    k: usize,
    h: usize,
    ff: usize,
    gu: WeightType,
    dn: WeightType,
    f16_range: bool,
) -> Result<MoeCase> {
    let x = rng.vec(n * h, -1.0, 1.0);
    let (gate_b, _) = weights(rng, gu, e * ff, h, true)?;
    let (up_b, _) = weights(rng, gu, e * ff, h, f16_range)?;
    let (down_b, _) = weights(rng, dn, e * h, ff, true)?;
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
    let mut want = vec![0.0; n * h];
    let cs = vkllm_cpu::MoeShape {
        n_experts: e,
        hidden: h,
        ff,
        top_k: k,
    };
    vkllm_cpu::moe_experts(&cs, &x, &gate, &up, &down, &ids, &w, &mut want);
    // Two chained f32 dot products of up to 512 terms (GPU order vs the reference's).
    let tol = Tol {
        max_abs: 1e-5 * max_abs(&want).max(1.0),
        nmse: 1e-10,
    };
    Ok(MoeCase {
        x,
        ids,
        w,
        gate: pad4(&gate_b),
        up: pad4(&up_b),
        down: pad4(&down_b),
        dequant: [gate, up, down],
        want,
        tol,
    })
}

pub(crate) fn moe_experts_quant(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    let (q8, q4k, q6k) = (WeightType::Q8_0, WeightType::Q4_K, WeightType::Q6_K);
    // (tokens, experts, top-k, hidden, ff, gate/up type, down type)
    for (n, e, k, h, ff, gu, dn) in [
        (5usize, 7usize, 3usize, 96usize, 64usize, q8, q8),
        (3, 6, 2, 512, 256, q4k, q4k),
        (1, 5, 2, 256, 256, q4k, q6k),
    ] {
        let c = moe_case(&mut rng, n, e, k, h, ff, gu, dn, false)?;
        let bufs = (
            cx.input("x", &c.x)?,
            cx.input("ids", &c.ids)?,
            cx.input("w", &c.w)?,
            cx.input("gate", &c.gate)?,
            cx.input("up", &c.up)?,
            cx.input("down", &c.down)?,
        );
        let (act, out) = (cx.output("act", n * k * ff)?, cx.output("out", n * h)?);
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
        // Lanes per output row: 0 is the reference launch; 1 and 128 are the extremes (128 rows
        // per workgroup, a partial last one; teams wider than any subgroup).
        for lanes in [0u32, 1, 16, 128] {
            cx.run(&[&act, &out], |r| {
                let ds = MoeExpertsQuant {
                    x: bufs.0.all(),
                    ids: bufs.1.all(),
                    weights: bufs.2.all(),
                    gate: bufs.3.all(),
                    up: bufs.4.all(),
                    down: bufs.5.all(),
                    act: act.all(),
                    out: out.all(),
                }
                .dispatch_lanes(&s, lanes)?;
                for d in ds {
                    r.dispatch(d)?;
                }
                Ok(())
            })?;
            let got = cx.read(&out, n * h)?;
            let shape = format!("n {n} experts {e} top {k} H {h} F {ff} lanes {lanes}");
            let variant = format!("{} gate/up, {} down", gu.name(), dn.name());
            rows.push(row(
                "moe_experts_quant",
                variant,
                shape,
                &got,
                &c.want,
                c.tol,
            ));
        }
    }
    Ok(rows)
}

/// The bytes padded to whole 32-bit words (the kernel reads the weights as u32).
fn pad4(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    v.resize(b.len().div_ceil(4) * 4, 0);
    v
}
