//! Parity cases of the MoE experts on int8 dot products (`matvec_q8a.wgsl`'s `MOE` modes,
//! vkllm-kernels `moe_experts_q8a`) against vkllm-cpu's `moe_gate_up_q8act` /
//! `moe_down_q8act` on the same blocks. Each launch is checked on its own: gate/up against the
//! oracle on x, down against the oracle on the activations the GPU wrote (so a code the GPU
//! rounds the other way in gate/up cannot carry into down's check). Tolerances follow
//! `matvec_q8a`'s (`matvec_fused::q8a_reference`): per dot product `16 eps sum_u d_u sum_i
//! (|w_i| + off_u) |q_i|` plus `d_u |w_i|` for codes near a rounding tie. Outputs NaN-poisoned
//! (down's, when it accumulates, prefilled with random values); odd token counts, top-k and block
//! counts, mixed gate/up and down formats; fused cases normalize x in gate/up (RMSNorm weights,
//! offsets 0 and 1) and add down's result into the prefilled output. Grouped cases run the
//! per-expert launches (`MoeExpertsGrouped::dispatch_q8a`: slot lists, then each expert's slots
//! a few columns at a time) against the same oracles: several passes per expert, a partial last
//! pass, experts no token chose.

use vkllm_cpu::MoeShape;
use vkllm_cpu::quant::{
    ActNormQ8, ActQ8, QuantType, matvec_q8act, moe_down_q8act, moe_gate_up_q8act, quantize_act_q8,
    unit_offsets,
};
use vkllm_kernels::WeightType;
use vkllm_kernels::matvec_fused::NormPrologue;
use vkllm_kernels::moe_experts_grouped::{MoeExpertsGrouped, Q8gLaunch};
use vkllm_kernels::moe_experts_q8a::{MoeExpertsQ8a, MoeFusions};
use vkllm_kernels::moe_experts_quant::MoeQuantShape;
use vkllm_vk::{Device, Result};

use super::quant::{cpu_err, dequantize, quant_type, weights};
use super::{Ctx, KernelParityRow, Rng, Tol, row};

const NAME: &str = "moe_experts_q8a";

/// Per-row tolerances of `rows` rows (stacked from row `r0`) of `bytes` (`cols` wide) dotted
/// with `a`: (tolerance, tie part) of each.
fn dot_tols(
    qt: QuantType,
    bytes: &[u8],
    vals: &[f32],
    r0: usize,
    rows: usize,
    cols: usize,
    a: &ActQ8,
) -> Result<Vec<(f64, f64)>> {
    let rb = qt.row_bytes(cols).map_err(cpu_err)?;
    let feps = f32::EPSILON as f64;
    (r0..r0 + rows)
        .map(|r| {
            let offs = unit_offsets(qt, &bytes[r * rb..][..rb], cols).map_err(cpu_err)?;
            let (mut s, mut ties) = (0f64, 0f64);
            for (i, &w) in vals[r * cols..][..cols].iter().enumerate() {
                let du = a.d[i / 32] as f64;
                let w = (w as f64).abs();
                s += du * (w + offs[i / 32] as f64) * (a.q[i] as f64).abs();
                if a.near_tie[i] {
                    ties += du * w;
                }
            }
            Ok((16.0 * feps * s + ties, ties))
        })
        .collect()
}

fn max_abs(x: &[f32]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())))
}

/// The NMSE bound: 1e-7 for rounding plus one tie flip of `tie` in every output.
fn nmse_with_ties(want: &[f32], tie: f64) -> f64 {
    let energy: f64 = want.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if tie > 0.0 && energy > 0.0 {
        1e-7 + want.len() as f64 * tie * tie / energy
    } else {
        1e-7
    }
}

/// The words padded to a multiple of 4 (the kernel reads routing entries as 16-byte words).
fn pad16<T: Copy + Default>(v: &[T]) -> Vec<T> {
    let mut o = v.to_vec();
    o.resize(v.len().next_multiple_of(4), T::default());
    o
}

