//! Parity cases: `dequant_f16.wgsl` (a quantized weight's rows as f16) against
//! `vkllm_cpu::dequant_f16`: every quantized format, odd row counts, rows of odd block counts
//! (legacy formats: rows straddle words), the output poisoned first. Each half must be one of
//! the two f16 values around the CPU's value (exactly: the block arithmetic is the same f32
//! operations, only the final rounding direction is the device's).

use vkllm_kernels::WeightType;
use vkllm_kernels::dequant_f16::{DequantF16, f16_bytes};

use super::basic::halves_row;
use super::quant::{cpu_err, quant_type, weights};
use super::{Ctx, KernelParityRow, Rng};
use vkllm_vk::Device;
use vkllm_vk::Result;

pub(crate) fn dequant_f16(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for (i, dtype) in WeightType::QUANTIZED.into_iter().enumerate() {
        let (rows, cols) = match dtype.block_size() {
            32 => (37 + 2 * i, 32 * 13),
            _ => (7 + i, 256 * 3),
        };
        // Quantizer output for the formats vkllm-cpu quantizes, random blocks (any scales) for
        // every format in turn.
        let (bytes, how) = weights(&mut rng, dtype, rows, cols, i % 2 == 0)?;
        let want =
            vkllm_cpu::dequant_f16(quant_type(dtype)?, &bytes, rows, cols).map_err(cpu_err)?;
        let w = cx.input("w", &bytes)?;
        let words = (f16_bytes(rows, cols) / 4) as usize;
        let o = cx.output("out", words)?;
        cx.run(&[&o], |r| {
            r.dispatch(
                DequantF16 {
                    w: w.all(),
                    out: o.all(),
                }
                .dispatch(dtype, rows, cols)?,
            )
        })?;
        let got = dev.read_vec::<u32>(&o, words)?;
        out.push(halves_row(
            "dequant_f16",
            &format!("{} ({how})", dtype.name()),
            format!("{rows} x {cols}"),
            &got,
            &want,
        ));
    }
    Ok(out)
}
