//! `shaders/activation.wgsl`: gated activations fused with the multiply.

use crate::sources::ACTIVATION;
use crate::spec::{grid_for, need, rd, rw, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 256;

pub static SILU_MUL: KernelSpec = KernelSpec {
    name: "silu_mul",
    file: "activation.wgsl",
    entry: "silu_mul",
    source: ACTIVATION,
    bindings: &[rd("gate"), rd("up"), rw("out"), rw("out16")],
    push_size: 4,
    exact_fp: false,
    glsl: None,
};
pub static GELU_TANH_MUL: KernelSpec = KernelSpec {
    name: "gelu_tanh_mul",
    file: "activation.wgsl",
    entry: "gelu_tanh_mul",
    source: ACTIVATION,
    bindings: &[rd("gate"), rd("up"), rw("out"), rw("out16")],
    push_size: 4,
    exact_fp: false,
    glsl: None,
};

/// The activation applied to `gate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Silu,
    GeluTanh,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GatedParams {
    pub n: u32,
}

/// `out = act(gate) * up` over `n` elements.
pub struct GatedActivation<B> {
    pub gate: B,
    pub up: B,
    pub out: B,
}

impl<B: KernelBuffer> GatedActivation<B> {
    pub fn dispatch(self, act: Activation, n: usize) -> Result<Dispatch<B>, Error> {
        self.build(act, n, None)
    }

    /// [`GatedActivation::dispatch`] that also writes `out` as f16 pairs to `out16` (`n / 2`
    /// u32 words, the layout of `to_f16`; `n` even).
    pub fn dispatch_with_half(
        self,
        act: Activation,
        n: usize,
        out16: B,
    ) -> Result<Dispatch<B>, Error> {
        self.build(act, n, Some(out16))
    }

    fn build(self, act: Activation, n: usize, out16: Option<B>) -> Result<Dispatch<B>, Error> {
        let k = match act {
            Activation::Silu => &SILU_MUL,
            Activation::GeluTanh => &GELU_TANH_MUL,
        };
        let bytes = 4 * n as u64;
        need(k, "gate", &self.gate, bytes)?;
        need(k, "up", &self.up, bytes)?;
        need(k, "out", &self.out, bytes)?;
        let p = GatedParams {
            n: to_u32(k, "n", n)?,
        };
        let mut o = Overrides::new().set("WG", WG as f64);
        let mut per = 1;
        if let Some(h) = &out16 {
            if !n.is_multiple_of(2) {
                return Err(crate::spec::shape_err(
                    k,
                    format!("f16 copy of {n} elements"),
                ));
            }
            need(k, "out16", h, bytes / 2)?;
            o = o.set("HALF", 1.0);
            per = 2;
        }
        let groups = grid_for(k, (n as u64).div_ceil(per * WG as u64))?;
        Ok(Dispatch::new(
            k,
            o,
            vec![self.gate, self.up, self.out, out16.unwrap_or(self.out)],
            &p,
            groups,
        ))
    }
}
