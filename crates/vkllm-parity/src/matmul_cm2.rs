//! Parity cases: the workgroup-scope matmul (`matmul_cm2.comp`) through the recorder
//! ([`MatmulKernel::Cm2`], [`Recorder::matmul_glu_cm2`](vkllm_vk::Recorder)), plain and gated,
//! against an f64 product of the f16-rounded inputs (`matmul_coop`'s oracle and tolerance: the
//! kernel rounds W and X to f16, products exact in f32, f32 sums). Every tile and K step, n and
//! rows off the tile multiples, cols off the K step (a clamped tail), whole interior tiles (the
//! unclamped path), both accumulate modes, quantized weights through their f16 copy, and the
//! Q4_K module (`matmul_cm2_q4_k`, its loads decoding the blocks; tuning `cm2_matmul_decode`)
//! dispatched directly, plain and gated; grouped products of one X (`matmul_cm2_group` through
//! `Recorder::matmul_group_with`: 2 and 3 weights, rows off the tiles, a K tail, mixed stored
//! types through their f16 copies). Each recorder row's last compared element is the
//! recording's dispatch count, so a launch that fell back to another kernel fails.
//!
//! On a device without the cm2 kernels the case reports one "n/a" row, never a pass.

use vkllm_kernels::WeightType;
use vkllm_kernels::activation::Activation;
use vkllm_kernels::matmul_cm2::{CmTile, MatmulCm2};
use vkllm_kernels::matvec::MatShape;

use super::matmul_coop::{coop_weight, f16_round, reference, tol};
use super::matmul_coop_glu::gated_reference;
use super::matmul_coop_group::{GroupRun, run_group};
use super::{Ctx, KernelParityRow, Rng, pack16, row, to_f16};
use vkllm_vk::{DequantPolicy, Device, MatmulKernel, Result, Tensor};

const KERNEL: &str = "matmul_cm2";

/// The weights of a grouped case: each one's stored type and rows.
type Weights = &'static [(WeightType, usize)];

fn tile(bm: u32, bn: u32, bk: u32) -> CmTile {
    CmTile {
        bm,
        bn,
        bk,
        tokens_first: false,
    }
}

fn tile_name(t: CmTile) -> String {
    let order = if t.tokens_first { " tokens first" } else { "" };
    format!("{}x{}x{}{order}", t.bm, t.bn, t.bk)
}

pub(crate) fn matmul_cm2(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if !dev.coopmat2() {
        let reason = match dev.info().cooperative_matrix2 {
            true => "cooperative matrices switched off (tuning `coopmat=0`)",
            false => "device lacks VK_NV_cooperative_matrix2 or its features",
        };
        return Ok(vec![KernelParityRow::not_applicable(
            KERNEL,
            "every launch",
            reason,
        )]);
    }
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let (large, small) = (CmTile::LARGE, CmTile::SMALL);
    use WeightType::{F16, Q4_K, Q6_K};
    // (dtype, n, rows, cols, accumulate, tile)
    let plain = [
        (F16, 37usize, 100usize, 200usize, false, small),
        (F16, 130, 257, 512, true, large),
        (F16, 256, 256, 512, false, large),
        (F16, 200, 300, 1000, false, large),
        (F16, 16, 1000, 64, false, small),
        (F16, 300, 129, 512, true, tile(128, 256, 64)),
        (F16, 513, 64, 264, false, tile(64, 128, 16)),
        (F16, 64, 160, 256, false, tile(64, 64, 64)),
        (Q4_K, 128, 300, 1024, false, large),
        (Q4_K, 70, 129, 768, true, small),
        (Q4_K, 200, 257, 256, false, tile(128, 128, 32)),
        (Q6_K, 37, 100, 768, false, small),
        // The grid walking the token tiles first: interior and edge tiles, accumulate.
        (F16, 513, 300, 512, false, large.with_tokens_first(true)),
        (F16, 130, 257, 1000, true, small.with_tokens_first(true)),
        (
            Q4_K,
            300,
            256,
            512,
            false,
            tile(128, 256, 64).with_tokens_first(true),
        ),
    ];
    for (dtype, n, rows, cols, accumulate, t) in plain {
        out.push(plain_case(
            dev,
            &mut rng,
            dtype,
            (n, rows, cols),
            accumulate,
            t,
        )?);
    }
    use Activation::{GeluTanh, Silu};
    let gated = [
        (F16, 77usize, 300usize, 512usize, Silu, tile(64, 128, 32)),
        (F16, 128, 256, 256, GeluTanh, large),
        (F16, 45, 130, 1000, GeluTanh, small),
        (Q4_K, 64, 200, 512, Silu, small),
        (F16, 520, 300, 512, Silu, large.with_tokens_first(true)),
    ];
    for (dtype, n, rows, cols, act, t) in gated {
        out.push(gated_case(dev, &mut rng, dtype, (n, rows, cols), act, t)?);
    }
    // The Q4_K module: interior and edge tiles, each K step, accumulate, gated.
    let decoded = [
        (128usize, 300usize, 1024usize, false, None, large),
        (70, 129, 768, true, None, small),
        (200, 257, 256, false, None, tile(128, 128, 32)),
        (64, 200, 512, false, Some(Silu), small),
        (130, 256, 512, false, Some(GeluTanh), large),
        (300, 257, 512, true, None, large.with_tokens_first(true)),
    ];
    for (n, rows, cols, accumulate, act, t) in decoded {
        out.push(decoded_case(
            dev,
            &mut rng,
            (n, rows, cols),
            accumulate,
            act,
            t,
        )?);
    }
    // Grouped products of one X: (weights' types and rows, n, cols, tile).
    let grouped: [(Weights, usize, usize, CmTile); 4] = [
        (&[(F16, 300), (F16, 72), (F16, 72)], 130, 264, small),
        (
            &[(F16, 256), (F16, 128)],
            513,
            512,
            large.with_tokens_first(true),
        ),
        (&[(Q4_K, 256), (Q4_K, 128), (Q6_K, 128)], 64, 512, large),
        (
            &[(F16, 1000), (F16, 200), (F16, 200)],
            37,
            1000,
            tile(64, 128, 16),
        ),
    ];
    for (weights, n, cols, t) in grouped {
        out.push(grouped_case(dev, &mut rng, weights, (n, cols), t)?);
    }
    Ok(out)
}

