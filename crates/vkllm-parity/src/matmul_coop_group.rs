//! Parity cases: grouped `matmul_coop` launches ([`Recorder::matmul_group`](vkllm_vk::Recorder)):
//! several weights over one X in one dispatch, each segment checked against the f64 product of
//! the f16-rounded inputs with `coop.rs`'s tolerance. Each row's last compared element is the
//! recording's dispatch count (X conversions + launches), so a group that silently ran as
//! separate products fails too.
//!
//! On a device that does not run the kernel the case reports one "n/a" row, never a pass.

use vkllm_kernels::WeightType;
use vkllm_kernels::matmul_coop::{CoopConfig, CoopTile};

use super::matmul_coop::{config_name, coop_weight, f16_round, not_applicable, reference, tol};
use super::{Ctx, KernelParityRow, Rng, row};
use vkllm_vk::DequantPolicy;
use vkllm_vk::Device;
use vkllm_vk::Result;
use vkllm_vk::{MatmulKernel, Tensor};

const KERNEL: &str = "matmul_coop_group";

/// One case: weight types with their rows (one group per type run of them), n, cols,
/// accumulate, the launch, and the dispatches it must record.
struct Case {
    weights: &'static [(WeightType, usize)],
    n: usize,
    cols: usize,
    accumulate: bool,
    cfg: CoopConfig,
    dispatches: usize,
}

pub(crate) fn matmul_coop_group(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if let Some(reason) = not_applicable(dev) {
        return Ok(vec![KernelParityRow::not_applicable(
            KERNEL,
            "every grouping",
            reason,
        )]);
    }
    let mut rng = Rng::new(seed);
    let launch = |tile, bk, split, x_f16| CoopConfig {
        tile,
        bk,
        split,
        stages: if bk == 64 && tile != CoopTile::TINY {
            1
        } else {
            2
        },
        prefetch_quant: false,
        x_f16,
        direct: false,
    };
    use WeightType::{F16, Q4_K, Q6_K, Q8_0};
    // Segment rows off the tile multiples (a segment's last workgroup column is partial), f32
    // and f16 X, with and without split-K (the partial tiles of all segments in one scratch),
    // three and two segments, and a mixed-type set (the Q4_K pair grouped, Q6_K apart).
    let cases = [
        Case {
            weights: &[(F16, 200), (F16, 37), (F16, 64)],
            n: 77,
            cols: 320,
            accumulate: false,
            cfg: launch(CoopTile::LARGE, 64, 1, true),
            dispatches: 2,
        },
        Case {
            weights: &[(F16, 100), (F16, 129), (F16, 31)],
            n: 45,
            cols: 1000,
            accumulate: true,
            cfg: launch(CoopTile::TINY, 32, 3, false),
            dispatches: 1,
        },
        Case {
            weights: &[(Q8_0, 129), (Q8_0, 64)],
            n: 130,
            cols: 32 * 37,
            accumulate: true,
            cfg: launch(CoopTile::TALL, 64, 2, true),
            dispatches: 2,
        },
        Case {
            weights: &[(Q4_K, 100), (Q4_K, 50), (Q6_K, 50)],
            n: 66,
            cols: 768,
            accumulate: false,
            cfg: launch(CoopTile::WIDE, 64, 1, true),
            dispatches: 3,
        },
        // The direct epilogue per segment (rows multiples of 4: each segment's own Y has a
        // 16-byte aligned stride): interior workgroups of all three segments load and store
        // through their own Y binding, edge ones go through shared memory.
        Case {
            weights: &[(F16, 256), (F16, 64), (F16, 68)],
            n: 140,
            cols: 512,
            accumulate: true,
            cfg: CoopConfig {
                direct: true,
                ..launch(CoopTile::TINY, 32, 1, true)
            },
            dispatches: 2,
        },
    ];
    let mut out = Vec::new();
    for c in &cases {
        out.push(group_case(dev, &mut rng, c, false)?);
    }
    // Quantized weights multiplied as f16 copies (`dequant_f16` first, coop_dequant.rs): a
    // group (one copy per weight, then one launch) and a single product on the automatic launch.
    let copied = [
        Case {
            weights: &[(Q8_0, 129), (Q8_0, 64), (Q8_0, 33)],
            n: 77,
            cols: 32 * 16,
            accumulate: false,
            cfg: launch(CoopTile::LARGE, 64, 1, true),
            dispatches: 5,
        },
        Case {
            weights: &[(Q4_K, 100), (Q4_K, 50)],
            n: 45,
            cols: 768,
            accumulate: true,
            cfg: launch(CoopTile::TINY, 32, 3, true),
            dispatches: 4,
        },
    ];
    for c in &copied {
        out.push(group_case(dev, &mut rng, c, true)?);
    }
    out.push(copied_auto(dev, &mut rng)?);
    Ok(out)
}

