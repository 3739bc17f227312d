//! Fused forms of graph steps: one dispatch where the reference path (the `Backend` trait's
//! default methods) issues several. Each is used only while `VulkanBackend::fused()` holds
//! (`VKLLM_UNFUSED=1` or [`VulkanBackend::with_unfused_ops`] select the reference path), and has a
//! kernel parity case against the composed CPU ops.

use vkllm_cpu::RopeStyle;
use vkllm_kernels::rope::RopeLayout;
use vkllm_kernels::rope_kv_append::{HeadNorm, MAX_HEAD_DIM, RopeKvAppend, RopeKvAppendShape};

use super::{VulkanBackend, kv_type};
use crate::backend::{Backend, KvRows, KvView, Linear, RopeKv, Tensor, rope_kv_unfused};
use crate::error::ModelError;

impl VulkanBackend {
    /// Runs the graph's fusable steps as their separate reference ops from now on.
    pub fn with_unfused_ops(mut self) -> Self {
        self.fused = false;
        self
    }

    /// Whether fused dispatches replace the reference op sequences.
    pub fn fused(&self) -> bool {
        self.fused
    }

    /// `Backend::rope_kv`: per-head q/k norm, RoPE and KV append in one dispatch.
    pub(super) fn rope_kv_op(&mut self, a: &RopeKv<'_>, kv: &KvView) -> Result<(), ModelError> {
        if !self.fused || a.head_dim > MAX_HEAD_DIM {
            return rope_kv_unfused(self, a, kv);
        }
        let n = a.n;
        if self.capture_ctx.is_none()
            && let KvRows::Slot(_) = kv.rows
            && let Some(&p) = self
                .host_u32(a.positions, n)
                .iter()
                .find(|&&p| p as usize >= kv.capacity)
        {
            return Err(ModelError::ContextFull {
                pos: p as usize,
                capacity: kv.capacity,
            });
        }
        let need = self.positions_end(a.positions, n).max(1);
        let ti = self.rope_table(a.rope, need)?;
        let width = a.n_kv_heads * a.head_dim;
        let (qd, hd) = (a.n_heads * a.head_dim, a.head_dim);
        let shape = RopeKvAppendShape {
            n_tok: n,
            n_heads: a.n_heads,
            n_kv_heads: a.n_kv_heads,
            head_dim: hd,
            rotary_dim: a.rope.rotary_dim,
            layout: match a.rope.style {
                RopeStyle::Interleaved => RopeLayout::Interleaved,
                RopeStyle::NeoX => RopeLayout::NeoX,
            },
            max_pos: self.ropes[ti].max_pos,
            norm: a.norm.map(|_| HeadNorm {
                eps: a.eps,
                offset: a.norm_offset,
            }),
            kv: kv_type(kv.dtype),
            max_tok: kv.capacity,
            row_stride: 0,
            ring: kv.ring,
        };
        self.record(|me, r| {
            let (kc, vc, stride) = me.kv_region(kv, width)?;
            let (qw, kw) = match a.norm {
                Some((qw, kw)) => (me.head(qw, hd)?, me.head(kw, hd)?),
                None => (me.head(a.q, 1)?, me.head(a.q, 1)?),
            };
            let d = RopeKvAppend {
                q: me.head(a.q, n * qd)?,
                k: me.head(a.k, n * width)?,
                v: me.head(a.v, n * width)?,
                q_norm: qw,
                k_norm: kw,
                pos: me.head(a.positions, n)?,
                table: me.ropes[ti].buf.all(),
                q_out: me.head(a.q_out, n * qd)?,
                k_cache: kc,
                v_cache: vc,
            }
            .dispatch(&RopeKvAppendShape {
                row_stride: stride,
                ..shape
            })?;
            Ok(r.dispatch(d)?)
        })
    }

    /// `Backend::linear_add`: the projection accumulates into the residual stream (the matvec /
    /// matmul `accumulate` epilogue: `y = dot + y`, the same f32 add as `add_inplace`).
    pub(super) fn linear_add_op(
        &mut self,
        w: &Linear,
        x: Tensor,
        n: usize,
        acc: Tensor,
        tmp: Tensor,
    ) -> Result<(), ModelError> {
        if !self.fused || w.bias.is_some() {
            self.linear(w, x, n, tmp)?;
            return self.add_inplace(acc, tmp, n * w.rows);
        }
        self.record(|me, r| {
            let y = me.head(acc, n * w.rows)?;
            let (m, xs) = (me.matrix(w.weight), me.head(x, n * w.cols)?);
            if n == 1 {
                r.matvec(m, xs, y, true)?;
            } else {
                r.matmul(m, xs, n, y, true)?;
            }
            Ok(())
        })
    }
}
