//! `shaders/rmsnorm.wgsl`: RMSNorm (hidden norm, q/k per-head norm) and the fused residual add.

use crate::sources::RMSNORM as SRC;
use crate::spec::{grid_for, need, rd, rw, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 256;

pub static RMSNORM: KernelSpec = KernelSpec {
    name: "rmsnorm",
    file: "rmsnorm.wgsl",
    entry: "main",
    source: SRC,
    // Binding 3 is add_rmsnorm's residual (unused here: `out` fills it); 4 the f16 copy.
    bindings: &[rd("x"), rd("weight"), rw("out"), rw("unused"), rw("out16")],
    push_size: 16,
    exact_fp: false,
    glsl: None,
};
pub static ADD_RMSNORM: KernelSpec = KernelSpec {
    name: "add_rmsnorm",
    file: "rmsnorm.wgsl",
    entry: "add_rmsnorm",
    source: SRC,
    bindings: &[rd("x"), rd("weight"), rw("out"), rw("residual")],
    push_size: 16,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RmsNormParams {
    pub rows: u32,
    pub n: u32,
    pub eps: f32,
    pub weight_offset: f32,
}

/// Norm settings: `eps`, and `weight_offset` (0 for Llama/Qwen, 1 for Gemma's `1 + w`).
#[derive(Clone, Copy, Debug)]
pub struct NormShape {
    /// Rows to normalise (tokens, or tokens * heads for the per-head q/k norm).
    pub rows: usize,
    /// Row length (= weight length).
    pub n: usize,
    pub eps: f32,
    pub weight_offset: f32,
}

impl NormShape {
    fn params(&self, k: &'static KernelSpec) -> Result<RmsNormParams, Error> {
        Ok(RmsNormParams {
            rows: to_u32(k, "rows", self.rows)?,
            n: to_u32(k, "n", self.n)?,
            eps: self.eps,
            weight_offset: self.weight_offset,
        })
    }
}

/// `out = rmsnorm(x) * (weight_offset + weight)`, row by row (`out` may be `x`).
pub struct RmsNorm<B> {
    pub x: B,
    pub weight: B,
    pub out: B,
}

impl<B: KernelBuffer> RmsNorm<B> {
    pub fn dispatch(self, s: &NormShape) -> Result<Dispatch<B>, Error> {
        self.build(s, None)
    }

    /// [`RmsNorm::dispatch`] that also writes the output as f16 pairs to `out16` (`rows * n / 2`
    /// u32 words, the layout of `to_f16`; `n` even).
    pub fn dispatch_with_half(self, s: &NormShape, out16: B) -> Result<Dispatch<B>, Error> {
        self.build(s, Some(out16))
    }

    fn build(self, s: &NormShape, out16: Option<B>) -> Result<Dispatch<B>, Error> {
        let k = &RMSNORM;
        let bytes = 4 * (s.rows * s.n) as u64;
        need(k, "x", &self.x, bytes)?;
        need(k, "weight", &self.weight, 4 * s.n as u64)?;
        need(k, "out", &self.out, bytes)?;
        let mut o = Overrides::new().set("WG", WG as f64);
        if let Some(h) = &out16 {
            if !s.n.is_multiple_of(2) {
                return Err(crate::spec::shape_err(
                    k,
                    format!("f16 copy of odd rows ({})", s.n),
                ));
            }
            need(k, "out16", h, bytes / 2)?;
            o = o.set("HALF", 1.0);
        }
        Ok(Dispatch::new(
            k,
            o,
            vec![
                self.x,
                self.weight,
                self.out,
                self.out,
                out16.unwrap_or(self.out),
            ],
            &s.params(k)?,
            grid_for(k, s.rows as u64)?,
        ))
    }
}

/// `residual += x; out = rmsnorm(residual) * (weight_offset + weight)`.
pub struct AddRmsNorm<B> {
    pub x: B,
    pub residual: B,
    pub weight: B,
    pub out: B,
}

impl<B: KernelBuffer> AddRmsNorm<B> {
    pub fn dispatch(self, s: &NormShape) -> Result<Dispatch<B>, Error> {
        let k = &ADD_RMSNORM;
        let bytes = 4 * (s.rows * s.n) as u64;
        need(k, "x", &self.x, bytes)?;
        need(k, "residual", &self.residual, bytes)?;
        need(k, "weight", &self.weight, 4 * s.n as u64)?;
        need(k, "out", &self.out, bytes)?;
        Ok(Dispatch::new(
            k,
            Overrides::new().set("WG", WG as f64),
            vec![self.x, self.weight, self.out, self.residual],
            &s.params(k)?,
            grid_for(k, s.rows as u64)?,
        ))
    }
}
