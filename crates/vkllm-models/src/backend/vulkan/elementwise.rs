//! The Vulkan backend's one-kernel ops (embedding, RMSNorm, RoPE, gated activation, add,
//! soft-cap): `Backend`'s methods of the same names record them.

use vkllm_cpu::{Rope, RopeStyle};
use vkllm_kernels::activation::{Activation as KAct, GatedActivation};
use vkllm_kernels::elementwise::{Add, Softcap};
use vkllm_kernels::rmsnorm::{NormShape, RmsNorm};
use vkllm_kernels::rope::{Rope as RopeK, RopeLayout, RopeShape};
use vkllm_kernels::to_f16::packed_bytes;

use super::VulkanBackend;
use crate::backend::Tensor;
use crate::error::ModelError;
use crate::family::Activation;

impl VulkanBackend {
    /// `Backend::embedding`: the table's rows (any weight type) for `n` ids, then the scale.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn embedding_op(
        &mut self,
        table: Tensor,
        vocab: usize,
        dim: usize,
        ids: Tensor,
        n: usize,
        scale: Option<f32>,
        out: Tensor,
    ) -> Result<(), ModelError> {
        // Replayed steps get their ids checked by `replay_decode`.
        if self.capture_ctx.is_none()
            && let Some(&id) = self
                .host_u32(ids, n)
                .iter()
                .find(|&&id| id as usize >= vocab)
        {
            return Err(ModelError::TokenOutOfRange { id, vocab });
        }
        self.record(|me, r| {
            let o = me.head(out, n * dim)?;
            r.embedding(me.matrix(table), me.head(ids, n)?, n, o)?;
            if let Some(s) = scale {
                r.dispatch(
                    vkllm_kernels::elementwise::Scale { a: o, out: o }.dispatch(n * dim, s)?,
                )?;
            }
            Ok(())
        })
    }

    /// `Backend::rmsnorm`, with the f16 copy of its rows where a cooperative-matrix product
    /// reads them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rmsnorm_op(
        &mut self,
        x: Tensor,
        weight: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
        offset: f32,
        out: Tensor,
    ) -> Result<(), ModelError> {
        assert_ne!(x, out, "rmsnorm: out aliases x");
        // Rows that a cooperative-matrix matmul will read as f16 X also get their f16 copy here
        // (one `to_f16` dispatch fewer per norm; tuning `coop_x_f16=0` turns both off).
        let half = vkllm_vk::coop_half_x_wanted(&self.dev, rows, dim);
        self.record(|me, r| {
            let norm_out = me.head(out, rows * dim)?;
            let norm = RmsNorm {
                x: me.head(x, rows * dim)?,
                weight: me.head(weight, dim)?,
                out: norm_out,
            };
            let shape = NormShape {
                rows,
                n: dim,
                eps,
                weight_offset: offset,
            };
            if half {
                let h = r.half_copy_target(rows * dim)?;
                let o16 = h.slice(0, packed_bytes(rows * dim))?;
                r.dispatch(norm.dispatch_with_half(&shape, o16)?)?;
                r.half_copy_written(norm_out, rows * dim);
                return Ok(());
            }
            Ok(r.dispatch(norm.dispatch(&shape)?)?)
        })
    }

    /// `Backend::rope`: in place, from the (cos, sin) table of `rope` covering the positions.
    pub(super) fn rope_op(
        &mut self,
        x: Tensor,
        n: usize,
        n_heads: usize,
        head_dim: usize,
        positions: Tensor,
        rope: &Rope,
    ) -> Result<(), ModelError> {
        let need = self.positions_end(positions, n).max(1);
        let ti = self.rope_table(rope, need)?;
        self.record(|me, r| {
            let t = &me.ropes[ti];
            let d = RopeK {
                x: me.head(x, n * n_heads * head_dim)?,
                pos: me.head(positions, n)?,
                table: t.buf.all(),
            }
            .dispatch(&RopeShape {
                n_tok: n,
                n_heads,
                head_dim,
                rotary_dim: rope.rotary_dim,
                layout: match rope.style {
                    RopeStyle::Interleaved => RopeLayout::Interleaved,
                    RopeStyle::NeoX => RopeLayout::NeoX,
                },
                max_pos: t.max_pos,
            })?;
            Ok(r.dispatch(d)?)
        })
    }

    /// `Backend::gated_act`, with the f16 copy of its output where a cooperative-matrix
    /// product reads it.
    pub(super) fn gated_act_op(
        &mut self,
        act: Activation,
        gate: Tensor,
        up: Tensor,
        len: usize,
        out: Tensor,
    ) -> Result<(), ModelError> {
        assert!(out != gate && out != up, "gated_act: out aliases an input");
        let act = match act {
            Activation::Silu => KAct::Silu,
            Activation::GeluTanh => KAct::GeluTanh,
        };
        // The f16 copy for a coop matmul reading `out` as X (the down projection of a prefill
        // chunk). The token count is not known here: any length of at least COOP_MIN_N rows of
        // 8 gets it (a decode-sized one that no coop matmul reads only costs the extra writes).
        let half = len.is_multiple_of(8) && vkllm_vk::coop_half_x_wanted(&self.dev, len / 8, 8);
        self.record(|me, r| {
            let g = GatedActivation {
                gate: me.head(gate, len)?,
                up: me.head(up, len)?,
                out: me.head(out, len)?,
            };
            if half {
                let h = r.half_copy_target(len)?;
                let out = g.out;
                r.dispatch(g.dispatch_with_half(act, len, h.slice(0, packed_bytes(len))?)?)?;
                r.half_copy_written(out, len);
                return Ok(());
            }
            Ok(r.dispatch(g.dispatch(act, len)?)?)
        })
    }

    /// `Backend::add_inplace`: `a += b`.
    pub(super) fn add_inplace_op(
        &mut self,
        a: Tensor,
        b: Tensor,
        len: usize,
    ) -> Result<(), ModelError> {
        assert_ne!(a, b, "add_inplace: a and b alias");
        self.record(|me, r| {
            let a = me.head(a, len)?;
            Ok(r.dispatch(
                Add {
                    a,
                    b: me.head(b, len)?,
                    out: a,
                }
                .dispatch(len)?,
            )?)
        })
    }

    /// `Backend::softcap`: `x = cap * tanh(x / cap)` in place.
    pub(super) fn softcap_op(&mut self, x: Tensor, len: usize, cap: f32) -> Result<(), ModelError> {
        self.record(|me, r| {
            let a = me.head(x, len)?;
            Ok(r.dispatch(Softcap { a, out: a }.dispatch(len, cap)?)?)
        })
    }
}