pub(crate) fn moe_experts_q8a(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if !dev.int8_dot()
        || dev.info().min_subgroup_size < 4
        || (dev.info().limits.max_shared_memory as usize) < vkllm_kernels::matvec_q8a::SHARED_BYTES
    {
        return Ok(vec![KernelParityRow::not_applicable(
            NAME,
            "all",
            "device lacks integer dot products (Vulkan 1.3), subgroups of 4+ lanes or 24 KiB of \
             shared memory",
        )]);
    }
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut out_rows = Vec::new();
    let (q8, q40, q4k, q6k) = (
        WeightType::Q8_0,
        WeightType::Q4_0,
        WeightType::Q4_K,
        WeightType::Q6_K,
    );
    // (tokens, experts, top-k, hidden, ff, gate/up type, down type, fused: norm offset,
    // grouped: slots per pass or 0 for the per-token launches, and workgroups per expert)
    for (n, e, k, h, ff, gu, dn, fused, cols, wpe) in [
        (
            1usize, 6usize, 2usize, 512usize, 256usize, q4k, q4k, None, 0usize, 0u32,
        ),
        (3, 7, 3, 96, 64, q8, q8, None, 0, 0),
        (2, 5, 3, 256, 512, q4k, q6k, None, 0, 0),
        (5, 9, 4, 160, 96, q40, q8, None, 0, 0),
        (1, 4, 1, 768, 256, q6k, q4k, None, 0, 0),
        (1, 9, 3, 512, 256, q4k, q6k, Some(0.0f32), 0, 0),
        (3, 7, 3, 96, 64, q8, q8, Some(1.0), 0, 0),
        (13, 5, 3, 256, 512, q4k, q6k, None, 4, 0),
        (9, 6, 2, 96, 64, q8, q8, None, 3, 0),
        (20, 4, 4, 512, 256, q4k, q4k, None, 8, 0),
        (2, 9, 2, 160, 96, q40, q8, None, 1, 0),
        (16, 40, 8, 256, 256, q6k, q4k, None, 4, 1),
        (6, 7, 3, 96, 64, q8, q8, Some(1.0), 4, 0),
        (10, 9, 3, 512, 256, q4k, q6k, Some(0.0), 3, 1),
    ] {
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
        let cs = MoeShape {
            n_experts: e,
            hidden: h,
            ff,
            top_k: k,
        };
        let (qg, qd) = (quant_type(gu)?, quant_type(dn)?);
        let x = rng.vec(n * h, -1.0, 1.0);
        let (gate_b, _) = weights(&mut rng, gu, e * ff, h, true)?;
        let (up_b, _) = weights(&mut rng, gu, e * ff, h, false)?;
        let (down_b, _) = weights(&mut rng, dn, e * h, ff, true)?;
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
        let (eps, nw) = (1e-6f32, rng.vec(h, -0.5, 0.5));
        let y0 = rng.vec(n * h, -1.0, 1.0);
        let nwb = cx.input("norm_w", &nw)?;
        let bufs = (
            cx.input("x", &x)?,
            cx.input("ids", &pad16(&ids))?,
            cx.input("w", &pad16(&w))?,
            cx.input("gate", &gate_b)?,
            cx.input("up", &up_b)?,
            cx.input("down", &down_b)?,
        );
        let act = cx.output("act", n * k * ff)?;
        let (y_rows, lists) = (
            cx.output("y", n * k * h)?,
            cx.output("lists", MoeExpertsGrouped::<()>::list_words(n, e))?,
        );
        let out = match fused {
            Some(_) => cx.input("out", &y0)?,
            None => cx.output("out", n * h)?,
        };
        let poison: Vec<&vkllm_vk::Buffer> = match fused {
            Some(_) => vec![&act],
            None => vec![&act, &out, &y_rows],
        };
        cx.run(&poison, |r| {
            let f = MoeFusions {
                norm: fused.map(|offset| (nwb.all(), NormPrologue { eps, offset })),
                accumulate: fused.is_some(),
            };
            if cols > 0 {
                let ds = MoeExpertsGrouped {
                    x: bufs.0.all(),
                    ids: bufs.1.all(),
                    weights: bufs.2.all(),
                    gate: bufs.3.all(),
                    up: bufs.4.all(),
                    down: bufs.5.all(),
                    act: act.all(),
                    y: y_rows.all(),
                    lists: lists.all(),
                    out: out.all(),
                }
                .dispatch_q8a_fused(
                    &s,
                    Q8gLaunch {
                        columns: cols,
                        per_expert: wpe,
                    },
                    f,
                )?;
                for d in ds {
                    r.dispatch(d)?;
                }
                return Ok(());
            }
            let ds = MoeExpertsQ8a {
                x: bufs.0.all(),
                ids: bufs.1.all(),
                weights: bufs.2.all(),
                gate: bufs.3.all(),
                up: bufs.4.all(),
                down: bufs.5.all(),
                act: act.all(),
                out: out.all(),
            }
            .dispatch_fused(&s, f)?;
            for d in ds {
                r.dispatch(d)?;
            }
            Ok(())
        })?;
        let got_act = cx.read(&act, n * k * ff)?;
        let got = cx.read(&out, n * h)?;
        let shape = format!("n {n} experts {e} top {k} H {h} F {ff}");
        let variant = |stage: &str| {
            let g = match cols {
                0 => String::new(),
                c if wpe > 0 => format!(" grouped x{c} {wpe}/expert"),
                c => format!(" grouped x{c}"),
            };
            match fused {
                Some(o) => format!("{stage} {}/{}{g} norm+{o} acc", gu.name(), dn.name()),
                None => format!("{stage} {}/{}{g}", gu.name(), dn.name()),
            }
        };
        let norm = fused.map(|offset| ActNormQ8 {
            weight: &nw,
            offset,
            eps,
        });

        // gate/up: the oracle on x, the gated tolerance of matvec_q8a's parity.
        let mut want_act = vec![0f32; n * k * ff];
        moe_gate_up_q8act(&cs, qg, &gate_b, &up_b, &x, norm, &ids, &mut want_act)
            .map_err(cpu_err)?;
        let (gv, uv) = (
            dequantize(gu, &gate_b, e * ff * h)?,
            dequantize(gu, &up_b, e * ff * h)?,
        );
        let (mut dot_tol, mut tie, mut max_g, mut max_u) = (0f64, 0f64, 0f64, 0f64);
        let mut dots = vec![0f32; ff];
        // The norm's inv_rms: its f32 error scales both products (matvec_q8a's model).
        let mut inv_err = 0f64;
        for t in 0..n {
            let xt = &x[t * h..][..h];
            let (xq, inv) = match fused {
                Some(o) => {
                    let ss: f64 = xt.iter().map(|&v| (v as f64) * (v as f64)).sum();
                    let inv = 1.0 / (ss / h as f64 + eps as f64).sqrt();
                    let v: Vec<f32> = xt.iter().zip(&nw).map(|(&a, &g)| a * (o + g)).collect();
                    (quantize_act_q8(&v), inv)
                }
                None => (quantize_act_q8(xt), 1.0),
            };
            for i in 0..k {
                let ex = ids[t * k + i] as usize;
                for (bytes, vals, is_up) in [(&gate_b, &gv, false), (&up_b, &uv, true)] {
                    let rb = qg.row_bytes(h).map_err(cpu_err)?;
                    let m = &bytes[ex * ff * rb..][..ff * rb];
                    matvec_q8act(qg, m, ff, h, &xq, &mut dots).map_err(cpu_err)?;
                    dots.iter_mut().for_each(|d| *d = (*d as f64 * inv) as f32);
                    let mx = if is_up {
                        max_abs(&dots)
                    } else {
                        dots.iter()
                            .fold(0f64, |a, &g| a.max(f64::from(vkllm_cpu::silu(g).abs())))
                    };
                    if is_up {
                        max_u = max_u.max(mx);
                    } else {
                        max_g = max_g.max(mx);
                    }
                    for (tl, ti) in dot_tols(qg, bytes, vals, ex * ff, ff, h, &xq)? {
                        dot_tol = dot_tol.max(tl * inv + 2.0 * f32::EPSILON as f64 * mx);
                        tie = tie.max(ti * inv);
                    }
                    if fused.is_some() {
                        inv_err = inv_err.max(super::matvec_fused::inv_rms_rel(h, 256) * mx);
                    }
                }
            }
        }
        let dot_tol = dot_tol + inv_err;
        let tol = Tol {
            max_abs: 1.13 * dot_tol * max_u
                + dot_tol * max_g
                + 1.13 * dot_tol * dot_tol
                + 1e-5 * max_abs(&want_act),
            nmse: nmse_with_ties(
                &want_act,
                1.13 * tie * max_u + tie * max_g + 1.13 * tie * tie,
            ),
        };
        out_rows.push(row(
            NAME,
            variant("gate_up"),
            shape.clone(),
            &got_act,
            &want_act,
            tol,
        ));

        // down: the oracle on the GPU's activations, tolerance summed over the weighted slots.
        let mut want = vec![0f32; n * h];
        moe_down_q8act(&cs, qd, &down_b, &got_act, &ids, &w, &mut want).map_err(cpu_err)?;
        if fused.is_some() {
            want.iter_mut().zip(&y0).for_each(|(v, &a)| *v += a);
        }
        let dv = dequantize(dn, &down_b, e * h * ff)?;
        let (mut tol_out, mut tie_out) = (0f64, 0f64);
        for t in 0..n {
            let mut tl = vec![0f64; h];
            let mut tt = vec![0f64; h];
            for i in 0..k {
                let ex = ids[t * k + i] as usize;
                let aq = quantize_act_q8(&got_act[(t * k + i) * ff..][..ff]);
                let wi = f64::from(w[t * k + i]);
                for (c, (a, b)) in dot_tols(qd, &down_b, &dv, ex * h, h, ff, &aq)?
                    .into_iter()
                    .enumerate()
                {
                    tl[c] += wi * a;
                    tt[c] += wi * b;
                }
            }
            for c in 0..h {
                let y = f64::from(want[t * h + c].abs()) + f64::from(y0[t * h + c].abs());
                tol_out = tol_out.max(tl[c] + 2.0 * f32::EPSILON as f64 * (k as f64 + 1.0) * y);
                tie_out = tie_out.max(tt[c]);
            }
        }
        let tol = Tol {
            max_abs: tol_out + 1e-6 * max_abs(&want),
            nmse: nmse_with_ties(&want, tie_out),
        };
        out_rows.push(row(NAME, variant("down"), shape, &got, &want, tol));
    }
    Ok(out_rows)
}
