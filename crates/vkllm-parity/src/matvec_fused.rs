//! Parity cases: the fused matvec (`matvec_fused.wgsl`) for every weight type, against a
//! reference composed of vkllm-cpu ops: `rmsnorm` (norm prologue), then `matvec` on the
//! weights as the device holds them (`matvec_quant` for the block formats) once per column,
//! then `silu_mul` / `gelu_tanh_mul` (gated epilogue) or `+= y0` (accumulate).
//!
//! Outputs are NaN-poisoned (store, gated) or random (accumulate) before the dispatch; parts
//! are written into one `y` with one-element gaps and a stride past the last part, and the
//! gaps must come back untouched (bit for bit). Shapes: row counts that are not multiples of a
//! workgroup's rows, n = 1, 3 and 8 columns, the smallest legal `cols` and odd multiples, and
//! launch shapes that take each reduction path on any subgroup size (4 lanes per row: several
//! teams in one subgroup on lavapipe's 8; 8: one each; 32: teams across subgroups).
//!
//! Tolerances (never loosened to pass):
//! - a dot product: 16 eps * sum_c |W[r, c] x'[c]| (as `tol_dot`), x' the normalized input;
//! - the norm prologue adds the relative error of the GPU's inv_rms (an f32 sum of squares in
//!   per-lane runs, a subgroup tree and a sum over subgroups, then add, sqrt, divide), bounded by
//!   `(terms per lane + log2 wg + wg / 4 + 8) * eps / 2 + 4 eps`, times max |y|;
//! - the gated epilogue: with T the dot tolerance of gate and up rows,
//!   `1.13 T max|up| + T max|act(gate)| + 1.13 T^2` (|act'| <= 1.13 for silu and gelu_tanh)
//!   plus 1e-5 * max|out| for exp/tanh (as the activation kernel's case).

use vkllm_cpu::quant::{matvec_q8act, matvec_quant, quantize_act_q8, unit_offsets};
use vkllm_kernels::WeightType;
use vkllm_kernels::matvec_fused::{Epilogue, GatedAct, MatvecImpl, MatvecTuning, NormPrologue};
use vkllm_kernels::matvec_q8a::{Q8aRules, XgSingle};
use vkllm_kernels::matvec_rows::MatvecLayout;

use super::quant::{cpu_err, dequantize, quant_type, weights};
use super::{Ctx, KernelParityRow, Rng, row};
use crate::mat::{max_sum_abs, tol_dot, weight};
use vkllm_vk::Device;
use vkllm_vk::Result;
use vkllm_vk::{MatvecPlan, Tensor};

/// One weight as uploaded and as the reference sees it.
struct W {
    bytes: Vec<u8>,
    /// f32 of the stored values (rounded floats; dequantized blocks).
    vals: Vec<f32>,
    rows: usize,
}

fn make_weight(rng: &mut Rng, dtype: WeightType, rows: usize, cols: usize) -> Result<W> {
    if dtype.is_quantized() {
        let (bytes, _) = weights(rng, dtype, rows, cols, false)?;
        let vals = dequantize(dtype, &bytes, rows * cols)?;
        Ok(W { bytes, vals, rows })
    } else {
        let (bytes, vals) = weight(dtype, &rng.vec(rows * cols, -1.0, 1.0));
        Ok(W { bytes, vals, rows })
    }
}

/// `W x[t]` for each of the `n` columns of `x` ([n, cols]) -> [n, rows].
fn cpu_matvec(dtype: WeightType, w: &W, cols: usize, x: &[f32]) -> Result<Vec<f32>> {
    let mut out = vec![0.0; x.len() / cols * w.rows];
    for (xt, yt) in x.chunks_exact(cols).zip(out.chunks_exact_mut(w.rows)) {
        if dtype.is_quantized() {
            matvec_quant(quant_type(dtype)?, &w.bytes, w.rows, cols, xt, yt).map_err(cpu_err)?;
        } else {
            vkllm_cpu::matvec(&w.vals, w.rows, cols, xt, yt);
        }
    }
    Ok(out)
}

