//! `shaders/gated_rmsnorm.wgsl`: RMSNorm gated by SiLU.

use crate::sources::GATED_RMSNORM as SRC;
use crate::spec::{grid_for, need, rd, rw, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 64;

pub static GATED_RMSNORM: KernelSpec = KernelSpec {
    name: "gated_rmsnorm",
    file: "gated_rmsnorm.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("x"), rd("z"), rd("weight"), rw("out")],
    push_size: 16,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GatedNormParams {
    pub rows: u32,
    pub n: u32,
    pub eps: f32,
    pub pad: u32,
}

/// `out = (weight * rmsnorm(x)) * silu(z)` over `rows` rows of `n` (`out` must not alias).
pub struct GatedRmsNorm<B> {
    pub x: B,
    pub z: B,
    pub weight: B,
    pub out: B,
}

impl<B: KernelBuffer> GatedRmsNorm<B> {
    pub fn dispatch(self, rows: usize, n: usize, eps: f32) -> Result<Dispatch<B>, Error> {
        let k = &GATED_RMSNORM;
        let bytes = 4 * (rows * n) as u64;
        need(k, "x", &self.x, bytes)?;
        need(k, "z", &self.z, bytes)?;
        need(k, "weight", &self.weight, 4 * n as u64)?;
        need(k, "out", &self.out, bytes)?;
        let p = GatedNormParams {
            rows: to_u32(k, "rows", rows)?,
            n: to_u32(k, "n", n)?,
            eps,
            pad: 0,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new().set("WG", WG as f64),
            vec![self.x, self.z, self.weight, self.out],
            &p,
            grid_for(k, rows as u64)?,
        ))
    }
}