/// One Q6_K product on [`MatmulKernel::Auto`] through its f16 copy: the copy, X's conversion
/// (unless tuning `coop_x_f16=0`) and one launch, the dispatch count compared with the values. The
/// policy is [`DequantPolicy::Auto`] with this product exactly at both thresholds.
fn copied_auto(dev: &Device, rng: &mut Rng) -> Result<KernelParityRow> {
    let cx = Ctx { dev };
    let (n, rows, cols) = (70usize, 129usize, 512usize);
    let (bytes, wr) = coop_weight(rng, WeightType::Q6_K, rows, cols)?;
    let t = Tensor::from_bytes(dev, "w", WeightType::Q6_K, rows, cols, &bytes)?;
    let x = rng.vec(n * cols, -1.0, 1.0);
    let xb = cx.input("x", &x)?;
    let y = cx.output("y", n * rows)?;
    let mut dispatches = 0;
    cx.run(&[&y], |r| {
        r.set_dequant_policy(DequantPolicy::Auto {
            min_elements: rows * cols,
            min_tokens: n,
            min_tokens_q8: n,
        });
        let before = r.dispatches();
        r.matmul_with(&t, xb.all(), n, y.all(), false, MatmulKernel::Auto)?;
        dispatches = r.dispatches() - before;
        Ok(())
    })?;
    let (want, sum_abs) = reference(&wr, rows, cols, &f16_round(&x), n);
    let mut got = cx.read(&y, n * rows)?;
    let mut want = want;
    got.push(dispatches as f32);
    // The copy is recorded unless the weight holds a resident one (made apart).
    let copy = !dev.has_kept_f16(&t) as u32 as f32;
    want.push(1.0 + copy + dev.tuning().coop_x_f16 as u32 as f32);
    Ok(row(
        KERNEL,
        "q6_K as f16 copy, automatic launch",
        format!("n {n}, {rows} x {cols}"),
        &got,
        &want,
        tol(sum_abs + 1.0),
    ))
}

/// What [`run_group`] recorded and read back: every segment's output then its f64 reference,
/// the largest row sum of |products| (the tolerance's scale), the dispatches, the weights.
pub(crate) struct GroupRun {
    pub got: Vec<f32>,
    pub want: Vec<f32>,
    pub sum_max: f64,
    pub dispatches: usize,
    pub tensors: Vec<Tensor>,
}

/// Random `weights` (type, rows) over `cols` columns and `n` random tokens recorded as one
/// `Recorder::matmul_group_with(kernel)` under `policy` (accumulating onto random outputs, or
/// into poisoned ones), each segment read back beside its reference.
pub(crate) fn run_group(
    dev: &Device,
    rng: &mut Rng,
    weights: &[(WeightType, usize)],
    (n, cols): (usize, usize),
    accumulate: bool,
    (kernel, policy): (MatmulKernel, DequantPolicy),
) -> Result<GroupRun> {
    let cx = Ctx { dev };
    let mut tensors = Vec::new();
    let mut refs = Vec::new();
    let mut ys = Vec::new();
    let mut y0s = Vec::new();
    for (i, &(dtype, rows)) in weights.iter().enumerate() {
        let (bytes, wr) = coop_weight(rng, dtype, rows, cols)?;
        tensors.push(Tensor::from_bytes(
            dev,
            &format!("w{i}"),
            dtype,
            rows,
            cols,
            &bytes,
        )?);
        refs.push(wr);
        let y0 = rng.vec(n * rows, -1.0, 1.0);
        ys.push(match accumulate {
            true => cx.input("y", &y0)?,
            false => cx.output("y", n * rows)?,
        });
        y0s.push(y0);
    }
    let x = rng.vec(n * cols, -1.0, 1.0);
    let xb = cx.input("x", &x)?;
    let poison: Vec<&vkllm_vk::Buffer> = match accumulate {
        true => Vec::new(),
        false => ys.iter().collect(),
    };
    let mut dispatches = 0;
    cx.run(&poison, |r| {
        let ws: Vec<&Tensor> = tensors.iter().collect();
        let yv: Vec<_> = ys.iter().map(|y| y.all()).collect();
        r.set_dequant_policy(policy);
        let before = r.dispatches();
        r.matmul_group_with(&ws, xb.all(), n, &yv, accumulate, kernel)?;
        dispatches = r.dispatches() - before;
        Ok(())
    })?;
    let (mut got, mut want) = (Vec::new(), Vec::new());
    let mut sum_max = 0f64;
    let xr = f16_round(&x);
    for (i, &(_, rows)) in weights.iter().enumerate() {
        let (mut p, sum_abs) = reference(&refs[i], rows, cols, &xr, n);
        if accumulate {
            for (o, a) in p.iter_mut().zip(&y0s[i]) {
                *o += a;
            }
        }
        sum_max = sum_max.max(sum_abs);
        got.extend(cx.read(&ys[i], n * rows)?);
        want.extend(p);
    }
    Ok(GroupRun {
        got,
        want,
        sum_max,
        dispatches,
        tensors,
    })
}

/// `c` recorded with quantized weights multiplied as f16 copies (`copied`) or as they are.
fn group_case(dev: &Device, rng: &mut Rng, c: &Case, copied: bool) -> Result<KernelParityRow> {
    let policy = match copied {
        true => DequantPolicy::All,
        false => DequantPolicy::Off,
    };
    let kernel = MatmulKernel::CoopWith(c.cfg);
    let GroupRun {
        mut got,
        mut want,
        sum_max,
        dispatches,
        tensors,
    } = run_group(
        dev,
        rng,
        c.weights,
        (c.n, c.cols),
        c.accumulate,
        (kernel, policy),
    )?;
    let (n, cols) = (c.n, c.cols);
    got.push(dispatches as f32);
    // Resident copies (made apart) are not recorded.
    let kept = tensors.iter().filter(|t| dev.has_kept_f16(t)).count();
    want.push((c.dispatches - if copied { kept } else { 0 }) as f32);
    let names: Vec<String> = c
        .weights
        .iter()
        .map(|(d, r)| format!("{} {r}", d.name()))
        .collect();
    Ok(row(
        KERNEL,
        format!(
            "{}{}{}",
            config_name(&c.cfg),
            if c.accumulate { " +=" } else { "" },
            if copied { " f16 copies" } else { "" }
        ),
        format!("n {n}, cols {cols}, rows {}", names.join(" + ")),
        &got,
        &want,
        tol(sum_max + 1.0),
    ))
}