/// Relative error bound of the GPU's inv_rms (see the module docs).
pub(crate) fn inv_rms_rel(cols: usize, wg: u32) -> f64 {
    let per_lane = cols.div_ceil(4 * wg as usize) * 4;
    let eps = f32::EPSILON as f64;
    (per_lane as f64 + (wg as f64).log2() + wg as f64 / 4.0 + 8.0) * eps / 2.0 + 4.0 * eps
}

fn max_abs(v: &[f32]) -> f64 {
    v.iter().fold(0f64, |m, &a| m.max((a as f64).abs()))
}

/// One fused-matvec case.
struct Case {
    dtype: WeightType,
    /// Each part's type where they differ (int8 only; empty: all `dtype`).
    types: &'static [WeightType],
    /// Rows of each part (1..=3; 2 equal ones for gated).
    rows: &'static [usize],
    cols: usize,
    n: usize,
    /// Norm prologue with this weight offset (0 or 1).
    norm: Option<f32>,
    epilogue: Epilogue,
    tuning: Option<MatvecTuning>,
    /// Run `matvec_q8a.wgsl` ([`MatvecImpl::Int8`]) against the quantized-activation oracle.
    int8: bool,
    /// Teams (`matvec_fused.wgsl`, with `tuning`) or rows (`matvec_rows.wgsl`).
    layout: MatvecLayout,
}

impl Case {
    /// Part `i`'s weight type.
    fn ty(&self, i: usize) -> WeightType {
        self.types.get(i).copied().unwrap_or(self.dtype)
    }
}

const fn tune(wg: u32, lanes: u32, rows_per_team: u32) -> Option<MatvecTuning> {
    Some(MatvecTuning {
        wg,
        lanes,
        rows_per_team,
    })
}

