//! Parity cases: matvec (the reference kernels and the fast one, plain) and tiled matmul for
//! F32/F16/BF16 weights. The fused matvec variants are in `parity/matvec_fused.rs`.

use vkllm_kernels::WeightType;
use vkllm_kernels::matvec::MatShape;
use vkllm_kernels::matvec_fused::{MatvecImpl, MatvecOp};

use super::{Ctx, KernelParityRow, Rng, Tol, row, to_bf16, to_f16};
use vkllm_vk::Device;
use vkllm_vk::Result;
use vkllm_vk::{MatmulKernel, Tensor};

/// A dot product of f32 terms summed in another order differs by at most a small multiple of
/// eps * sum |terms| (blocked/tree sums: O(log n) eps); 16 eps covers it with margin.
pub(crate) fn tol_dot(sum_abs: f64) -> Tol {
    Tol {
        max_abs: 16.0 * f32::EPSILON as f64 * sum_abs,
        nmse: 1e-7,
    }
}

/// The weight as stored (bytes) and as the reference sees it (f32 of the rounded values).
pub(crate) fn weight(dtype: WeightType, w: &[f32]) -> (Vec<u8>, Vec<f32>) {
    match dtype {
        WeightType::F32 => (bytemuck::cast_slice(w).to_vec(), w.to_vec()),
        WeightType::F16 => {
            let (h, b) = to_f16(w);
            (bytemuck::cast_slice(&h).to_vec(), b)
        }
        WeightType::Bf16 => {
            let (h, b) = to_bf16(w);
            (bytemuck::cast_slice(&h).to_vec(), b)
        }
        q => unreachable!("float weights only (quantized cases live in parity/quant.rs): {q:?}"),
    }
}

/// A parity-table label for a matvec kernel choice.
pub(crate) fn impl_name(imp: MatvecImpl) -> &'static str {
    match imp {
        MatvecImpl::Reference => "ref",
        MatvecImpl::Fast => "fast",
        MatvecImpl::Int8 => "int8",
    }
}

pub(crate) fn max_sum_abs(w: &[f32], rows: usize, cols: usize, x: &[f32], n: usize) -> f64 {
    let mut m = 0f64;
    for t in 0..n {
        for r in 0..rows {
            let s: f64 = (0..cols)
                .map(|c| (w[r * cols + c] as f64 * x[t * cols + c] as f64).abs())
                .sum();
            m = m.max(s);
        }
    }
    m
}

pub(crate) fn matvec(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows_out = Vec::new();
    let cases = [
        (WeightType::F32, 333usize, 1000usize, false),
        (WeightType::F16, 333, 1000, false),
        (WeightType::Bf16, 333, 1000, false),
        (WeightType::F32, 1, 4099, false),
        (WeightType::F16, 517, 2050, true),
        (WeightType::Bf16, 3, 2002, false),
        (WeightType::F32, 77, 1026, true),
        (WeightType::F16, 1, 8, true),
        (WeightType::F32, 65, 4, false),
    ];
    let imps = [MatvecImpl::Reference, MatvecImpl::Fast];
    for ((dtype, rows, cols, accumulate), imp) in cases
        .into_iter()
        .flat_map(|c| imps.into_iter().map(move |i| (c, i)))
    {
        let w = rng.vec(rows * cols, -1.0, 1.0);
        let x = rng.vec(cols, -1.0, 1.0);
        let y0 = rng.vec(rows, -1.0, 1.0);
        let (bytes, wr) = weight(dtype, &w);
        let t = Tensor::from_bytes(dev, "w", dtype, rows, cols, &bytes)?;
        let xb = cx.input("x", &x)?;
        let y = if accumulate {
            cx.input("y", &y0)?
        } else {
            cx.output("y", rows)?
        };
        let poison: Vec<&vkllm_vk::Buffer> = if accumulate { vec![] } else { vec![&y] };
        cx.run(&poison, |r| {
            r.matvec_impl(imp, &t, xb.all(), y.all(), accumulate)
        })?;
        let mut want = vec![0.0; rows];
        vkllm_cpu::matvec(&wr, rows, cols, &x, &mut want);
        if accumulate {
            for (o, a) in want.iter_mut().zip(&y0) {
                *o += a;
            }
        }
        let mut tol = tol_dot(max_sum_abs(&wr, rows, cols, &x, 1) + 1.0);
        // The nmse that errors within max_abs imply: a single output that cancels to near zero
        // (the 1 x 8 accumulate case: y0 + dot) has a huge relative error at an absolute error
        // of a few ulp of its terms, which is what the kernel is held to.
        let sq: f64 = want.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        tol.nmse = tol
            .nmse
            .max(rows as f64 * tol.max_abs * tol.max_abs / sq.max(1e-300));
        let path = MatShape {
            dtype,
            rows,
            cols,
            row_offset: 0,
            accumulate,
        };
        let path = match imp {
            MatvecImpl::Fast if MatvecOp::plain(dtype, rows, cols).fast_supported() => "fast",
            _ if path.vectorizable() => "vec4",
            _ => "scalar",
        };
        rows_out.push(row(
            "matvec",
            format!(
                "{} {path}{}",
                dtype.name(),
                if accumulate { " +=" } else { "" }
            ),
            format!("{rows} x {cols}"),
            &cx.read(&y, rows)?,
            &want,
            tol,
        ));
    }
    Ok(rows_out)
}

pub(crate) fn matmul(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows_out = Vec::new();
    for (dtype, n, rows, cols, accumulate) in [
        (WeightType::F32, 37usize, 100usize, 200usize, false),
        (WeightType::F16, 37, 100, 200, false),
        (WeightType::Bf16, 37, 100, 200, false),
        (WeightType::F32, 70, 129, 333, true),
        (WeightType::F16, 1, 65, 18, false),
    ] {
        let w = rng.vec(rows * cols, -1.0, 1.0);
        let x = rng.vec(n * cols, -1.0, 1.0);
        let y0 = rng.vec(n * rows, -1.0, 1.0);
        let (bytes, wr) = weight(dtype, &w);
        let t = Tensor::from_bytes(dev, "w", dtype, rows, cols, &bytes)?;
        let xb = cx.input("x", &x)?;
        let y = if accumulate {
            cx.input("y", &y0)?
        } else {
            cx.output("y", n * rows)?
        };
        let poison: Vec<&vkllm_vk::Buffer> = if accumulate { vec![] } else { vec![&y] };
        // The portable kernel (f32 throughout); matmul_coop has its own case (f16 inputs).
        cx.run(&poison, |r| {
            r.matmul_with(&t, xb.all(), n, y.all(), accumulate, MatmulKernel::Portable)
        })?;
        let mut want = vec![0.0; n * rows];
        vkllm_cpu::matmul(&wr, rows, cols, &x, n, &mut want);
        if accumulate {
            for (o, a) in want.iter_mut().zip(&y0) {
                *o += a;
            }
        }
        let tol = tol_dot(max_sum_abs(&wr, rows, cols, &x, n) + 1.0);
        rows_out.push(row(
            "matmul",
            format!("{}{}", dtype.name(), if accumulate { " +=" } else { "" }),
            format!("n {n}, {rows} x {cols}"),
            &cx.read(&y, n * rows)?,
            &want,
            tol,
        ));
    }
    Ok(rows_out)
}
