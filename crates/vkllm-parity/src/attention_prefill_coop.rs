//! Parity cases: causal prefill attention on cooperative matrices
//! (`attention_prefill_coop.wgsl`) against the CPU attention of the f16-rounded q, k and v.
//!
//! The kernel rounds q, k and v to f16 (scores are then exact products summed in f32) and the
//! softmax probabilities to f16 before P V, while the row sums stay f32. With |v| <= 1 each
//! output is a weighted mean whose weights are off by at most 2^-11 relatively: 1e-3 absolute
//! bounds it with margin; the NMSE bound (1e-5) catches systematic errors far smaller.
//! On a device that does not run the kernel the case reports one "n/a" row, never a pass.

use vkllm_cpu::AttnParams;
use vkllm_kernels::attention::AttnShape;
use vkllm_kernels::attention_prefill_coop::AttnPrefillCoop;
use vkllm_kernels::kv_append::KvType;

use super::matmul_coop::not_applicable;
use super::{Ctx, KernelParityRow, Rng, Tol, pack16, row, to_f16};
use vkllm_vk::Device;
use vkllm_vk::Result;

const KERNEL: &str = "attn_prefill_coop";

const TOL: Tol = Tol {
    max_abs: 1e-3,
    nmse: 1e-5,
};

/// (n_q, n_kv, pos0, heads, kv heads, head dim, softcap, window, ring, kv type).
type Case = (
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    Option<f32>,
    Option<usize>,
    Option<usize>,
    KvType,
);

pub(crate) fn attention_prefill_coop(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if let Some(reason) = not_applicable(dev) {
        return Ok(vec![KernelParityRow::not_applicable(
            KERNEL,
            "f32/f16 kv",
            reason,
        )]);
    }
    let cx = Ctx { dev };
    let sg = dev.info().subgroup_size;
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    // Odd query counts (partial tiles of 32 and 64), chunks starting mid-cache, GQA groups of
    // 1..4, head dims 32..128, softcap, windows, a ring that wraps, both KV types.
    let cases: [Case; 7] = [
        (37, 37, 0, 4, 2, 64, None, None, None, KvType::F32),
        (37, 50, 13, 4, 2, 64, Some(30.0), Some(8), None, KvType::F16),
        (100, 161, 61, 16, 8, 128, None, None, None, KvType::F32),
        (129, 129, 0, 8, 2, 128, None, None, None, KvType::F16),
        (70, 70, 0, 6, 2, 96, None, Some(20), None, KvType::F32),
        (33, 33, 0, 3, 3, 32, None, None, None, KvType::F32),
        // Positions 200..264 in a ring of 96 rows with a window of 32.
        (
            64,
            264,
            200,
            4,
            1,
            64,
            None,
            Some(32),
            Some(96),
            KvType::F16,
        ),
    ];
    for (n_q, n_kv, pos0, n_heads, n_kv_heads, hd, softcap, window, ring, kv) in cases {
        let rows_kv = ring.unwrap_or(n_kv).min(n_kv);
        let qn = n_q * n_heads * hd;
        let kvn = rows_kv * n_kv_heads * hd;
        let (_, q) = to_f16(&rng.vec(qn, -2.0, 2.0));
        let (kh, k) = to_f16(&rng.vec(kvn, -2.0, 2.0));
        let (vh, v) = to_f16(&rng.vec(kvn, -1.0, 1.0));
        let (kb, vb) = match kv {
            KvType::F32 => (cx.input("k", &k)?, cx.input("v", &v)?),
            KvType::F16 => (cx.input("k", &pack16(&kh))?, cx.input("v", &pack16(&vh))?),
            KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
        };
        let positions: Vec<usize> = (pos0..pos0 + n_q).collect();
        let pos32: Vec<u32> = positions.iter().map(|&p| p as u32).collect();
        let scale = 1.0 / (hd as f32).sqrt();
        let p = AttnParams {
            n_heads,
            n_kv_heads,
            head_dim: hd,
            scale,
            softcap,
            window,
        };
        let mut want = vec![0.0; qn];
        let r = ring.unwrap_or(n_kv);
        vkllm_cpu::attention_ring(&q, &k, &v, n_q, n_kv, r, &positions, &p, &mut want);
        let shape = AttnShape {
            n_q,
            n_heads,
            n_kv_heads,
            head_dim: hd,
            n_kv,
            scale,
            softcap,
            window,
            kv,
            kv_v: kv,
            rot_k: false,
            kv_stride: 0,
            ring,
        };
        let (qb, pb) = (cx.input("q", &q)?, cx.input("q_pos", &pos32)?);
        let out = cx.output("out", qn)?;
        cx.run(&[&out], |rec| {
            rec.dispatch(
                AttnPrefillCoop {
                    q: qb.all(),
                    k: kb.all(),
                    v: vb.all(),
                    q_pos: pb.all(),
                    out: out.all(),
                }
                .dispatch(&shape, pos0, sg)?,
            )
        })?;
        let mut variant = kv.name().to_string();
        if let Some(s) = softcap {
            variant += &format!(" softcap {s}");
        }
        if let Some(w) = window {
            variant += &format!(" window {w}");
        }
        if let Some(r) = ring {
            variant += &format!(" ring {r}");
        }
        let label = format!("q {n_q}@{pos0} kv {n_kv} h {n_heads}/{n_kv_heads} d {hd}");
        let got = cx.read(&out, qn)?;
        rows.push(row(KERNEL, variant, label, &got, &want, TOL));
    }
    Ok(rows)
}