/// `q8a`: the int8 launch rules to record with (`None`: the device's).
fn run_case(
    cx: &Ctx<'_>,
    rng: &mut Rng,
    c: &Case,
    q8a: Option<Q8aRules>,
) -> Result<KernelParityRow> {
    let (cols, n) = (c.cols, c.n);
    let gated = matches!(c.epilogue, Epilogue::Gated { .. });
    let ws: Vec<W> = c
        .rows
        .iter()
        .enumerate()
        .map(|(i, &r)| make_weight(rng, c.ty(i), r, cols))
        .collect::<Result<_>>()?;
    let tensors: Vec<Tensor> = ws
        .iter()
        .enumerate()
        .map(|(i, w)| Tensor::from_bytes(cx.dev, "w", c.ty(i), w.rows, cols, &w.bytes))
        .collect::<Result<_>>()?;
    // Parts back to back with one-element gaps; the stride leaves two more.
    let written: Vec<usize> = if gated {
        vec![c.rows[0]]
    } else {
        c.rows.to_vec()
    };
    let mut offsets = Vec::new();
    let mut at = 1;
    for &r in &written {
        offsets.push(at);
        at += r + 1;
    }
    let y_stride = at + 1;
    if gated {
        offsets.push(0); // the up part writes nothing
    }
    let x = rng.vec(n * cols, -1.0, 1.0);
    let nw = rng.vec(cols, -1.0, 1.0);
    let eps = 1e-5f32;
    let y0 = rng.vec(n * y_stride, -1.0, 1.0);

    // The reference: rmsnorm, matvec per part, then the epilogue.
    let xin = match c.norm {
        Some(off) => {
            let mut o = vec![0.0; x.len()];
            vkllm_cpu::rmsnorm(&x, &nw, eps, off, &mut o);
            o
        }
        None => x.clone(),
    };
    let t = c.tuning.unwrap_or(MatvecTuning {
        wg: 128,
        lanes: 32,
        rows_per_team: 1,
    });
    // The rows kernel sums each column's squares over one subgroup (lanes take every
    // min(subgroup size, workgroup)-th vec4, then a subgroup sum; workgroups have 8 to 32
    // invocations): bounded as a team kernel of the fewest lanes it may have.
    let norm_wg = if c.layout == MatvecLayout::Rows {
        cx.dev.info().subgroup_size.min(8)
    } else {
        t.wg
    };
    // (dots, tolerance per dot, max |dot|, the largest part of a dot's tolerance that is tie
    // flips (int8 only), the largest summation-rounding part)
    let (dots, dot_tol, max_dot, tie_max, round_max) = if c.int8 {
        q8a_reference(c, &ws, &x, &nw, eps, t)?
    } else {
        let dots: Vec<Vec<f32>> = ws
            .iter()
            .map(|w| cpu_matvec(c.dtype, w, cols, &xin))
            .collect::<Result<_>>()?;
        let mut dot_tol = 0f64;
        let mut max_dot = 0f64;
        let mut round_max = 0f64;
        for (w, d) in ws.iter().zip(&dots) {
            let sum_abs = max_sum_abs(&w.vals, w.rows, cols, &xin, n);
            let norm_term = if c.norm.is_some() {
                inv_rms_rel(cols, norm_wg) * max_abs(d)
            } else {
                0.0
            };
            dot_tol = dot_tol.max(tol_dot(sum_abs).max_abs + norm_term);
            round_max = round_max.max(tol_dot(sum_abs).max_abs);
            max_dot = max_dot.max(max_abs(d));
        }
        (dots, dot_tol, max_dot, 0.0, round_max)
    };
    let mut want = vec![f32::NAN; n * y_stride];
    let mut tol = tol_dot(0.0);
    tol.max_abs = dot_tol;
    // How far a tie flip may move one output (the max_abs model's tie term through the
    // epilogue).
    let tie_out = match c.epilogue {
        Epilogue::Gated { act } => {
            let m = c.rows[0];
            let mut out = vec![0.0; n * m];
            let f = match act {
                GatedAct::Silu => vkllm_cpu::silu,
                GatedAct::GeluTanh => vkllm_cpu::gelu_tanh,
            };
            match act {
                GatedAct::Silu => vkllm_cpu::silu_mul(&dots[0], &dots[1], &mut out),
                GatedAct::GeluTanh => vkllm_cpu::gelu_tanh_mul(&dots[0], &dots[1], &mut out),
            }
            for tk in 0..n {
                want[tk * y_stride + offsets[0]..][..m].copy_from_slice(&out[tk * m..][..m]);
            }
            let acts: Vec<f32> = dots[0].iter().map(|&g| f(g)).collect();
            tol.max_abs = 1.13 * dot_tol * max_abs(&dots[1])
                + dot_tol * max_abs(&acts)
                + 1.13 * dot_tol * dot_tol
                + 1e-5 * max_abs(&out);
            1.13 * tie_max * max_abs(&dots[1]) + tie_max * max_abs(&acts) + 1.13 * tie_max * tie_max
        }
        _ => {
            let acc = c.epilogue == Epilogue::Accumulate;
            for ((d, &off), &r) in dots.iter().zip(&offsets).zip(c.rows) {
                for tk in 0..n {
                    for i in 0..r {
                        let o = tk * y_stride + off + i;
                        want[o] = d[tk * r + i] + if acc { y0[o] } else { 0.0 };
                    }
                }
            }
            if acc {
                // y0 (|y0| < 1) is added in f32: one more rounding of a value <= max|dot| + 1.
                tol.max_abs += f32::EPSILON as f64 * (max_dot + 1.0);
            }
            tie_max
        }
    };
    // The NMSE bound (a fixed 1e-7 for rounding) also allows a tie flip in every output: the
    // max_abs model allows each output its tie term, and with few outputs one flip alone can
    // exceed 1e-7 (H200: q4_K silu, 61 outputs, one flip of 21.8 on outputs of rms ~6e3 gave
    // nmse 2.0e-7). Without near ties the bound stays 1e-7.
    // Also each output's summation-rounding bound (float sums in both kernels: the int8 one adds
    // its blocks' scaled products in f32), tiny next to 1e-7 unless the outputs cancel to a
    // small fraction of their terms (a lone output can, by chance: q8_0, one row of 2336
    // columns, an output of 5e-3 off by 2.1e-6 gave nmse 1.7e-7).
    let written: Vec<f64> = want
        .iter()
        .filter(|v| !v.is_nan())
        .map(|&v| v as f64)
        .collect();
    let energy: f64 = written.iter().map(|v| v * v).sum();
    if energy > 0.0 {
        let rounding = if dot_tol > 0.0 {
            round_max * tol.max_abs / dot_tol
        } else {
            0.0
        };
        let per_output = tie_out * tie_out + rounding * rounding;
        tol.nmse += written.len() as f64 * per_output / energy;
    }

    let xb = cx.input("x", &x)?;
    let nwb = cx.input("norm_w", &nw)?;
    let accumulate = c.epilogue == Epilogue::Accumulate;
    let y = if accumulate {
        cx.input("y", &y0)?
    } else {
        cx.output("y", n * y_stride)?
    };
    let poison: Vec<&vkllm_vk::Buffer> = if accumulate { vec![] } else { vec![&y] };
    let refs: Vec<&Tensor> = tensors.iter().collect();
    let plan = MatvecPlan {
        n_cols: n,
        y_stride,
        y_offsets: &offsets,
        norm: c
            .norm
            .map(|offset| (nwb.all(), NormPrologue { eps, offset })),
        epilogue: c.epilogue,
        tuning: c.tuning,
        layout: Some(c.layout),
        next_norm: None,
    };
    let imp = if c.int8 {
        MatvecImpl::Int8
    } else {
        MatvecImpl::Fast
    };
    cx.run(&poison, |r| {
        if let Some(q) = q8a {
            r.set_q8a_rules(q);
        }
        r.matvec_fused_with(imp, &refs, xb.all(), y.all(), &plan)
    })?;
    let got = cx.read(&y, n * y_stride)?;

    // Written elements are compared; every other one must be untouched.
    let mut g = Vec::new();
    let mut e = Vec::new();
    let mut gaps_ok = true;
    for (o, (&gv, &wv)) in got.iter().zip(&want).enumerate() {
        if wv.is_nan() {
            let before = if accumulate { y0[o] } else { f32::NAN };
            gaps_ok &= gv.to_bits() == before.to_bits();
        } else {
            g.push(gv);
            e.push(wv);
        }
    }
    let names: Vec<&str> = (0..c.types.len().max(1)).map(|i| c.ty(i).name()).collect();
    let variant = format!(
        "{} {}{}{}{}",
        names.join("+"),
        match c.epilogue {
            Epilogue::Store => "store",
            Epilogue::Accumulate => "+=",
            Epilogue::Gated {
                act: GatedAct::Silu,
            } => "silu",
            Epilogue::Gated {
                act: GatedAct::GeluTanh,
            } => "gelu",
        },
        match c.norm {
            Some(o) => format!(" norm+{o}"),
            None => String::new(),
        },
        match c.tuning {
            Some(t) => format!(" {}x{}x{}", t.wg, t.lanes, t.rows_per_team),
            None => String::new(),
        },
        if gaps_ok { "" } else { " GAPS WRITTEN" }
    );
    let mut r = row(
        match (c.int8, c.layout) {
            (true, _) => "matvec_q8a",
            (false, MatvecLayout::Teams) => "matvec_fused",
            (false, MatvecLayout::Rows) => "matvec_rows",
        },
        variant,
        format!("n {n}, {:?} x {cols}", c.rows),
        &g,
        &e,
        tol,
    );
    r.pass &= gaps_ok;
    Ok(r)
}

