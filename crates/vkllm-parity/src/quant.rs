//! Parity cases: matvec, matmul and embedding over llama.cpp-quantized weights
//! (`mat_quant.wgsl`), against vkllm-cpu's `quant::matvec_quant` and `quant::dequantize_row`.
//!
//! Weights are random blocks: random bytes whose f16 scale fields are overwritten with random
//! finite scales (every bit pattern of the quants and sub-block scales occurs), plus, for the
//! formats vkllm-cpu can quantize, blocks made by `quant::quantize_row` from random values.
//! Row lengths are a multiple of the block size but not of 256 where the format allows, so
//! blocks straddle 4-byte words (Q8_0 rows of 37 blocks are 1258 bytes).

use vkllm_cpu::quant::{QuantType, dequantize_row, matvec_quant, quantize_row};
use vkllm_kernels::WeightType;
use vkllm_kernels::matvec_fused::MatvecImpl;

use super::{Ctx, EXACT, KernelParityRow, Rng, row};
use crate::mat::{impl_name, max_sum_abs, tol_dot};
use vkllm_vk::Device;
use vkllm_vk::Result;
use vkllm_vk::{MatmulKernel, Tensor};

pub(crate) fn cpu_err(e: vkllm_cpu::CpuError) -> vkllm_vk::Error {
    vkllm_vk::Error::Shape(e.to_string())
}

pub(crate) fn quant_type(dtype: WeightType) -> Result<QuantType> {
    QuantType::from_ggml_id(dtype.ggml_id()).map_err(cpu_err)
}

/// Byte offsets of the f16 scale fields in one block of `dtype`.
fn f16_fields(dtype: WeightType) -> &'static [usize] {
    match dtype {
        WeightType::Q4_1 | WeightType::Q5_1 | WeightType::Q4_K | WeightType::Q5_K => &[0, 2],
        WeightType::Q2_K => &[80, 82],
        WeightType::Q3_K => &[108],
        WeightType::Q6_K => &[208],
        _ => &[0],
    }
}

