//! Parity cases: `quantize_act_q8.wgsl` (activation columns to int8 per 32 elements, once per
//! product) against vkllm-cpu's `quantize_act_q8` of `x` or `x * (offset + norm_w)`: odd unit
//! counts (a partial last chunk), one and several columns, the outputs poisoned first.
//! Codes and sums are exact except where the oracle marks a code near a rounding tie (the GPU's
//! `127 / amax` may round it the other way: that code may differ by one and its unit's sum with
//! it); scales are exact (the same f32 product); the chunks' sums of squares are within an f32
//! summation bound of the f64 sum.

use vkllm_cpu::quant::quantize_act_q8;
use vkllm_kernels::quantize_act_q8::{ActNorm, ActQ8Layout, QuantizeActQ8, UNITS_PER_CHUNK};

use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, row};
use vkllm_vk::Device;
use vkllm_vk::Result;

pub(crate) fn quantize_act_q8_case(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if dev.info().min_subgroup_size < 4 {
        return Ok(vec![KernelParityRow::not_applicable(
            "quantize_act_q8",
            "all",
            "subgroups of fewer than 4 lanes",
        )]);
    }
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    // (units per column, columns, norm offset)
    for (units, n, norm) in [
        (1, 1, None),
        (37, 3, Some(0.0)),
        (97, 5, None),
        (32, 2, Some(1.0)),
        (130, 1, Some(0.0)),
    ] {
        let cols = 32 * units;
        let l = ActQ8Layout { cols, n };
        // Units of mixed magnitude, some all zero (amax 0: codes and scale 0).
        let mut x = rng.vec(n * cols, -3.0, 3.0);
        for (u, unit) in x.chunks_mut(32).enumerate() {
            match u % 7 {
                3 => unit.iter_mut().for_each(|v| *v *= 1e-3),
                5 => unit.iter_mut().for_each(|v| *v = 0.0),
                _ => {}
            }
        }
        let nw = rng.vec(cols, -1.5, 1.5);
        let xb = cx.input("x", &x)?;
        let nwb = cx.input("norm_w", &nw)?;
        let q = cx.output("q", l.code_bytes().div_ceil(4) as usize)?;
        let m = cx.output("meta", (l.meta_bytes() / 4) as usize)?;
        cx.run(&[&q, &m], |r| {
            r.dispatch(
                QuantizeActQ8 {
                    x: xb.all(),
                    norm: norm.map(|offset| ActNorm {
                        norm_w: nwb.all(),
                        offset,
                    }),
                    q: q.all(),
                    meta: m.all(),
                }
                .dispatch(l)?,
            )
        })?;
        let qw = dev.read_vec::<u32>(&q, l.code_bytes().div_ceil(4) as usize)?;
        let mw = dev.read_vec::<u32>(&m, (l.meta_bytes() / 4) as usize)?;
        // Sums of squares: eight terms per lane, a subgroup tree, up to 32 subgroup partials.
        let c = compare(
            &qw,
            &mw,
            l,
            &x,
            norm.map(|o| (nw.as_slice(), o)),
            8.0 + 5.0 + 32.0,
        );
        let shape = format!("n {n}, {cols} cols");
        let v = |what: &str| {
            format!(
                "{what}{}",
                norm.map_or(String::new(), |o| format!(" norm+{o}"))
            )
        };
        out.push(row(
            "quantize_act_q8",
            v("codes"),
            &shape,
            &c.q.0,
            &c.q.1,
            EXACT,
        ));
        out.push(row(
            "quantize_act_q8",
            v("scales"),
            &shape,
            &c.d.0,
            &c.d.1,
            EXACT,
        ));
        out.push(row(
            "quantize_act_q8",
            v("sums"),
            &shape,
            &c.s.0,
            &c.s.1,
            EXACT,
        ));
        if norm.is_some() {
            let tol = Tol {
                max_abs: c.ss_tol,
                nmse: 1e-12,
            };
            out.push(row(
                "quantize_act_q8",
                v("sum sq"),
                &shape,
                &c.ss.0,
                &c.ss.1,
                tol,
            ));
        }
    }
    Ok(out)
}

/// (got, want) pairs of one quantization's codes, scales, sums and (with a norm) chunk sums
/// of squares, and the latter's tolerance.
pub(crate) struct Compared {
    pub q: (Vec<f32>, Vec<f32>),
    pub d: (Vec<f32>, Vec<f32>),
    pub s: (Vec<f32>, Vec<f32>),
    pub ss: (Vec<f32>, Vec<f32>),
    pub ss_tol: f64,
}

/// The GPU's codes `qw` and metadata `mw` (layout `l`) against vkllm-cpu's `quantize_act_q8`
/// of each column of `x` (times `offset + norm_w` with `norm`). `ss_terms`: the rounding steps
/// of the GPU's chunk sums of squares (the f64 reference's rounding is added).
pub(crate) fn compare(
    qw: &[u32],
    mw: &[u32],
    l: ActQ8Layout,
    x: &[f32],
    norm: Option<(&[f32], f32)>,
    ss_terms: f64,
) -> Compared {
    let (n, cols) = (l.n, l.cols);
    let codes: Vec<i8> = qw
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .map(|b| b as i8)
        .collect();
    let (uc, nch) = (l.units(), l.chunks());
    let ms = 2 * uc + nch;
    let (mut got_q, mut want_q) = (Vec::new(), Vec::new());
    let (mut got_d, mut want_d) = (Vec::new(), Vec::new());
    let (mut got_s, mut want_s) = (Vec::new(), Vec::new());
    let (mut got_ss, mut want_ss) = (Vec::new(), Vec::new());
    let mut ss_tol = 0f64;
    for t in 0..n {
        let xt = &x[t * cols..][..cols];
        let v: Vec<f32> = match norm {
            Some((nw, o)) => xt.iter().zip(nw).map(|(&a, &g)| a * (o + g)).collect(),
            None => xt.to_vec(),
        };
        let a = quantize_act_q8(&v);
        for u in 0..uc {
            let mut unit_ties = 0i32;
            for i in 0..32 {
                let e = 32 * u + i;
                let g = codes[t * cols + e];
                let w = a.q[e];
                // A near-tie code one apart counts as the oracle's (and moves the sum).
                let g = if a.near_tie[e] && (i32::from(g) - i32::from(w)).abs() == 1 {
                    unit_ties += i32::from(g) - i32::from(w);
                    w
                } else {
                    g
                };
                got_q.push(f32::from(g));
                want_q.push(f32::from(w));
            }
            got_d.push(f32::from_bits(mw[t * ms + 2 * u]));
            want_d.push(a.d[u]);
            got_s.push((mw[t * ms + 2 * u + 1] as i32 - unit_ties) as f32);
            want_s.push(a.sum[u] as f32);
        }
        if norm.is_some() {
            for c in 0..nch {
                let part = &xt[32 * UNITS_PER_CHUNK * c..cols.min(32 * UNITS_PER_CHUNK * (c + 1))];
                let s: f64 = part.iter().map(|&a| f64::from(a) * f64::from(a)).sum();
                ss_tol = ss_tol.max((ss_terms + 1.0) * f64::from(f32::EPSILON) * s);
                got_ss.push(f32::from_bits(mw[t * ms + 2 * uc + c]));
                want_ss.push(s as f32);
            }
        }
    }
    Compared {
        q: (got_q, want_q),
        d: (got_d, want_d),
        s: (got_s, want_s),
        ss: (got_ss, want_ss),
        ss_tol,
    }
}
