//! `shaders/dequant_f16.wgsl`: a quantized weight's rows as f16 (two halves per u32 word, the
//! layout of an f16 weight), for prefill products that multiply a dequantized copy.

use crate::sources::DEQUANT_F16 as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, WeightType};

const WG: u32 = 256;

/// Words of `dq_in` in the shader: one workgroup's blocks (`WG` units of 16 elements) plus a
/// word either side for byte offsets that are not word-aligned.
const DQ_IN: u64 = 1096;

/// Words of a weight one workgroup stages: its `WG / (BLOCK / 16)` blocks, + 2.
fn staged_words(dtype: WeightType) -> u64 {
    (WG as u64 * 16 / dtype.block_size() as u64) * dtype.bytes() / 4 + 2
}

pub static DEQUANT_F16: KernelSpec = KernelSpec {
    name: "dequant_f16",
    file: "dequant_f16.wgsl",
    entry: "dequant_f16",
    source: SRC,
    bindings: &[rd("w"), rw("out")],
    push_size: 8,
    exact_fp: false,
    glsl: None,
};

/// Bytes of the f16 copy of a `rows` x `cols` weight.
pub fn f16_bytes(rows: usize, cols: usize) -> u64 {
    2 * (rows * cols) as u64
}

/// `out` = the `rows` x `cols` quantized weight `w` as f16 rows.
pub struct DequantF16<B> {
    pub w: B,
    pub out: B,
}

impl<B: KernelBuffer> DequantF16<B> {
    /// `dtype` must be quantized and `cols` a whole number of its blocks.
    pub fn dispatch(
        self,
        dtype: WeightType,
        rows: usize,
        cols: usize,
    ) -> Result<Dispatch<B>, Error> {
        let k = &DEQUANT_F16;
        if !dtype.is_quantized() {
            return Err(shape_err(
                k,
                format!("{} is not a quantized type", dtype.name()),
            ));
        }
        let Some(row_bytes) = dtype.row_bytes(cols as u64) else {
            return Err(shape_err(
                k,
                format!("{cols} columns are not whole {} blocks", dtype.name()),
            ));
        };
        if staged_words(dtype) > DQ_IN {
            return Err(shape_err(
                k,
                format!("{} blocks do not fit the workgroup's staging", dtype.name()),
            ));
        }
        need(k, "w", &self.w, row_bytes * rows as u64)?;
        need(k, "out", &self.out, f16_bytes(rows, cols))?;
        let units = to_u32(k, "rows * cols / 16", rows * cols / 16)?;
        let p = [to_u32(k, "rows", rows)?, to_u32(k, "cols", cols)?];
        let groups = grid_for(k, (units as u64).div_ceil(WG as u64))?;
        Ok(Dispatch::new(
            k,
            crate::mat_quant::format_overrides(dtype).set("WG", WG as f64),
            vec![self.w, self.out],
            &p,
            groups,
        ))
    }
}
