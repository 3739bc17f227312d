//! Parity cases: the cooperative-matrix matmul (`matmul_coop.wgsl`) for float and quantized
//! weights, against an f64 product of the f16-rounded inputs.
//!
//! The kernel rounds X and W to f16 (W after dequantization) and multiplies on cooperative
//! matrices with f32 accumulation: each product of two f16 values is exact in f32, so the only
//! error is f32 summation in the hardware's order. The reference therefore takes the same
//! f16-rounded inputs and sums in f64; the tolerance is 32 f32 epsilons of the largest sum of
//! |terms| (tree or blocked sums of k terms stay within O(log k) eps of it; 32 leaves room
//! for accumulators that are not strict IEEE f32 inside a 16 x 16 x 16 step) and an NMSE of 1e-6.
//!
//! On a device that does not run the kernel (no VK_KHR_cooperative_matrix with f16 16x16x16, or
//! cooperative matrices switched off) the case reports one "n/a" row, never a pass.

use vkllm_kernels::WeightType;
use vkllm_kernels::matmul_coop::{CoopConfig, CoopTile, MatmulCoop};
use vkllm_kernels::matvec::MatShape;

use super::quant::{dequantize, weights};
use super::{Ctx, KernelParityRow, Rng, Tol, row, to_f16};
use crate::mat::weight;
use vkllm_vk::Device;
use vkllm_vk::Result;
use vkllm_vk::{MatmulKernel, Tensor};

const KERNEL: &str = "matmul_coop";

/// The rounding the kernel applies to every input.
pub(crate) fn f16_round(v: &[f32]) -> Vec<f32> {
    to_f16(v).1
}

pub(crate) fn tol(sum_abs: f64) -> Tol {
    Tol {
        max_abs: 32.0 * f32::EPSILON as f64 * sum_abs,
        nmse: 1e-6,
    }
}

/// `Y[t, r] = sum_c X[t, c] W[r, c]` in f64, and the largest sum of |terms|.
pub(crate) fn reference(
    w: &[f32],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
) -> (Vec<f32>, f64) {
    let mut y = vec![0.0; n * rows];
    let mut max_abs = 0f64;
    for t in 0..n {
        let xt = &x[t * cols..(t + 1) * cols];
        for r in 0..rows {
            let wr = &w[r * cols..(r + 1) * cols];
            let (mut s, mut a) = (0f64, 0f64);
            for (&wv, &xv) in wr.iter().zip(xt) {
                let p = wv as f64 * xv as f64;
                s += p;
                a += p.abs();
            }
            y[t * rows + r] = s as f32;
            max_abs = max_abs.max(a);
        }
    }
    (y, max_abs)
}

/// Why this device does not run the kernel, if it does not.
pub(crate) fn not_applicable(dev: &Device) -> Option<String> {
    if dev.coopmat() {
        return None;
    }
    let i = dev.info();
    Some(if i.supports_coopmat_f16() {
        "cooperative matrices switched off (tuning `coopmat=0`)".into()
    } else if !i.cooperative_matrix {
        "device lacks VK_KHR_cooperative_matrix".into()
    } else {
        "device lacks the f16 16x16x16 -> f32 cooperative-matrix shape or its features".into()
    })
}

fn tile_name(t: CoopTile) -> String {
    let kind = match t {
        CoopTile::WIDE => " wide",
        CoopTile::TALL => " tall",
        _ => "",
    };
    format!("{}x{}{kind}", t.bm(), t.bn())
}

pub(crate) fn config_name(c: &CoopConfig) -> String {
    if *c == CoopConfig::plain(c.tile) {
        return tile_name(c.tile);
    }
    format!(
        "{} bk{} split{}{}{}",
        tile_name(c.tile),
        c.bk,
        c.split,
        if c.stages == 1 { " 1-stage" } else { "" },
        if c.prefetch_quant { " qpre" } else { "" },
    ) + if c.x_f16 { " x16" } else { "" }
        + if c.direct { " direct" } else { "" }
}

