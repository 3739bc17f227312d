//! The MoE feed-forward block as one backend op ([`super::Backend::moe_ffn`]): RMSNorm, router,
//! routing and the experts' weighted sum added to the residual stream. Backends fuse it where
//! they can (the norm into the products that read it, the add into the last product); the
//! reference is [`moe_ffn_unfused`].

use crate::error::ModelError;
use crate::family::Activation;

use super::{Backend, Experts, Linear, Tensor};

/// Arguments of [`Backend::moe_ffn`]: `x += sum_i w_i expert_i(norm(x))` over `n` rows.
#[derive(Clone, Copy, Debug)]
pub struct MoeFfn<'a> {
    /// The residual stream `[n, hidden]`, read and added to.
    pub x: Tensor,
    pub norm: Tensor,
    pub eps: f32,
    pub norm_offset: f32,
    pub n: usize,
    /// Scratch for the normed rows `[n, hidden]`.
    pub h: Tensor,
    /// `[n_experts (+ 1 with a stacked shared expert), hidden]`.
    pub router: &'a Linear,
    /// Scratch for the router logits.
    pub logits: Tensor,
    /// Routed experts.
    pub n_experts: usize,
    pub top_k: usize,
    pub renormalize: bool,
    /// The shared expert is the stacked experts' last, in every token's last slot
    /// ([`super::HybridOps::moe_route`]'s `shared`).
    pub shared: bool,
    pub experts: &'a Experts,
    pub act: Activation,
    /// Routing scratch: ids (u32) and weights, `[n, top_k + shared]` (padded to whole 4s).
    pub ids: Tensor,
    pub weights: Tensor,
    /// The experts' scratch ([`super::moe_scratch_words`]).
    pub scratch: Tensor,
    /// Scratch for the experts' sum `[n, hidden]` before it is added.
    pub out: Tensor,
}

/// [`Backend::moe_ffn`] as separate ops.
pub fn moe_ffn_unfused<B: Backend + ?Sized>(b: &mut B, a: &MoeFfn<'_>) -> Result<(), ModelError> {
    let h = a.experts.hidden;
    b.rmsnorm(a.x, a.norm, a.n, h, a.eps, a.norm_offset, a.h)?;
    b.linear(a.router, a.h, a.n, a.logits)?;
    let (ne, k) = (a.n_experts, a.top_k);
    b.moe_route(
        a.logits,
        a.n,
        ne,
        k,
        a.renormalize,
        a.shared,
        a.ids,
        a.weights,
    )?;
    let k = k + a.shared as usize;
    let (ids, w, s) = (a.ids, a.weights, a.scratch);
    b.moe_experts(a.h, a.n, a.experts, a.act, k, ids, w, s, a.out)?;
    b.add_inplace(a.x, a.out, a.n * h)
}
