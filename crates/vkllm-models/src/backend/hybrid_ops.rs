//! The hybrid (Gated DeltaNet) and Mixture-of-Experts ops every [`super::Backend`] provides.

use crate::error::ModelError;
use crate::family::Activation;

use super::{Experts, StateView, Tensor};
use vkllm_cpu::DeltaShape;

/// The gated RMSNorm after a Gated DeltaNet layer's delta rule
/// ([`HybridOps::gated_delta_rule_norm`]): gate `z` (`[n, v_width]`), weight (`[v_dim]`, no
/// offset), epsilon, and `core`, where a backend that does not fuse them puts the rule's output.
#[derive(Clone, Copy, Debug)]
pub struct DeltaOutNorm {
    pub z: Tensor,
    pub weight: Tensor,
    pub eps: f32,
    pub core: Tensor,
}

/// Hybrid and MoE ops (a supertrait of [`super::Backend`]); a backend that cannot run one with
/// its arguments returns [`ModelError::UnsupportedOp`].
pub trait HybridOps {
    /// Depthwise causal convolution with SiLU of `n` rows of `channels` (`x`, `[n, channels]`)
    /// with `weight` (`[channels, kernel]`), continuing from and rolling the state
    /// (`[kernel - 1, channels]` per slot) of the slot(s) `state` addresses:
    /// `vkllm_cpu::causal_conv1d` per sequence.
    #[allow(clippy::too_many_arguments)]
    fn causal_conv1d(
        &mut self,
        x: Tensor,
        n: usize,
        channels: usize,
        kernel: usize,
        weight: Tensor,
        state: &StateView,
        out: Tensor,
    ) -> Result<(), ModelError>;

    /// The gated delta rule over `n` tokens: `qkv` holds rows `[q | k | v]` (widths
    /// `qk_width`, `qk_width`, `v_width`), `a` and `b` the gate projections (`[n, n_v_heads]`),
    /// from which `g = -exp(a_log) * softplus(a + dt_bias)` and `beta = sigmoid(b)`;
    /// the state (`[n_v_heads, k_dim, v_dim]` per slot) of the slot(s) `state` addresses is
    /// read and updated, `out` is `[n, v_width]`: `vkllm_cpu::delta_gates` then
    /// `vkllm_cpu::gated_delta_rule` (or its chunked form) per sequence.
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_rule(
        &mut self,
        qkv: Tensor,
        n: usize,
        shape: &DeltaShape,
        a: Tensor,
        b: Tensor,
        a_log: Tensor,
        dt_bias: Tensor,
        state: &StateView,
        out: Tensor,
    ) -> Result<(), ModelError>;

    /// [`HybridOps::gated_delta_rule`] into `norm.core`, then [`HybridOps::gated_rmsnorm`] of
    /// each head's `v_dim` values gated by `norm.z` into `out`: the token mixer of a Gated
    /// DeltaNet layer up to its output projection (one launch where the backend fuses them).
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_rule_norm(
        &mut self,
        qkv: Tensor,
        n: usize,
        shape: &DeltaShape,
        a: Tensor,
        b: Tensor,
        a_log: Tensor,
        dt_bias: Tensor,
        state: &StateView,
        norm: &DeltaOutNorm,
        out: Tensor,
    ) -> Result<(), ModelError> {
        self.gated_delta_rule(qkv, n, shape, a, b, a_log, dt_bias, state, norm.core)?;
        let rows = n * shape.n_v_heads;
        let dim = shape.v_dim;
        self.gated_rmsnorm(norm.core, norm.z, norm.weight, rows, dim, norm.eps, out)
    }

    /// RMSNorm of `rows` rows of `dim` with weight `w` (no offset), gated by `silu(z)`:
    /// `vkllm_cpu::gated_rmsnorm`.
    #[allow(clippy::too_many_arguments)]
    fn gated_rmsnorm(
        &mut self,
        x: Tensor,
        z: Tensor,
        weight: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
        out: Tensor,
    ) -> Result<(), ModelError>;

    /// `x[r, c] *= sigmoid(gate[r, c])` over `rows` rows of `cols`, or `sigmoid(gate[r])` when
    /// `per_row`: `vkllm_cpu::sigmoid_mul`.
    fn sigmoid_mul(
        &mut self,
        x: Tensor,
        gate: Tensor,
        rows: usize,
        cols: usize,
        per_row: bool,
    ) -> Result<(), ModelError>;

    /// Routes `n` tokens from their router `logits` (`[n, n_experts]`): expert ids (u32) and
    /// weights (f32), `[n, top_k]` each: `vkllm_cpu::moe_route`. With `shared`, logits rows end
    /// in the shared expert's gate logit and each token's last of `top_k + 1` slots is the
    /// shared expert (id `n_experts`, weight `sigmoid(gate logit)`): `vkllm_cpu::moe_route_shared`.
    #[allow(clippy::too_many_arguments)]
    fn moe_route(
        &mut self,
        logits: Tensor,
        n: usize,
        n_experts: usize,
        top_k: usize,
        renormalize: bool,
        shared: bool,
        ids: Tensor,
        weights: Tensor,
    ) -> Result<(), ModelError>;

    /// `out[t] = sum_i weights[t, i] * down_e(act(gate_e x[t]) * up_e x[t])` with
    /// `e = ids[t, i]`, for `n` rows of `x` (`[n, hidden]`), reading only the selected experts
    /// (`vkllm_cpu::moe_experts`). `scratch` holds at least [`moe_scratch_words`](super::moe_scratch_words) values.
    #[allow(clippy::too_many_arguments)]
    fn moe_experts(
        &mut self,
        x: Tensor,
        n: usize,
        experts: &Experts,
        act: Activation,
        top_k: usize,
        ids: Tensor,
        weights: Tensor,
        scratch: Tensor,
        out: Tensor,
    ) -> Result<(), ModelError>;
}