/// Random weights of `dtype` as stored, and their f16-rounded values (what the kernel uses).
pub(crate) fn coop_weight(
    rng: &mut Rng,
    dtype: WeightType,
    rows: usize,
    cols: usize,
) -> Result<(Vec<u8>, Vec<f32>)> {
    if dtype.is_quantized() {
        let (bytes, _) = weights(rng, dtype, rows, cols, true)?;
        let wr = dequantize(dtype, &bytes, rows * cols)?;
        return Ok((bytes, f16_round(&wr)));
    }
    let w = rng.vec(rows * cols, -1.0, 1.0);
    let (bytes, stored) = weight(dtype, &w);
    Ok((bytes, f16_round(&stored)))
}

pub(crate) fn matmul_coop(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if let Some(reason) = not_applicable(dev) {
        return Ok(vec![KernelParityRow::not_applicable(
            KERNEL,
            "every weight type",
            reason,
        )]);
    }
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let (large, small, tiny) = (CoopTile::LARGE, CoopTile::SMALL, CoopTile::TINY);
    // (dtype, n, rows, cols, accumulate, tile): n and rows off the tile multiples; f16/bf16 cols
    // both multiples of 8 (16-byte staging) and not (334, 2 mod 8; with cols % 4 != 0 X takes
    // the element path too); f32 odd cols; quantized rows of odd block counts.
    let plain = [
        (WeightType::F16, 37usize, 100usize, 200usize, false, small),
        (WeightType::F16, 16, 1000, 64, false, tiny),
        (WeightType::F16, 70, 129, 334, true, large),
        (WeightType::F16, 130, 257, 512, false, large),
        (WeightType::F32, 37, 100, 333, false, tiny),
        (WeightType::F32, 19, 65, 256, true, large),
        (WeightType::Bf16, 37, 100, 200, false, large),
        (WeightType::Bf16, 66, 33, 1026, false, small),
        (WeightType::Q8_0, 70, 129, 32 * 37, true, large),
        (WeightType::Q8_0, 17, 64, 32 * 5, false, small),
        (WeightType::Q4_0, 37, 100, 32 * 13, false, large),
        (WeightType::Q4_1, 37, 100, 32 * 13, false, small),
        (WeightType::Q5_0, 37, 100, 32 * 13, false, large),
        (WeightType::Q5_1, 37, 100, 32 * 13, false, tiny),
        (WeightType::IQ4_NL, 37, 100, 32 * 13, false, large),
        (WeightType::Q4_K, 37, 100, 768, false, large),
        (WeightType::Q4_K, 65, 31, 256, true, tiny),
        (WeightType::Q5_K, 37, 100, 768, false, small),
        (WeightType::Q6_K, 37, 100, 768, false, large),
        (WeightType::Q3_K, 37, 100, 768, false, small),
        (WeightType::Q2_K, 37, 100, 768, false, large),
        (WeightType::IQ4_XS, 37, 100, 768, false, small),
    ];
    // Split-K and K step 64 (CoopConfig): odd n, rows and cols (shares that end mid-K, an
    // empty last share: 7 steps in 5 parts of 2), both accumulate modes, float and quantized.
    // Quantized rows of odd split factors dequantize before the multiplications.
    let cfg = |tile, bk, split: u32| CoopConfig {
        tile,
        bk,
        split,
        stages: if bk == 64 && tile != tiny { 1 } else { 2 },
        prefetch_quant: split % 2 == 1,
        x_f16: false,
        direct: false,
    };
    // X as f16 (`to_f16` into the recorder's scratch, XH = 1): every weight kind, each tiling,
    // both K steps, with and without split (cols % 8 == 0, which f16 X needs).
    let x16 = |tile, bk, split| CoopConfig {
        x_f16: true,
        ..cfg(tile, bk, split)
    };
    let half = [
        (
            WeightType::F16,
            37usize,
            100usize,
            200usize,
            false,
            x16(small, 64, 1),
        ),
        (WeightType::F16, 130, 257, 512, true, x16(large, 64, 1)),
        (WeightType::F16, 70, 129, 1000, false, x16(large, 32, 3)),
        (WeightType::F32, 19, 65, 256, false, x16(tiny, 32, 1)),
        (WeightType::Bf16, 66, 33, 1024, true, x16(small, 32, 2)),
        (WeightType::Q8_0, 70, 129, 32 * 37, false, x16(large, 64, 1)),
        (WeightType::Q4_K, 65, 31, 768, true, x16(tiny, 64, 2)),
        (WeightType::Q6_K, 37, 100, 768, false, x16(small, 64, 3)),
        (
            WeightType::F16,
            200,
            300,
            512,
            false,
            x16(CoopTile::WIDE, 64, 1),
        ),
        (
            WeightType::Q4_K,
            130,
            257,
            768,
            true,
            x16(CoopTile::WIDE, 64, 2),
        ),
        (
            WeightType::Q8_0,
            200,
            129,
            32 * 37,
            false,
            x16(CoopTile::TALL, 64, 1),
        ),
        (
            WeightType::Q4_0,
            37,
            100,
            32 * 13,
            true,
            x16(CoopTile::TALL, 64, 2),
        ),
    ];
    let split = [
        (
            WeightType::F16,
            37usize,
            100usize,
            200usize,
            false,
            cfg(tiny, 32, 3),
        ),
        (WeightType::F16, 70, 129, 334, true, cfg(tiny, 64, 2)),
        (WeightType::F16, 130, 257, 224, false, cfg(tiny, 32, 5)),
        (WeightType::F16, 45, 300, 1024, true, cfg(large, 32, 4)),
        (WeightType::F16, 64, 64, 512, false, cfg(tiny, 64, 1)),
        (WeightType::F32, 37, 100, 333, true, cfg(small, 32, 3)),
        (WeightType::Bf16, 19, 65, 1026, false, cfg(tiny, 64, 4)),
        (WeightType::Q8_0, 70, 129, 32 * 37, true, cfg(tiny, 64, 3)),
        (WeightType::Q4_0, 37, 100, 32 * 13, false, cfg(tiny, 32, 4)),
        (WeightType::Q4_K, 65, 31, 768, true, cfg(tiny, 64, 2)),
        (WeightType::Q6_K, 37, 100, 768, false, cfg(large, 32, 3)),
        (WeightType::Q5_K, 17, 100, 512, false, cfg(tiny, 64, 1)),
        (WeightType::F16, 130, 257, 1000, false, cfg(large, 64, 1)),
        (WeightType::F16, 45, 300, 1024, true, cfg(small, 64, 2)),
        (WeightType::F32, 37, 100, 333, false, cfg(large, 64, 2)),
        (WeightType::Q4_K, 70, 129, 1280, true, cfg(large, 64, 2)),
        (WeightType::Q6_K, 37, 100, 768, false, cfg(small, 64, 1)),
    ];
    // The direct epilogue: interior workgroups store (and when accumulating, start from) Y with
    // cooperative operations, edge workgroups take the scratch path; rows a multiple of 4 (Y's
    // stride here), n and rows past the tile multiples, both accumulate modes, f16 and f32 X,
    // split-K in 2 and 3 (the last workgroup's cooperative sum of the partials).
    let direct = |tile, bk, split, x_f16| CoopConfig {
        x_f16,
        direct: true,
        ..cfg(tile, bk, split)
    };
    let (f16, bf16, q8) = (WeightType::F16, WeightType::Bf16, WeightType::Q8_0);
    let (wide, tall) = (CoopTile::WIDE, CoopTile::TALL);
    let direct_rows: [(WeightType, usize, usize, usize, bool, CoopConfig); 6] = [
        (f16, 200, 300, 512, true, direct(wide, 64, 1, true)),
        (f16, 130, 260, 512, false, direct(large, 64, 1, true)),
        (bf16, 70, 132, 256, true, direct(tiny, 32, 1, false)),
        (q8, 200, 132, 32 * 37, true, direct(tall, 64, 1, true)),
        (f16, 130, 260, 512, true, direct(large, 32, 2, true)),
        (f16, 300, 260, 1024, false, direct(large, 64, 3, true)),
    ];
    let cases = plain
        .into_iter()
        .map(|(d, n, r, c, a, t)| (d, n, r, c, a, CoopConfig::plain(t)))
        .chain(split)
        .chain(half)
        .chain(direct_rows);
    for (dtype, n, rows, cols, accumulate, c) in cases {
        let (bytes, wr) = coop_weight(&mut rng, dtype, rows, cols)?;
        let x = rng.vec(n * cols, -1.0, 1.0);
        let y0 = rng.vec(n * rows, -1.0, 1.0);
        let t = Tensor::from_bytes(dev, "w", dtype, rows, cols, &bytes)?;
        let xb = cx.input("x", &x)?;
        let y = if accumulate {
            cx.input("y", &y0)?
        } else {
            cx.output("y", n * rows)?
        };
        let poison: Vec<&vkllm_vk::Buffer> = if accumulate { vec![] } else { vec![&y] };
        cx.run(&poison, |r| {
            r.matmul_with(
                &t,
                xb.all(),
                n,
                y.all(),
                accumulate,
                if c == CoopConfig::plain(c.tile) {
                    MatmulKernel::Coop(c.tile)
                } else {
                    MatmulKernel::CoopWith(c)
                },
            )
        })?;
        let (mut want, sum_abs) = reference(&wr, rows, cols, &f16_round(&x), n);
        if accumulate {
            for (o, a) in want.iter_mut().zip(&y0) {
                *o += a;
            }
        }
        out.push(row(
            KERNEL,
            format!(
                "{} {}{}",
                dtype.name(),
                config_name(&c),
                if accumulate { " +=" } else { "" }
            ),
            format!("n {n}, {rows} x {cols}"),
            &cx.read(&y, n * rows)?,
            &want,
            tol(sum_abs + 1.0),
        ));
    }
    out.push(row_split_part(dev, &mut rng)?);
    out.push(split_reuse(dev, &mut rng)?);
    out.push(half_x_reuse(dev, &mut rng)?);
    Ok(out)
}