/// `ys[i] = x ws[i]^T` for every weight as one `matmul_cm2_group` launch through
/// `Recorder::matmul_group_with` (its dispatch count compared: one launch after the copies and
/// X's conversion).
fn grouped_case(
    dev: &Device,
    rng: &mut Rng,
    weights: &[(WeightType, usize)],
    (n, cols): (usize, usize),
    t: CmTile,
) -> Result<KernelParityRow> {
    let kernel = (MatmulKernel::Cm2(t), DequantPolicy::All);
    let GroupRun {
        mut got,
        mut want,
        sum_max,
        dispatches: count,
        tensors,
    } = run_group(dev, rng, weights, (n, cols), false, kernel)?;
    let ws: Vec<&Tensor> = tensors.iter().collect();
    got.push(count as f32);
    want.push(dispatches(dev, &ws));
    let names: Vec<String> = weights
        .iter()
        .map(|(d, r)| format!("{} {r}", d.name()))
        .collect();
    Ok(row(
        KERNEL,
        format!("group {}", tile_name(t)),
        format!("n {n}, [{}] x {cols}", names.join(", ")),
        &got,
        &want,
        tol(sum_max + 1.0),
    ))
}

/// `matmul_cm2_q4_k` dispatched directly on Q4_K blocks and f16 X: plain (optionally
/// accumulating) or gated with `act`.
fn decoded_case(
    dev: &Device,
    rng: &mut Rng,
    (n, rows, cols): (usize, usize, usize),
    accumulate: bool,
    act: Option<Activation>,
    t: CmTile,
) -> Result<KernelParityRow> {
    let cx = Ctx { dev };
    let (bytes, wr) = coop_weight(rng, WeightType::Q4_K, rows, cols)?;
    let (bytes1, wr1) = coop_weight(rng, WeightType::Q4_K, rows, cols)?;
    let (xh, xr) = to_f16(&rng.vec(n * cols, -1.0, 1.0));
    let y0 = rng.vec(n * rows, -1.0, 1.0);
    let (wb, w1b) = (cx.input("w", &bytes)?, cx.input("w1", &bytes1)?);
    let xb = cx.input("x", &pack16(&xh))?;
    let y = match accumulate {
        true => cx.input("y", &y0)?,
        false => cx.output("y", n * rows)?,
    };
    let poison: Vec<&vkllm_vk::Buffer> = if accumulate { vec![] } else { vec![&y] };
    let shape = MatShape {
        dtype: WeightType::Q4_K,
        rows,
        cols,
        row_offset: 0,
        accumulate,
    };
    cx.run(&poison, |r| {
        let d = MatmulCm2 {
            w: wb.all(),
            x: xb.all(),
            y: y.all(),
            w1: act.map(|_| w1b.all()),
        }
        .dispatch(&shape, n, rows, t, act)?;
        r.dispatch(d)
    })?;
    let (g, sum_g) = reference(&wr, rows, cols, &xr, n);
    let (want, tol) = match act {
        None => {
            let mut want = g;
            if accumulate {
                for (o, a) in want.iter_mut().zip(&y0) {
                    *o += a;
                }
            }
            (want, tol(sum_g + 1.0))
        }
        Some(act) => gated_reference(&wr, &wr1, rows, cols, &xr, n, act),
    };
    Ok(row(
        KERNEL,
        format!(
            "q4_K decoded {}{}{}",
            tile_name(t),
            act.map_or(String::new(), |a| format!(" {a:?}")),
            if accumulate { " +=" } else { "" }
        ),
        format!("n {n}, {rows} x {cols}"),
        &cx.read(&y, n * rows)?,
        &want,
        tol,
    ))
}

