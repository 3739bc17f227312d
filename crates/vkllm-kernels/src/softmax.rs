//! `shaders/softmax.wgsl`: row softmax.

use crate::sources::SOFTMAX as SRC;
use crate::spec::{grid_for, need, rd, rw, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 256;

pub static SOFTMAX: KernelSpec = KernelSpec {
    name: "softmax",
    file: "softmax.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("x"), rw("out")],
    push_size: 8,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SoftmaxParams {
    pub rows: u32,
    pub n: u32,
}

/// `out = softmax(x)` over each of `rows` rows of length `n` (`out` may be `x`).
pub struct Softmax<B> {
    pub x: B,
    pub out: B,
}

impl<B: KernelBuffer> Softmax<B> {
    pub fn dispatch(self, rows: usize, n: usize) -> Result<Dispatch<B>, Error> {
        let k = &SOFTMAX;
        let bytes = 4 * (rows * n) as u64;
        need(k, "x", &self.x, bytes)?;
        need(k, "out", &self.out, bytes)?;
        let p = SoftmaxParams {
            rows: to_u32(k, "rows", rows)?,
            n: to_u32(k, "n", n)?,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new().set("WG", WG as f64),
            vec![self.x, self.out],
            &p,
            grid_for(k, rows as u64)?,
        ))
    }
}