/// The int8 path's reference and tolerance: each column `v = x` (or `x * (offset + norm_w)`)
/// quantized per 32 (vkllm-cpu's `quantize_act_q8`), `matvec_q8act` per part, times inv_rms
/// (f64) with a norm. Tolerance per output: `16 eps * sum_u d_u sum_i (|w_i| + off_u) |q_i|`
/// (the GPU's f32 scaling of exact integer sums, Q4_K's scale and min terms apart: `off_u` its
/// `dmin * min`), plus `d_u |w_i|` for each code within `TIE_MARGIN` of a rounding tie (the
/// GPU's `127 / amax` may round it the other way), times inv_rms; plus the inv_rms error term
/// and 2 eps |y| for the final scaling. Returns (per-part `[n, rows]` results, tolerance,
/// max |result|, the largest tie term of one result).
/// The dots per matrix, then (as [`run_case`] names them) the tolerance per dot, max |dot|, and
/// the largest tie-flip and summation-rounding parts of a dot's tolerance.
type DotsAndBounds = (Vec<Vec<f32>>, f64, f64, f64, f64);

fn q8a_reference(
    c: &Case,
    ws: &[W],
    x: &[f32],
    nw: &[f32],
    eps: f32,
    t: MatvecTuning,
) -> Result<DotsAndBounds> {
    let (cols, n) = (c.cols, c.n);
    let mut acts = Vec::new();
    let mut invs = Vec::new();
    for xt in x.chunks_exact(cols) {
        let (v, inv) = match c.norm {
            Some(off) => {
                let ss: f64 = xt.iter().map(|&a| (a as f64) * (a as f64)).sum();
                let inv = 1.0 / (ss / cols as f64 + eps as f64).sqrt();
                let v: Vec<f32> = xt.iter().zip(nw).map(|(&a, &g)| a * (off + g)).collect();
                (v, inv as f32)
            }
            None => (xt.to_vec(), 1.0),
        };
        acts.push(quantize_act_q8(&v));
        invs.push(inv);
    }
    let feps = f32::EPSILON as f64;
    let mut dots = Vec::new();
    let mut tol = 0f64;
    let mut tie_max = 0f64;
    let mut round_max = 0f64;
    let mut max_dot = 0f64;
    for (pi, w) in ws.iter().enumerate() {
        let qt = quant_type(c.ty(pi))?;
        let row_bytes = qt.row_bytes(cols).map_err(cpu_err)?;
        let mut d = vec![0f32; n * w.rows];
        for ((a, &inv), yt) in acts.iter().zip(&invs).zip(d.chunks_exact_mut(w.rows)) {
            matvec_q8act(qt, &w.bytes, w.rows, cols, a, yt).map_err(cpu_err)?;
            for v in yt.iter_mut() {
                *v *= inv;
            }
        }
        for r in 0..w.rows {
            let offs =
                unit_offsets(qt, &w.bytes[r * row_bytes..][..row_bytes], cols).map_err(cpu_err)?;
            let wr = &w.vals[r * cols..][..cols];
            for (ti, (a, &inv)) in acts.iter().zip(&invs).enumerate() {
                let (mut s, mut ties) = (0f64, 0f64);
                for (i, &wi) in wr.iter().enumerate() {
                    let du = a.d[i / 32] as f64;
                    let wi = (wi as f64).abs();
                    s += du * (wi + offs[i / 32] as f64) * (a.q[i] as f64).abs();
                    if a.near_tie[i] {
                        ties += du * wi;
                    }
                }
                let y = (d[ti * w.rows + r] as f64).abs();
                let norm_term = if c.norm.is_some() {
                    inv_rms_rel(cols, t.wg) * y
                } else {
                    0.0
                };
                let rounding = 16.0 * feps * s * inv as f64 + 2.0 * feps * y;
                tol = tol.max(rounding + ties * inv as f64 + norm_term);
                tie_max = tie_max.max(ties * inv as f64);
                round_max = round_max.max(rounding);
            }
        }
        max_dot = max_dot.max(max_abs(&d));
        dots.push(d);
    }
    Ok((dots, tol, max_dot, tie_max, round_max))
}

