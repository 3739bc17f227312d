//! `shaders/moe_route.wgsl`: softmax, top-k and optional renormalisation of router logits, one
//! workgroup per token.

use crate::sources::MOE_ROUTE as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 128;
/// Workgroup size for up to 256 experts (8 per invocation): one subgroup on most GPUs, whose
/// reductions then need no shared-memory round (each top-k pick is one subgroup argmax).
const WG_SMALL: u32 = 32;
/// Largest `top_k` the shader holds.
pub const MAX_TOP_K: usize = 32;
/// Most experts the shader holds (WG invocations x 8 registers).
pub const MAX_EXPERTS: usize = 8 * WG as usize;

pub static MOE_ROUTE: KernelSpec = KernelSpec {
    name: "moe_route",
    file: "moe_route.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("logits"), rw("ids"), rw("weights")],
    push_size: 32,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RouteParams {
    pub n: u32,
    pub n_experts: u32,
    pub top_k: u32,
    pub renormalize: u32,
    pub shared: u32,
    pub pad: [u32; 3],
}

/// Routes `n` tokens: `ids` (u32) and `weights` (f32), `[n, top_k]` each.
pub struct MoeRoute<B> {
    pub logits: B,
    pub ids: B,
    pub weights: B,
}

impl<B: KernelBuffer> MoeRoute<B> {
    pub fn dispatch(
        self,
        n: usize,
        n_experts: usize,
        top_k: usize,
        renormalize: bool,
    ) -> Result<Dispatch<B>, Error> {
        self.dispatch_shared(n, n_experts, top_k, renormalize, false)
    }

    /// With `shared`, a shared expert in each token's last slot (`vkllm_cpu::moe_route_shared`):
    /// logits `[n, n_experts + 1]`, ids and weights `[n, top_k + 1]`.
    pub fn dispatch_shared(
        self,
        n: usize,
        n_experts: usize,
        top_k: usize,
        renormalize: bool,
        shared: bool,
    ) -> Result<Dispatch<B>, Error> {
        let k = &MOE_ROUTE;
        if n == 0 || top_k == 0 || top_k > n_experts || top_k > MAX_TOP_K || n_experts > MAX_EXPERTS
        {
            return Err(shape_err(
                k,
                format!(
                    "n {n}, top_k {top_k} of {n_experts} (at most {MAX_TOP_K} of {MAX_EXPERTS})"
                ),
            ));
        }
        let sh = shared as usize;
        need(k, "logits", &self.logits, 4 * (n * (n_experts + sh)) as u64)?;
        need(k, "ids", &self.ids, 4 * (n * (top_k + sh)) as u64)?;
        need(k, "weights", &self.weights, 4 * (n * (top_k + sh)) as u64)?;
        let p = RouteParams {
            n: to_u32(k, "n", n)?,
            n_experts: to_u32(k, "n_experts", n_experts)?,
            top_k: to_u32(k, "top_k", top_k)?,
            renormalize: renormalize as u32,
            shared: shared as u32,
            pad: [0; 3],
        };
        Ok(Dispatch::new(
            k,
            Overrides::new().set(
                "WG",
                if n_experts <= 8 * WG_SMALL as usize {
                    WG_SMALL
                } else {
                    WG
                } as f64,
            ),
            vec![self.logits, self.ids, self.weights],
            &p,
            grid_for(k, n as u64)?,
        ))
    }
}