/// The f16 copy of X is shared, and redone after X changes: one recording of Y1 = X W1^T,
/// Y2 = X W2^T (one conversion for both), a copy of X' over X, Y3 = X' W1^T (a new conversion).
/// The last compared element is the recording's dispatch count, which must be 5 (two
/// conversions, three products): 6 would mean no sharing, 4 a stale copy.
fn half_x_reuse(dev: &Device, rng: &mut Rng) -> Result<KernelParityRow> {
    let cx = Ctx { dev };
    let (n, rows, cols) = (53usize, 90usize, 320usize);
    let (b1, w1) = coop_weight(rng, WeightType::F16, rows, cols)?;
    let (b2, w2) = coop_weight(rng, WeightType::Q8_0, rows, cols)?;
    let t1 = Tensor::from_bytes(dev, "w1", WeightType::F16, rows, cols, &b1)?;
    let t2 = Tensor::from_bytes(dev, "w2", WeightType::Q8_0, rows, cols, &b2)?;
    let x = rng.vec(n * cols, -1.0, 1.0);
    let x2 = rng.vec(n * cols, -1.0, 1.0);
    let (xb, x2b) = (cx.input("x", &x)?, cx.input("x2", &x2)?);
    let ys: Vec<vkllm_vk::Buffer> = (0..3)
        .map(|_| cx.output("y", n * rows))
        .collect::<Result<_>>()?;
    let c = CoopConfig {
        x_f16: true,
        ..CoopConfig::plain(CoopTile::TINY)
    };
    let k = MatmulKernel::CoopWith(c);
    let mut dispatches = 0;
    cx.run(&ys.iter().collect::<Vec<_>>(), |r| {
        let before = r.dispatches();
        r.matmul_with(&t1, xb.all(), n, ys[0].all(), false, k)?;
        r.matmul_with(&t2, xb.all(), n, ys[1].all(), false, k)?;
        r.copy(x2b.all(), xb.all())?;
        r.matmul_with(&t1, xb.all(), n, ys[2].all(), false, k)?;
        dispatches = r.dispatches() - before;
        Ok(())
    })?;
    let mut got = Vec::new();
    let mut want = Vec::new();
    let mut sum_max = 0.0f64;
    for (y, (w, xs)) in ys.iter().zip([(&w1, &x), (&w2, &x), (&w1, &x2)]) {
        let (r, sum_abs) = reference(w, rows, cols, &f16_round(xs), n);
        sum_max = sum_max.max(sum_abs);
        got.extend(cx.read(y, n * rows)?);
        want.extend(r);
    }
    got.push(dispatches as f32);
    want.push(5.0);
    Ok(row(
        KERNEL,
        "f16 X shared by two products, redone after X is written",
        format!("n {n}, {rows} x {cols}, f16 and q8_0"),
        &got,
        &want,
        tol(sum_max + 1.0),
    ))
}

