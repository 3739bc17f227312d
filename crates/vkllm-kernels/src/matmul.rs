//! `shaders/matmul.wgsl`: tiled `Y = X W^T` for prefill.

use crate::matvec::{MatShape, check_weight};
use crate::sources::MATMUL as SRC;
use crate::spec::{MAX_GROUPS_X, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

/// Output tile (tokens x rows) of one workgroup.
pub const TILE: usize = 64;

pub static MATMUL: KernelSpec = KernelSpec {
    name: "matmul",
    file: "matmul.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("w"), rd("x"), rw("y")],
    push_size: 24,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatmulParams {
    pub n: u32,
    pub rows: u32,
    pub cols: u32,
    pub row_offset: u32,
    pub y_stride: u32,
    pub accumulate: u32,
}

impl MatmulParams {
    /// The push constants of `n` tokens of `s` into rows `y_stride` long (a typed error naming
    /// `k` for a value past u32).
    pub(crate) fn new(
        k: &'static KernelSpec,
        s: &MatShape,
        n: usize,
        y_stride: usize,
    ) -> Result<MatmulParams, Error> {
        Ok(MatmulParams {
            n: to_u32(k, "n", n)?,
            rows: to_u32(k, "rows", s.rows)?,
            cols: to_u32(k, "cols", s.cols)?,
            row_offset: to_u32(k, "row_offset", s.row_offset)?,
            y_stride: to_u32(k, "y_stride", y_stride)?,
            accumulate: s.accumulate as u32,
        })
    }
}

/// `Y[t, row_offset + r] (+)= sum_c X[t, c] W[r, c]` for `t < n`; `Y` rows are `y_stride` long.
pub struct Matmul<B> {
    pub w: B,
    pub x: B,
    pub y: B,
}

impl<B: KernelBuffer> Matmul<B> {
    /// `n` tokens; `y_stride` is the full output width (the weight's total rows). Quantized
    /// weights go to [`crate::mat_quant::MATMUL_QUANT`].
    pub fn dispatch(self, s: &MatShape, n: usize, y_stride: usize) -> Result<Dispatch<B>, Error> {
        if s.dtype.is_quantized() {
            return crate::mat_quant::matmul(self, s, n, y_stride);
        }
        let k = &MATMUL;
        check_weight(k, &self.w, s)?;
        if s.row_offset + s.rows > y_stride {
            return Err(shape_err(k, "part rows beyond y_stride"));
        }
        need(k, "x", &self.x, 4 * (n * s.cols) as u64)?;
        need(k, "y", &self.y, 4 * (n * y_stride) as u64)?;
        let gx = s.rows.div_ceil(TILE);
        let gy = n.div_ceil(TILE);
        if n == 0 || gx > MAX_GROUPS_X as usize || gy > MAX_GROUPS_X as usize {
            return Err(shape_err(k, format!("grid {gx} x {gy} out of range")));
        }
        let p = MatmulParams::new(k, s, n, y_stride)?;
        Ok(Dispatch::new(
            k,
            Overrides::new().set("DTYPE", s.dtype.code()),
            vec![self.w, self.x, self.y],
            &p,
            [gx as u32, gy as u32, 1],
        ))
    }
}