/// The variants for one weight type: columns from `cols` = [odd multiple, smallest legal,
/// other odd multiples].
fn cases_for(dtype: WeightType, cols: [usize; 4], int8: bool) -> Vec<Case> {
    let [c0, c1, c2, c3] = cols;
    let silu = Epilogue::Gated {
        act: GatedAct::Silu,
    };
    let gelu = Epilogue::Gated {
        act: GatedAct::GeluTanh,
    };
    let case = |rows, cols, n, norm, epilogue, tuning| Case {
        dtype,
        types: &[],
        rows,
        cols,
        n,
        norm,
        epilogue,
        tuning,
        int8,
        layout: MatvecLayout::Teams,
    };
    vec![
        case(&[333], c0, 3, None, Epilogue::Store, None),
        case(&[77], c1, 8, None, Epilogue::Accumulate, None),
        case(&[1], c2, 1, Some(0.0), Epilogue::Store, tune(32, 4, 3)),
        case(
            &[29],
            c3,
            3,
            Some(1.0),
            Epilogue::Accumulate,
            tune(256, 8, 2),
        ),
        case(&[133, 37, 21], c0, 3, Some(0.0), Epilogue::Store, None),
        case(
            &[45, 7, 7],
            c1,
            1,
            None,
            Epilogue::Accumulate,
            tune(64, 4, 2),
        ),
        case(&[61, 61], c2, 1, None, silu, None),
        case(&[29, 29], c0, 8, Some(1.0), gelu, tune(128, 8, 1)),
        case(&[13, 13], c1, 3, Some(0.0), silu, tune(32, 4, 2)),
    ]
    .into_iter()
    // int8: a matrix past 16384 rows with the automatic launch (two rows per team, or for
    // the K-quants the 8-lane launch over ~4096 workgroups, `matvec_q8a::kquant_wide`; Q6_K
    // in unit pairs), and an explicit 4-lane, one-row launch with the norm and three columns
    // whose lanes take 8 or 9 steps (Q6_K: in half super-blocks, `matvec_q8a::quad`).
    .chain(int8.then(|| case(&[16411], 1024, 1, None, Epilogue::Store, None)))
    .chain(int8.then(|| {
        let acc = Epilogue::Accumulate;
        case(&[333], c3, 3, Some(1.0), acc, tune(256, 4, 1))
    }))
    // int8: 1024-invocation workgroups, the automatic launch of long rows on large grids
    // (`matvec_q8a::WIDE_X_COLS`; 4097 rows make 129 workgroups of 32 rows), and explicitly
    // with the norm and a gated pair of two rows per team.
    .chain(int8.then(|| case(&[4097], 8192, 1, Some(1.0), Epilogue::Accumulate, None)))
    .chain(int8.then(|| case(&[333], c3, 1, Some(0.0), Epilogue::Store, tune(1024, 32, 1))))
    .chain(int8.then(|| case(&[61, 61], c3, 1, None, silu, tune(1024, 32, 2))))
    // int8 on quantized x only (`XG`): more columns than the shared-memory launch takes (a
    // chunk of 16 then the rest at a column offset; 8 per launch for a gated pair with two
    // rows per team), and 5 columns of 4096 (past its 16384 elements).
    .chain(int8.then(|| case(&[37], c0, 11, Some(0.0), Epilogue::Store, None)))
    .chain(int8.then(|| case(&[133, 37, 21], c1, 19, None, Epilogue::Accumulate, None)))
    .chain(int8.then(|| case(&[29, 29], c2, 16, Some(1.0), silu, None)))
    .chain(int8.then(|| case(&[13, 13], c3, 10, Some(0.0), gelu, tune(128, 4, 2))))
    .chain(int8.then(|| case(&[67], 4096, 5, Some(0.0), Epilogue::Accumulate, None)))
    // One column past the shared-memory launch's 16384 elements (the down projection of a
    // 17408-wide MLP): quantized x too.
    .chain(int8.then(|| {
        let long = (vkllm_kernels::matvec_q8a::MAX_ELEMS / c3 + 1) * c3;
        case(&[45], long, 1, None, Epilogue::Accumulate, None)
    }))
    .chain(int8.then(|| {
        let long = (vkllm_kernels::matvec_q8a::MAX_ELEMS / c1 + 1) * c1;
        case(&[21, 21], long, 1, Some(1.0), silu, None)
    }))
    .collect()
}

