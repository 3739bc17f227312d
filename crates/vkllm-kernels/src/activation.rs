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
    bindings: &[rd("gate"), rd("up"), rw("out")],
    push_size: 4,
    exact_fp: false,
};
pub static GELU_TANH_MUL: KernelSpec = KernelSpec {
    name: "gelu_tanh_mul",
    file: "activation.wgsl",
    entry: "gelu_tanh_mul",
    source: ACTIVATION,
    bindings: &[rd("gate"), rd("up"), rw("out")],
    push_size: 4,
    exact_fp: false,
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
        let groups = grid_for(k, (n as u64).div_ceil(WG as u64))?;
        Ok(Dispatch::new(
            k,
            Overrides::new().set("WG", WG as f64),
            vec![self.gate, self.up, self.out],
            &p,
            groups,
        ))
    }
}
