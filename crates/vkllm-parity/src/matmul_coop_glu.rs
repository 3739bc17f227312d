//! Parity cases: the gated `matmul_coop` launch ([`Recorder::matmul_glu`](vkllm_vk::Recorder)):
//! `act(X gate^T) * (X up^T)` in one dispatch, against vkllm-cpu's activation of the f64
//! products of the f16-rounded inputs. Tolerance: `coop.rs`'s bound `tol_g` on each product
//! carried through the activation and the multiply, `max_abs = 1.2 tol_g max|up| + max|act(g)|
//! tol_u + 4 eps max|out|` (|SiLU'| <= 1.1, |GELU-tanh'| <= 1.13). The row's last compared element is
//! the recording's dispatch count, so a launch that silently fell back fails too; the f16 copy
//! of the output (GLU_HALF) is compared with the GPU's own f32 output: each half within one f16
//! spacing of it (its two f16 neighbours are; `to_f16.wgsl` allows either).
//!
//! On a device that does not run the kernel the case reports one "n/a" row, never a pass.

use vkllm_kernels::WeightType;
use vkllm_kernels::activation::Activation;
use vkllm_kernels::matmul_coop::{CoopConfig, CoopGlu, CoopSegment, CoopTile, MatmulCoopGroup};

use super::matmul_coop::{coop_weight, f16_round, not_applicable, reference, tol};
use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, row};
use vkllm_vk::DequantPolicy;
use vkllm_vk::Device;
use vkllm_vk::Result;
use vkllm_vk::Tensor;

const KERNEL: &str = "matmul_coop_glu";

pub(crate) fn matmul_coop_glu(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if let Some(reason) = not_applicable(dev) {
        return Ok(vec![KernelParityRow::not_applicable(
            KERNEL,
            "every gated launch",
            reason,
        )]);
    }
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    // The recorder's launch: rows off the tile multiples, n off the token tiles, both
    // activations, f16 / bf16 / f32 weights, cols that take f32 X (996) and f16 X (512), and a
    // Q8_0 pair multiplied as f16 copies.
    use Activation::{GeluTanh, Silu};
    use WeightType::{Bf16, F16, F32, Q8_0};
    for (dtype, n, rows, cols, act) in [
        (F16, 77, 300, 512, Silu),
        (Bf16, 45, 130, 996, GeluTanh),
        (F32, 130, 520, 256, Silu),
        (Q8_0, 64, 200, 32 * 16, GeluTanh),
    ] {
        out.push(recorder_case(dev, &mut rng, dtype, n, rows, cols, act)?);
    }
    // Explicit launches of each tiling, with the f16 copy of the output.
    for (tile, n, rows) in [
        (CoopTile::WIDE, 130, 520),
        (CoopTile::LARGE, 70, 200),
        (CoopTile::SMALL, 33, 96),
    ] {
        out.extend(half_case(dev, &mut rng, tile, n, rows)?);
    }
    Ok(out)
}

/// The CPU oracle: `act(g) * u` of the f64 products, and the tolerance of the comparison.
pub(crate) fn gated_reference(
    wg: &[f32],
    wu: &[f32],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    act: Activation,
) -> (Vec<f32>, Tol) {
    let xr = f16_round(x);
    let (g, sum_g) = reference(wg, rows, cols, &xr, n);
    let (u, sum_u) = reference(wu, rows, cols, &xr, n);
    let f = match act {
        Activation::Silu => vkllm_cpu::silu,
        Activation::GeluTanh => vkllm_cpu::gelu_tanh,
    };
    let a: Vec<f32> = g.iter().map(|&v| f(v)).collect();
    let want: Vec<f32> = a.iter().zip(&u).map(|(a, u)| a * u).collect();
    let max = |v: &[f32]| v.iter().fold(0f64, |m, x| m.max(x.abs() as f64));
    let (tg, tu) = (tol(sum_g + 1.0).max_abs, tol(sum_u + 1.0).max_abs);
    let max_abs = 1.2 * tg * max(&u) + max(&a) * tu + 4.0 * f32::EPSILON as f64 * max(&want);
    (
        want,
        Tol {
            max_abs,
            nmse: 1e-6,
        },
    )
}

/// Gate and up weights of `dtype` (values as the kernel reads them).
#[allow(clippy::type_complexity)]
fn weights(
    dev: &Device,
    rng: &mut Rng,
    dtype: WeightType,
    rows: usize,
    cols: usize,
) -> Result<((Tensor, Vec<f32>), (Tensor, Vec<f32>))> {
    let mut one = |name: &str| -> Result<(Tensor, Vec<f32>)> {
        let (bytes, wr) = coop_weight(rng, dtype, rows, cols)?;
        Ok((
            Tensor::from_bytes(dev, name, dtype, rows, cols, &bytes)?,
            wr,
        ))
    };
    Ok((one("gate")?, one("up")?))
}