fn float_cols(dtype: WeightType) -> [usize; 4] {
    let ue = if dtype == WeightType::F32 { 4 } else { 8 };
    [ue * 125, ue, ue * 37, ue * 129]
}

fn quant_cols(dtype: WeightType) -> [usize; 4] {
    let b = dtype.block_size();
    if b == 32 {
        [32 * 37, 32, 32 * 73, 32 * 129]
    } else {
        [256 * 3, 256, 256 * 9, 256 * 17]
    }
}

fn run_types(
    dev: &Device,
    seed: u64,
    types: &[WeightType],
    int8: bool,
    q8a: Option<Q8aRules>,
) -> Result<Vec<KernelParityRow>> {
    run_types_where(dev, seed, types, int8, q8a, |_| true)
}

/// [`run_types`] of the cases `keep` takes.
fn run_types_where(
    dev: &Device,
    seed: u64,
    types: &[WeightType],
    int8: bool,
    q8a: Option<Q8aRules>,
    keep: impl Fn(&Case) -> bool,
) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for (ti, &dtype) in types.iter().enumerate() {
        let cols = if dtype.is_quantized() {
            quant_cols(dtype)
        } else {
            float_cols(dtype)
        };
        for (ci, c) in cases_for(dtype, cols, int8).into_iter().enumerate() {
            // Float types run every case; quantized ones (slow on lavapipe) all untuned cases
            // plus one of the four tuned-launch ones in rotation, so each tuned case still
            // runs for a legacy and a K-quant type in every test.
            let tuned = [2, 3, 5, 8];
            if (!int8 && dtype.is_quantized() && tuned.contains(&ci) && tuned[ti % 4] != ci)
                || !keep(&c)
            {
                continue;
            }
            out.push(run_case(&cx, &mut rng, &c, q8a)?);
        }
        // Every case again on the rows kernel (workgroups of 8 to 32 invocations by the row
        // count; it needs subgroups of 8 or more lanes); the int8 runs have their own kernel.
        if int8 || dev.info().subgroup_size < 8 {
            continue;
        }
        for c in cases_for(dtype, cols, false) {
            let c = Case {
                tuning: None,
                layout: MatvecLayout::Rows,
                ..c
            };
            out.push(run_case(&cx, &mut rng, &c, q8a)?);
        }
    }
    if int8 {
        for c in mixed_cases().into_iter().filter(|c| keep(c)) {
            out.push(run_case(&cx, &mut rng, &c, q8a)?);
        }
    }
    Ok(out)
}

