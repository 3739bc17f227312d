//! Parity cases: the few-token cooperative product (`matmul_narrow.wgsl`) for every quantized
//! weight type it takes, against an f64 product of the f16-rounded inputs (the tolerance and
//! reference of [`crate::matmul_coop`]: the kernel rounds X and the dequantized W to f16 and
//! accumulates in f32).
//!
//! Rows cover 1 to 4 token tiles (n off the multiples of 16), rows off the 64-row tiles, steps
//! that end inside the last 256 elements, rows that are 16-byte aligned (grouped word loads) and
//! not (Q6_K's 210-byte blocks, Q8_0 rows of 37 blocks), split-K with an empty last share, f16
//! and f32 X, both accumulate modes, and the runtime's automatic choice. On a device without
//! the cooperative-matrix feature each case reports one "n/a" row.

use vkllm_kernels::WeightType;
use vkllm_kernels::matmul_narrow::NarrowConfig;

use super::matmul_coop::{coop_weight, f16_round, not_applicable, reference, tol};
use super::{Ctx, KernelParityRow, Rng, row};
use vkllm_vk::{Device, MatmulKernel, Result, Tensor};

const KERNEL: &str = "matmul_narrow";

pub(crate) fn matmul_narrow(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
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
    let nc = |split, x_f16| {
        Some(NarrowConfig {
            split,
            x_f16,
            q6k_direct: false,
        })
    };
    // Q6_K straight into registers (`main_q6k`; the staged path where the subgroup size does
    // not allow it).
    let direct = |split, x_f16| {
        Some(NarrowConfig {
            split,
            x_f16,
            q6k_direct: true,
        })
    };
    use WeightType as T;
    // (dtype, n, rows, cols, accumulate, launch; None: MatmulKernel::Auto)
    let cases: [(T, usize, usize, usize, bool, Option<NarrowConfig>); 27] = [
        (T::Q4_K, 16, 100, 768, false, nc(1, false)),
        (T::Q4_K, 2, 64, 256, false, nc(1, true)),
        (T::Q4_K, 33, 129, 1280, true, nc(3, true)),
        (T::Q4_K, 64, 200, 4096, false, nc(5, true)),
        (T::Q4_K, 50, 1000, 512, true, nc(1, false)),
        (T::Q6_K, 17, 100, 768, false, nc(1, true)),
        (T::Q6_K, 64, 65, 1024, true, nc(2, false)),
        (T::Q6_K, 5, 333, 256 * 7, false, nc(4, true)),
        (T::Q6_K, 16, 100, 768, false, direct(1, true)),
        (T::Q6_K, 33, 129, 256 * 7, true, direct(3, true)),
        (T::Q6_K, 64, 65, 1024, false, direct(2, false)),
        (T::Q6_K, 2, 64, 256 * 5, true, direct(1, false)),
        (T::Q6_K, 47, 1000, 512, false, direct(4, true)),
        (T::Q8_0, 16, 100, 32 * 37, false, nc(1, false)),
        (T::Q8_0, 48, 129, 4096, true, nc(3, true)),
        (T::Q8_0, 31, 64, 512, false, nc(3, true)),
        (T::Q4_0, 20, 100, 32 * 13, false, nc(1, true)),
        (T::Q4_0, 64, 257, 2048, true, nc(2, true)),
        (T::Q4_1, 20, 100, 32 * 13, false, nc(1, true)),
        (T::Q5_0, 40, 100, 32 * 13, true, nc(2, false)),
        (T::Q5_1, 9, 70, 32 * 29, false, nc(1, true)),
        (T::IQ4_NL, 20, 100, 32 * 13, false, nc(1, true)),
        (T::Q2_K, 24, 100, 768, false, nc(1, true)),
        (T::Q3_K, 24, 100, 768, false, nc(2, true)),
        (T::Q5_K, 60, 100, 768, true, nc(1, true)),
        (T::IQ4_XS, 24, 100, 768, false, nc(1, true)),
        (T::Q4_K, 24, 300, 1024, false, None),
    ];
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
        let kernel = c.map_or(MatmulKernel::Auto, MatmulKernel::Narrow);
        cx.run(&poison, |r| {
            r.matmul_with(&t, xb.all(), n, y.all(), accumulate, kernel)
        })?;
        let (mut want, sum_abs) = reference(&wr, rows, cols, &f16_round(&x), n);
        if accumulate {
            for (o, a) in want.iter_mut().zip(&y0) {
                *o += a;
            }
        }
        let name = match c {
            Some(c) => format!(
                "split {}{}{}",
                c.split,
                if c.x_f16 { " x16" } else { "" },
                if c.q6k_direct { " direct" } else { "" }
            ),
            None => "auto".into(),
        };
        out.push(row(
            KERNEL,
            format!(
                "{} {name}{}",
                dtype.name(),
                if accumulate { " +=" } else { "" }
            ),
            format!("n {n}, {rows} x {cols}"),
            &cx.read(&y, n * rows)?,
            &want,
            tol(sum_abs + 1.0),
        ));
    }
    Ok(out)
}