/// `rows` rows of `cols` random elements of `dtype`: random bytes with finite f16 scales of
/// magnitude 2^-9..2^-5 (random sign), so dequantized values stay O(1); one scale in eight is
/// an f16 subnormal (2^-24..2^-15), as the super-block scales of small real weights are.
fn random_blocks(rng: &mut Rng, dtype: WeightType, rows: usize, cols: usize) -> Vec<u8> {
    let ts = dtype.bytes() as usize;
    let n_blocks = rows * cols / dtype.block_size();
    let mut out: Vec<u8> = (0..n_blocks * ts).map(|_| rng.next_u64() as u8).collect();
    for b in out.chunks_exact_mut(ts) {
        for &off in f16_fields(dtype) {
            let mag = if rng.below(8) == 0 {
                2f32.powf(rng.f32(-24.0, -15.0))
            } else {
                2f32.powf(rng.f32(-9.0, -5.0))
            };
            let v = if rng.below(2) == 0 { mag } else { -mag };
            b[off..off + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }
    }
    out
}

/// Random weights of `dtype`: `quantize_row` of uniform values where vkllm-cpu can quantize
/// the format and `from_quantizer` is set, else [`random_blocks`].
pub(crate) fn weights(
    rng: &mut Rng,
    dtype: WeightType,
    rows: usize,
    cols: usize,
    from_quantizer: bool,
) -> Result<(Vec<u8>, &'static str)> {
    let qt = quant_type(dtype)?;
    if from_quantizer && qt.can_quantize() {
        let v = rng.vec(rows * cols, -1.0, 1.0);
        Ok((quantize_row(qt, &v).map_err(cpu_err)?, "quantized"))
    } else {
        Ok((random_blocks(rng, dtype, rows, cols), "random blocks"))
    }
}

pub(crate) fn dequantize(dtype: WeightType, bytes: &[u8], elems: usize) -> Result<Vec<f32>> {
    let mut out = vec![0.0; elems];
    dequantize_row(quant_type(dtype)?, bytes, &mut out).map_err(cpu_err)?;
    Ok(out)
}

/// Row lengths for `dtype`: legacy formats get multiples of 32 that are not multiples of 256
/// (odd block counts, so rows straddle words); K-quants 768, 4352, 256 and 2304 (3, 17, 1 and 9
/// super-blocks). The second is over 256 units of 16 (the matvec loop runs twice), the third
/// takes the smallest matvec workgroup.
fn col_choices(dtype: WeightType) -> [usize; 4] {
    if dtype.block_size() == 32 {
        [32 * 37, 32 * 129, 96, 32 * 73]
    } else {
        [768, 4352, 256, 2304]
    }
}

/// matvec (odd row counts, one accumulating; the reference and the fast kernel), matmul (tokens and rows not multiples of the
/// 64 x 64 tile) and embedding for one quantized format.
pub(crate) fn quant_case(
    dev: &Device,
    seed: u64,
    dtype: WeightType,
) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let [c0, c1, c2, c3] = col_choices(dtype);
    let qt = quant_type(dtype)?;

    for (rows, cols, accumulate, from_q, imp) in [
        (333usize, c0, false, false, MatvecImpl::Reference),
        (333, c0, false, false, MatvecImpl::Fast),
        (333, c0, false, true, MatvecImpl::Reference),
        (333, c0, false, true, MatvecImpl::Fast),
        (5, c1, true, false, MatvecImpl::Reference),
        (5, c1, true, false, MatvecImpl::Fast),
        (77, c2, false, true, MatvecImpl::Reference),
        (77, c2, false, true, MatvecImpl::Fast),
    ] {
        let (bytes, how) = weights(&mut rng, dtype, rows, cols, from_q)?;
        let x = rng.vec(cols, -1.0, 1.0);
        let y0 = rng.vec(rows, -1.0, 1.0);
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
        matvec_quant(qt, &bytes, rows, cols, &x, &mut want).map_err(cpu_err)?;
        if accumulate {
            for (o, a) in want.iter_mut().zip(&y0) {
                *o += a;
            }
        }
        let wr = dequantize(dtype, &bytes, rows * cols)?;
        let tol = tol_dot(max_sum_abs(&wr, rows, cols, &x, 1) + 1.0);
        out.push(row(
            "matvec_quant",
            format!(
                "{} {how}{} {}",
                dtype.name(),
                if accumulate { " +=" } else { "" },
                impl_name(imp)
            ),
            format!("{rows} x {cols}"),
            &cx.read(&y, rows)?,
            &want,
            tol,
        ));
    }

    for (n, rows, cols, accumulate) in [(37usize, 100usize, c2, false), (70, 129, c3, true)] {
        let (bytes, how) = weights(&mut rng, dtype, rows, cols, false)?;
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
        // The portable kernel (f32 throughout); matmul_coop has its own case (f16 inputs).
        cx.run(&poison, |r| {
            r.matmul_with(&t, xb.all(), n, y.all(), accumulate, MatmulKernel::Portable)
        })?;
        // The reference: matvec_quant once per token.
        let mut want = vec![0.0; n * rows];
        for (xt, yt) in x.chunks_exact(cols).zip(want.chunks_exact_mut(rows)) {
            matvec_quant(qt, &bytes, rows, cols, xt, yt).map_err(cpu_err)?;
        }
        if accumulate {
            for (o, a) in want.iter_mut().zip(&y0) {
                *o += a;
            }
        }
        let wr = dequantize(dtype, &bytes, rows * cols)?;
        let tol = tol_dot(max_sum_abs(&wr, rows, cols, &x, n) + 1.0);
        out.push(row(
            "matmul_quant",
            format!(
                "{} {how}{}",
                dtype.name(),
                if accumulate { " +=" } else { "" }
            ),
            format!("n {n}, {rows} x {cols}"),
            &cx.read(&y, n * rows)?,
            &want,
            tol,
        ));
    }

    // Embedding gather: the GPU's dequantized values must equal the CPU's bit for bit (random
    // blocks, so f16-subnormal scales occur: about 50 scale fields are gathered).
    let (vocab, dim, n) = (51usize, c0, 9usize);
    let (bytes, how) = weights(&mut rng, dtype, vocab, dim, false)?;
    let ids: Vec<u32> = (0..n).map(|_| rng.below(vocab as u64) as u32).collect();
    let t = Tensor::from_bytes(dev, "table", dtype, vocab, dim, &bytes)?;
    let idb = cx.input("ids", &ids)?;
    let o = cx.output("out", n * dim)?;
    cx.run(&[&o], |r| r.embedding(&t, idb.all(), n, o.all()))?;
    let table = dequantize(dtype, &bytes, vocab * dim)?;
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&id| {
            table[id as usize * dim..(id as usize + 1) * dim]
                .iter()
                .copied()
        })
        .collect();
    out.push(row(
        "embedding_quant",
        format!("{} {how}", dtype.name()),
        format!("vocab {vocab} dim {dim} n {n}"),
        &cx.read(&o, n * dim)?,
        &want,
        EXACT,
    ));
    Ok(out)
}

macro_rules! quant_cases {
    ($($name:ident => $ty:ident),* $(,)?) => {
        $(
            pub(crate) fn $name(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
                quant_case(dev, seed, WeightType::$ty)
            }
        )*
    };
}

quant_cases!(
    quant_q8_0 => Q8_0,
    quant_q4_0 => Q4_0,
    quant_q4_1 => Q4_1,
    quant_q5_0 => Q5_0,
    quant_q5_1 => Q5_1,
    quant_iq4_nl => IQ4_NL,
    quant_q4_k => Q4_K,
    quant_q6_k => Q6_K,
    quant_q5_k => Q5_K,
    quant_q3_k => Q3_K,
    quant_q2_k => Q2_K,
    quant_iq4_xs => IQ4_XS,
);
