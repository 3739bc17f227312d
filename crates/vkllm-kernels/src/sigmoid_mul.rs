//! `shaders/sigmoid_mul.wgsl`: `x *= sigmoid(gate)`, elementwise or one gate per row.

use crate::sources::SIGMOID_MUL as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 256;

pub static SIGMOID_MUL: KernelSpec = KernelSpec {
    name: "sigmoid_mul",
    file: "sigmoid_mul.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rw("x"), rd("gate")],
    push_size: 16,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SigmoidMulParams {
    pub n: u32,
    pub cols: u32,
    pub per_row: u32,
    pub pad: u32,
}

/// `x[r, c] *= sigmoid(gate[r, c])`, or `sigmoid(gate[r])` when `per_row`.
pub struct SigmoidMul<B> {
    pub x: B,
    pub gate: B,
}

impl<B: KernelBuffer> SigmoidMul<B> {
    pub fn dispatch(self, rows: usize, cols: usize, per_row: bool) -> Result<Dispatch<B>, Error> {
        let k = &SIGMOID_MUL;
        if rows == 0 || cols == 0 {
            return Err(shape_err(k, "empty shape"));
        }
        let n = rows * cols;
        need(k, "x", &self.x, 4 * n as u64)?;
        need(
            k,
            "gate",
            &self.gate,
            4 * if per_row { rows } else { n } as u64,
        )?;
        let p = SigmoidMulParams {
            n: to_u32(k, "n", n)?,
            cols: to_u32(k, "cols", cols)?,
            per_row: per_row as u32,
            pad: 0,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new().set("WG", WG as f64),
            vec![self.x, self.gate],
            &p,
            grid_for(k, (n as u64).div_ceil(WG as u64))?,
        ))
    }
}
