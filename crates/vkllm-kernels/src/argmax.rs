//! `shaders/argmax.wgsl`: greedy sampling (index of the largest logit per row).

use crate::sources::ARGMAX as SRC;
use crate::spec::{grid_for, need, rd, rw, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

pub static ARGMAX: KernelSpec = KernelSpec {
    name: "argmax",
    file: "argmax.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("logits"), rw("out")],
    push_size: 8,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ArgmaxParams {
    pub rows: u32,
    pub n: u32,
}

/// `out[r] = argmax(logits[r, ..n])` as u32 (lowest index on ties, NaN skipped).
pub struct Argmax<B> {
    pub logits: B,
    pub out: B,
}

impl<B: KernelBuffer> Argmax<B> {
    pub fn dispatch(self, rows: usize, n: usize) -> Result<Dispatch<B>, Error> {
        let k = &ARGMAX;
        need(k, "logits", &self.logits, 4 * (rows * n) as u64)?;
        need(k, "out", &self.out, 4 * rows as u64)?;
        let p = ArgmaxParams {
            rows: to_u32(k, "rows", rows)?,
            n: to_u32(k, "n", n)?,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new(),
            vec![self.logits, self.out],
            &p,
            grid_for(k, rows as u64)?,
        ))
    }
}