/// [`Recorder::matmul_glu`](vkllm_vk::Recorder) on the automatic launch: X's conversion (where
/// the launch reads f16 X), f16 copies of quantized weights, one gated launch.
fn recorder_case(
    dev: &Device,
    rng: &mut Rng,
    dtype: WeightType,
    n: usize,
    rows: usize,
    cols: usize,
    act: Activation,
) -> Result<KernelParityRow> {
    let cx = Ctx { dev };
    let ((tg, wg), (tu, wu)) = weights(dev, rng, dtype, rows, cols)?;
    let x = rng.vec(n * cols, -1.0, 1.0);
    let xb = cx.input("x", &x)?;
    let y = cx.output("y", n * rows)?;
    let sg = dev.info().subgroup_size;
    let launch_type = if dtype.is_quantized() {
        WeightType::F16
    } else {
        dtype
    };
    let Some(cfg) = vkllm_vk::coop_glu_config(dev.tuning(), launch_type, rows, n, cols, sg) else {
        return Ok(KernelParityRow::not_applicable(
            KERNEL,
            "automatic launch",
            format!("no gated launch for {rows} rows x {cols} on subgroups of {sg}"),
        ));
    };
    let mut dispatches = 0;
    let mut ran = false;
    cx.run(&[&y], |r| {
        r.set_dequant_policy(DequantPolicy::All);
        let before = r.dispatches();
        ran = r.matmul_glu(&tg, &tu, xb.all(), n, y.all(), act)?;
        dispatches = r.dispatches() - before;
        Ok(())
    })?;
    let (mut want, t) = gated_reference(&wg, &wu, rows, cols, &x, n, act);
    let mut got = cx.read(&y, n * rows)?;
    // Dispatches: a copy of each quantized weight without a resident one, X's conversion (f16
    // X), the launch; 0 if the recorder declined (tuning `coop_glu=0` makes every row fail, as
    // it must).
    let copies = [&tg, &tu]
        .iter()
        .filter(|w| w.dtype.is_quantized() && !dev.has_kept_f16(w))
        .count();
    got.push(if ran { dispatches as f32 } else { -1.0 });
    want.push((copies + cfg.x_f16 as usize + 1) as f32);
    Ok(row(
        KERNEL,
        format!("{} {act:?}, automatic launch", dtype.name()),
        format!("n {n}, {rows} x {cols}"),
        &got,
        &want,
        t,
    ))
}

/// An explicit gated launch of `tile` (f16 weights, f16 X, 512 columns) with the f16 copy of
/// its output: the values against the oracle, then the copy against the GPU's f32 output.
fn half_case(
    dev: &Device,
    rng: &mut Rng,
    tile: CoopTile,
    n: usize,
    rows: usize,
) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let cols = 512;
    let act = Activation::Silu;
    let ((tg, wg), (tu, wu)) = weights(dev, rng, WeightType::F16, rows, cols)?;
    let x = rng.vec(n * cols, -1.0, 1.0);
    let xb = cx.input("x", &x)?;
    let y = cx.output("y", n * rows)?;
    let yh = cx.output("yh", n * rows / 2)?;
    let cfg = CoopConfig {
        bk: 64,
        stages: 1,
        x_f16: true,
        ..CoopConfig::plain(tile)
    };
    let sg = dev.info().subgroup_size;
    cx.run(&[&y, &yh], |r| {
        let segments = vec![segment(&tg, y.all(), rows), segment(&tu, y.all(), rows)];
        let xh = r.half_x(xb.all(), n * cols)?;
        let d = MatmulCoopGroup {
            x: xh.all(),
            segments,
            glu: Some(CoopGlu {
                act,
                half: Some(yh.all()),
            }),
        }
        .dispatch_with(n, sg, &cfg, None)?;
        r.dispatch(d)
    })?;
    let (want, t) = gated_reference(&wg, &wu, rows, cols, &x, n, act);
    let got = cx.read(&y, n * rows)?;
    let words: Vec<u32> = cx
        .read(&yh, n * rows / 2)?
        .iter()
        .map(|v| v.to_bits())
        .collect();
    // 0 where the half lies within one f16 spacing of the f32 value (its f16 neighbours do),
    // else 1.
    let misses: Vec<f32> = words
        .iter()
        .flat_map(|w| [*w as u16, (*w >> 16) as u16])
        .zip(&got)
        .map(|(h, &v)| {
            let spacing = match v.abs() < 2f32.powi(-14) {
                true => 2f32.powi(-24),
                false => 2f32.powi(v.abs().log2().floor() as i32 - 10),
            };
            let h = half::f16::from_bits(h).to_f32();
            if (h - v).abs() <= spacing { 0.0 } else { 1.0 }
        })
        .collect();
    let name = format!("{tile:?} Silu, f16 copy");
    let shape = format!("n {n}, {rows} x {cols}");
    Ok(vec![
        row(KERNEL, name.clone(), shape.clone(), &got, &want, t),
        row(
            KERNEL,
            name + " (halves)",
            shape,
            &misses,
            &vec![0.0; misses.len()],
            EXACT,
        ),
    ])
}

/// Weight `t` (one part) writing `y`, rows `rows` long, in a gated launch.
fn segment<'a>(
    t: &'a Tensor,
    y: vkllm_vk::BufSlice<'a>,
    rows: usize,
) -> CoopSegment<vkllm_vk::BufSlice<'a>> {
    CoopSegment {
        w: t.parts[0].buffer.all(),
        y,
        shape: t.shape(&t.parts[0], false),
        y_stride: rows,
    }
}