/// Split-K scratch reuse: one recording of SLOTS + 1 split products accumulating into Y (the
/// last reuses the first's scratch slot, whose counters the first must have left at zero),
/// submitted twice (a replay starts from the counters the first run left): Y = Y0 + 8 X W^T.
fn split_reuse(dev: &Device, rng: &mut Rng) -> Result<KernelParityRow> {
    let cx = Ctx { dev };
    let (n, rows, cols) = (77usize, 150usize, 320usize);
    let c = CoopConfig {
        tile: CoopTile::TINY,
        bk: 32,
        split: 3,
        stages: 2,
        prefetch_quant: false,
        x_f16: false,
        direct: false,
    };
    let (bytes, wr) = coop_weight(rng, WeightType::Q8_0, rows, cols)?;
    let x = rng.vec(n * cols, -1.0, 1.0);
    let y0 = rng.vec(n * rows, -1.0, 1.0);
    let t = Tensor::from_bytes(dev, "w", WeightType::Q8_0, rows, cols, &bytes)?;
    let xb = cx.input("x", &x)?;
    let y = cx.input("y", &y0)?;
    let mut r = vkllm_vk::Recorder::new(dev)?;
    let calls = vkllm_vk::COOP_SPLIT_SLOTS + 1;
    for _ in 0..calls {
        r.matmul_with(&t, xb.all(), n, y.all(), true, MatmulKernel::CoopWith(c))?;
    }
    let rec = r.finish()?;
    rec.submit()?;
    rec.submit()?;
    let (p, sum_abs) = reference(&wr, rows, cols, &f16_round(&x), n);
    let k = (2 * calls) as f32;
    let want: Vec<f32> = y0.iter().zip(&p).map(|(a, b)| a + k * b).collect();
    Ok(row(
        KERNEL,
        format!("q8_0 {} += x{} replayed", config_name(&c), 2 * calls),
        format!("n {n}, {rows} x {cols}"),
        &cx.read(&y, n * rows)?,
        &want,
        tol(k as f64 * sum_abs + 1.0),
    ))
}