/// int8 launches over parts of different weight types (q/k/v of Q4_K_M files, whose V is
/// Q6_K on some layers; block sizes 32 and 256 together): one column with the norm, several
/// columns on the shared-memory launch with a tuned team shape, and quantized x (11 columns).
fn mixed_cases() -> Vec<Case> {
    use WeightType::{Q4_0, Q4_K, Q6_K, Q8_0};
    let case = |types: &'static [WeightType], rows, cols, n, norm, epilogue, tuning| Case {
        dtype: types[0],
        types,
        rows,
        cols,
        n,
        norm,
        epilogue,
        tuning,
        int8: true,
        layout: MatvecLayout::Teams,
    };
    let (store, acc) = (Epilogue::Store, Epilogue::Accumulate);
    vec![
        case(
            &[Q4_K, Q4_K, Q6_K],
            &[133, 37, 21],
            256 * 9,
            1,
            Some(0.0),
            store,
            None,
        ),
        case(
            &[Q8_0, Q4_0, Q4_K],
            &[45, 7, 7],
            256 * 3,
            3,
            None,
            acc,
            tune(64, 4, 2),
        ),
        case(&[Q6_K, Q8_0], &[77, 29], 256, 8, Some(1.0), store, None),
        case(
            &[Q4_0, Q6_K, Q4_K],
            &[29, 61, 13],
            256 * 17,
            11,
            Some(1.0),
            store,
            None,
        ),
    ]
}