/// Dispatches of one product of `weights`: the f16 copy of each weight the kernel does not read
/// as stored and that holds no resident copy (made in a submission of its own), X's
/// conversion, the launch.
fn dispatches(dev: &Device, weights: &[&Tensor]) -> f32 {
    let copies = weights
        .iter()
        .filter(|w| {
            let decoded =
                dev.tuning().cm2_matmul_decode && vkllm_kernels::matmul_cm2::reads(w.dtype);
            w.dtype.is_quantized() && !decoded && !dev.has_kept_f16(w)
        })
        .count();
    (copies + 2) as f32
}

fn plain_case(
    dev: &Device,
    rng: &mut Rng,
    dtype: WeightType,
    (n, rows, cols): (usize, usize, usize),
    accumulate: bool,
    t: CmTile,
) -> Result<KernelParityRow> {
    let cx = Ctx { dev };
    let (bytes, wr) = coop_weight(rng, dtype, rows, cols)?;
    let w = Tensor::from_bytes(dev, "w", dtype, rows, cols, &bytes)?;
    let x = rng.vec(n * cols, -1.0, 1.0);
    let y0 = rng.vec(n * rows, -1.0, 1.0);
    let xb = cx.input("x", &x)?;
    let y = match accumulate {
        true => cx.input("y", &y0)?,
        false => cx.output("y", n * rows)?,
    };
    let poison: Vec<&vkllm_vk::Buffer> = if accumulate { vec![] } else { vec![&y] };
    let mut count = 0;
    cx.run(&poison, |r| {
        r.set_dequant_policy(DequantPolicy::All);
        let before = r.dispatches();
        r.matmul_with(&w, xb.all(), n, y.all(), accumulate, MatmulKernel::Cm2(t))?;
        count = r.dispatches() - before;
        Ok(())
    })?;
    let (mut want, sum_abs) = reference(&wr, rows, cols, &f16_round(&x), n);
    if accumulate {
        for (o, a) in want.iter_mut().zip(&y0) {
            *o += a;
        }
    }
    let mut got = cx.read(&y, n * rows)?;
    got.push(count as f32);
    want.push(dispatches(dev, &[&w]));
    Ok(row(
        KERNEL,
        format!(
            "{} {}{}",
            dtype.name(),
            tile_name(t),
            if accumulate { " +=" } else { "" }
        ),
        format!("n {n}, {rows} x {cols}"),
        &got,
        &want,
        tol(sum_abs + 1.0),
    ))
}

fn gated_case(
    dev: &Device,
    rng: &mut Rng,
    dtype: WeightType,
    (n, rows, cols): (usize, usize, usize),
    act: Activation,
    t: CmTile,
) -> Result<KernelParityRow> {
    let cx = Ctx { dev };
    let mut weight = |name: &str| -> Result<(Tensor, Vec<f32>)> {
        let (bytes, wr) = coop_weight(rng, dtype, rows, cols)?;
        Ok((
            Tensor::from_bytes(dev, name, dtype, rows, cols, &bytes)?,
            wr,
        ))
    };
    let ((tg, wg), (tu, wu)) = (weight("gate")?, weight("up")?);
    let x = rng.vec(n * cols, -1.0, 1.0);
    let xb = cx.input("x", &x)?;
    let y = cx.output("y", n * rows)?;
    let mut count = 0;
    let mut ran = false;
    cx.run(&[&y], |r| {
        r.set_dequant_policy(DequantPolicy::All);
        let before = r.dispatches();
        ran = r.matmul_glu_cm2(&tg, &tu, xb.all(), n, y.all(), act, MatmulKernel::Cm2(t))?;
        count = r.dispatches() - before;
        Ok(())
    })?;
    let (mut want, bound) = gated_reference(&wg, &wu, rows, cols, &x, n, act);
    let mut got = cx.read(&y, n * rows)?;
    got.push(if ran { count as f32 } else { -1.0 });
    want.push(dispatches(dev, &[&tg, &tu]));
    Ok(row(
        KERNEL,
        format!("{} {act:?} {}", dtype.name(), tile_name(t)),
        format!("n {n}, {rows} x {cols}"),
        &got,
        &want,
        bound,
    ))
}