/// A row-split part: rows [7, 7 + 100) of a 131-wide output (the columns outside the part must
/// keep their values: Y is filled with known values, not NaN, so an overwrite there fails).
fn row_split_part(dev: &Device, rng: &mut Rng) -> Result<KernelParityRow> {
    let cx = Ctx { dev };
    let (n, rows, cols, offset, stride) = (45usize, 100usize, 96usize, 7usize, 131usize);
    let (bytes, wr) = coop_weight(rng, WeightType::F16, rows, cols)?;
    let x = rng.vec(n * cols, -1.0, 1.0);
    let y0 = rng.vec(n * stride, -1.0, 1.0);
    let w = cx.input("w", &bytes)?;
    let xb = cx.input("x", &x)?;
    let y = cx.input("y", &y0)?;
    let tile = CoopTile::SMALL;
    let shape = MatShape {
        dtype: WeightType::F16,
        rows,
        cols,
        row_offset: offset,
        accumulate: false,
    };
    let d = MatmulCoop {
        w: w.all(),
        x: xb.all(),
        y: y.all(),
    }
    .dispatch(&shape, n, stride, dev.info().subgroup_size, tile)?;
    cx.run(&[], |r| r.dispatch(d))?;
    let (part, sum_abs) = reference(&wr, rows, cols, &f16_round(&x), n);
    let mut want = y0.clone();
    for t in 0..n {
        want[t * stride + offset..t * stride + offset + rows]
            .copy_from_slice(&part[t * rows..(t + 1) * rows]);
    }
    Ok(row(
        KERNEL,
        format!("f16 {} part", tile_name(tile)),
        format!(
            "n {n}, rows {offset}..{} of {stride} x {cols}",
            offset + rows
        ),
        &cx.read(&y, n * stride)?,
        &want,
        tol(sum_abs + 1.0),
    ))
}