pub(crate) fn matvec_fused_float(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    run_types(
        dev,
        seed,
        &[WeightType::F32, WeightType::F16, WeightType::Bf16],
        false,
        None,
    )
}

pub(crate) fn matvec_fused_legacy(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    run_types(
        dev,
        seed,
        &[
            WeightType::Q8_0,
            WeightType::Q4_0,
            WeightType::Q4_1,
            WeightType::Q5_0,
            WeightType::Q5_1,
            WeightType::IQ4_NL,
        ],
        false,
        None,
    )
}

pub(crate) fn matvec_fused_kquant(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    run_types(
        dev,
        seed,
        &[
            WeightType::Q4_K,
            WeightType::Q5_K,
            WeightType::Q6_K,
            WeightType::Q2_K,
            WeightType::Q3_K,
            WeightType::IQ4_XS,
        ],
        false,
        None,
    )
}

/// `matvec_q8a.wgsl` (int8 dot products over quantized activations) for each type it takes,
/// every case of [`cases_for`], against [`q8a_reference`]. Not applicable on devices without
/// integer dot products or with subgroups of fewer than 4 lanes.
pub(crate) fn matvec_q8a(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if !dev.int8_dot()
        || dev.info().min_subgroup_size < 4
        || (dev.info().limits.max_shared_memory as usize) < vkllm_kernels::matvec_q8a::SHARED_BYTES
    {
        return Ok(vec![KernelParityRow::not_applicable(
            "matvec_q8a",
            "all",
            "device lacks integer dot products (Vulkan 1.3), subgroups of 4+ lanes or 24 KiB of \
             shared memory",
        )]);
    }
    let mut rows = run_types(dev, seed, &vkllm_kernels::matvec_q8a::TYPES, true, None)?;
    // Again with every workgroup walking as many row groups as it may (up to 16: the loop over
    // groups and its uniform early exit).
    let walk = Q8aRules {
        workgroups: 1,
        ..Q8aRules::default()
    };
    let walked = run_types(
        dev,
        seed ^ 1,
        &vkllm_kernels::matvec_q8a::TYPES,
        true,
        Some(walk),
    );
    for mut r in walked? {
        r.variant.push_str(" walk");
        rows.push(r);
    }
    // The multi-column cases again on the shared-memory launch (`xg` off: each workgroup
    // quantizes x itself), where it takes them, and on quantized x with two rows per team (the
    // launch of large matrices; these cases' few rows take one); the single-column cases again
    // on quantized x (`XgSingle::All`, tuning `q8a_xg1`).
    let shared = Q8aRules {
        xg: false,
        ..Q8aRules::default()
    };
    let pairs = Q8aRules {
        xg_rows: 2,
        ..Q8aRules::default()
    };
    let single = Q8aRules {
        xg_single: XgSingle::All,
        ..Q8aRules::default()
    };
    // Single columns of 4096+ elements with a norm take quantized x by default
    // (`XgSingle::Norm`): the shared-memory launch again for them.
    let shared_norm = Q8aRules {
        xg_single: XgSingle::Shared,
        ..Q8aRules::default()
    };
    /// Which cases a pass runs.
    type Keep = fn(&Case) -> bool;
    let passes: [(u64, Q8aRules, &str, Keep); 4] = [
        (6, shared_norm, " shared1", |c| c.n == 1 && c.cols >= 4096),
        (2, shared, " shared", |c| {
            c.n > 1 && c.n <= 8 && c.n * c.cols <= vkllm_kernels::matvec_q8a::MAX_ELEMS
        }),
        (3, single, " xg1", |c| c.n == 1),
        (4, pairs, " pairs", |c| c.n > 1),
    ];
    let types = &vkllm_kernels::matvec_q8a::TYPES;
    for (salt, rules, suffix, keep) in passes {
        for mut r in run_types_where(dev, seed ^ salt, types, true, Some(rules), keep)? {
            r.variant.push_str(suffix);
            rows.push(r);
        }
    }
    Ok(rows)
}
