//! Fused forms of graph steps: one dispatch where the reference path (the `Backend` trait's
//! default methods) issues several. Each is used only while `VulkanBackend::fused()` holds
//! (tuning `fused=0` or [`VulkanBackend::with_unfused_ops`] select the reference path), and has a
//! kernel parity case against the composed CPU ops.

use vkllm_cpu::RopeStyle;
use vkllm_kernels::kv_append::{KvAppend, KvType};
use vkllm_kernels::rope::RopeLayout;
use vkllm_kernels::rope_kv_append::{
    HeadNorm, MAX_HEAD_DIM, RopeKvAppend, RopeKvAppendShape, RopeKvGrid,
};

use super::VulkanBackend;
use vkllm_vk::kernels::matvec_fused::{Epilogue, GatedAct, MAX_COLUMNS, MatvecOp, NormPrologue};
use vkllm_vk::kernels::matvec_rows::MatvecLayout;
use vkllm_vk::{BufSlice, MatvecPlan};

use crate::backend::{
    Backend, KvRows, KvView, Linear, NormMlp, NormQkv, RopeKv, Tensor, norm_gated_mlp_unfused,
    norm_qkv_unfused, rope_kv_unfused,
};
use crate::error::ModelError;
use crate::family::Activation;
use vkllm_kernels::activation::Activation as KAct;

/// Layout of the fused input step for `n` tokens. Prefill-sized batches (more than
/// [`MAX_COLUMNS`] tokens) take one invocation per element pair ([`RopeKvGrid::Pairs`]) unless
/// the tuning's `rope_kv_tpw` asks for the per-head layout with that many tokens per workgroup
/// (the reference; slower, docs/benchmarks.md). Decode batches keep one (head, token) per
/// workgroup.
fn rope_kv_grid(t: &vkllm_vk::Tuning, n: usize) -> RopeKvGrid {
    let tpw = t
        .rope_kv_tpw
        .map(|x| x.min(vkllm_kernels::rope_kv_append::MAX_TOKENS_PER_GROUP));
    match (n > MAX_COLUMNS, tpw) {
        (false, _) => RopeKvGrid::PerHead { tokens: 1 },
        (true, Some(tokens)) => RopeKvGrid::PerHead { tokens },
        (true, None) => RopeKvGrid::Pairs,
    }
}

/// The kernels' name for a RoPE pairing.
pub(super) fn rope_layout(style: RopeStyle) -> RopeLayout {
    match style {
        RopeStyle::Interleaved => RopeLayout::Interleaved,
        RopeStyle::NeoX => RopeLayout::NeoX,
    }
}

impl VulkanBackend {
    /// A centred K cache's shift, inverse scale and sink offset (`[3, width]`), for the append.
    pub(super) fn kv_centre(
        &self,
        kv: &KvView,
        width: usize,
    ) -> Result<Option<BufSlice<'_>>, ModelError> {
        kv.centre.map(|c| self.head(c.table, 3 * width)).transpose()
    }

    /// A centred K cache's sink offset (`width` values): as attention reads the blocks
    /// (rotated for caches with rotated keys) or, `plain`, as the f16 copy holds them.
    pub(super) fn kv_sink(
        &self,
        kv: &KvView,
        width: usize,
        plain: bool,
    ) -> Result<Option<BufSlice<'_>>, ModelError> {
        let row = match plain || !kv.rot.k {
            true => 2,
            false => 3,
        };
        let bytes = 4 * width as u64;
        kv.centre
            .map(|c| Ok(self.buf(c.table).slice(row * bytes, bytes)?))
            .transpose()
    }

    /// `Backend::kv_store`: the K and V rows appended (quantized, centred as the cache asks).
    pub(super) fn kv_store_op(
        &mut self,
        k: Tensor,
        v: Tensor,
        n: usize,
        width: usize,
        positions: Tensor,
        kv: &KvView,
    ) -> Result<(), ModelError> {
        // Replayed steps get their positions checked by the replaying code.
        if self.capture_ctx.is_none()
            && let KvRows::Slot(_) = kv.rows
            && let Some(&p) = self
                .host_u32(positions, n)
                .iter()
                .find(|&&p| p as usize >= kv.capacity)
        {
            return Err(ModelError::ContextFull {
                pos: p as usize,
                capacity: kv.capacity,
            });
        }
        self.record(|me, r| {
            let (kn, vn) = (me.head(k, n * width)?, me.head(v, n * width)?);
            Ok(r.dispatch(me.kv_append(kv, width, n, (kn, vn), positions)?)?)
        })
    }

    /// The append of `n` f32 rows (`rows`: K, V) at `positions` into `kv`: quantized and
    /// centred as the cache asks.
    fn kv_append<'a>(
        &'a self,
        kv: &KvView,
        width: usize,
        n: usize,
        rows: (BufSlice<'a>, BufSlice<'a>),
        positions: Tensor,
    ) -> Result<vkllm_kernels::Dispatch<BufSlice<'a>>, ModelError> {
        let (kc, vc, stride) = self.kv_region(kv, width)?;
        Ok(KvAppend {
            k_new: rows.0,
            v_new: rows.1,
            pos: self.head(positions, n)?,
            k_cache: kc,
            v_cache: vc,
        }
        .dispatch_centred(
            kv.types(),
            kv.rot,
            self.kv_centre(kv, width)?,
            (n, width, kv.capacity, stride, kv.ring),
        )?)
    }

    /// What every fused form of the attention input step checks and needs first: a position
    /// past the slot is `ContextFull` (outside a recorded step, whose positions live on the
    /// device), and the RoPE table covering the positions (its index in `ropes`).
    pub(super) fn rope_kv_prepare(
        &mut self,
        a: &RopeKv<'_>,
        kv: &KvView,
    ) -> Result<usize, ModelError> {
        if self.capture_ctx.is_none()
            && let KvRows::Slot(_) = kv.rows
            && let Some(&p) = self
                .host_u32(a.positions, a.n)
                .iter()
                .find(|&&p| p as usize >= kv.capacity)
        {
            return Err(ModelError::ContextFull {
                pos: p as usize,
                capacity: kv.capacity,
            });
        }
        let need = self.positions_end(a.positions, a.n).max(1);
        self.rope_table(a.rope, need)
    }

    /// Runs the graph's fusable steps as their separate reference ops from now on.
    pub fn with_unfused_ops(mut self) -> Self {
        self.fused = false;
        self
    }

    /// Whether fused dispatches replace the reference op sequences.
    pub fn fused(&self) -> bool {
        self.fused
    }

    /// Whether the ops being issued are a recorded decode step (not a prompt's prefill).
    pub(super) fn decoding(&self) -> bool {
        self.capture_ctx.is_some()
    }

    /// `Backend::rope_kv`: per-head q/k norm, RoPE and KV append in one dispatch.
    pub(super) fn rope_kv_op(&mut self, a: &RopeKv<'_>, kv: &KvView) -> Result<(), ModelError> {
        if !self.fused || a.head_dim > MAX_HEAD_DIM {
            if a.packed.is_some() {
                return Err(ModelError::Config {
                    field: "rope_kv".into(),
                    msg: "packed q/k/v on the unfused path".into(),
                });
            }
            return rope_kv_unfused(self, a, kv);
        }
        let n = a.n;
        let ti = self.rope_kv_prepare(a, kv)?;
        let width = a.n_kv_heads * a.head_dim;
        let (qd, hd) = (a.n_heads * a.head_dim, a.head_dim);
        let shape = RopeKvAppendShape {
            n_tok: n,
            n_heads: a.n_heads,
            n_kv_heads: a.n_kv_heads,
            head_dim: hd,
            rotary_dim: a.rope.rotary_dim,
            layout: rope_layout(a.rope.style),
            max_pos: self.ropes[ti].max_pos,
            norm: a.norm.map(|_| HeadNorm {
                eps: a.eps,
                offset: a.norm_offset,
            }),
            kv: kv.dtype,
            max_tok: kv.capacity,
            row_stride: 0,
            ring: kv.ring,
            tok_strides: None,
            grid: rope_kv_grid(self.dev.tuning(), n),
        };
        // A quantized cache: RoPE writes f32 rows (token t in row t), kv_append quantizes them.
        let quant = kv.dtype.is_quantized();
        if quant {
            self.kv_stage(4 * (n * width) as u64)?;
        }
        self.record(|me, r| {
            let (kc, vc, stride) = me.kv_region(kv, width)?;
            let (qw, kw) = match a.norm {
                Some((qw, kw)) => (me.head(qw, hd)?, me.head(kw, hd)?),
                None => (me.head(a.q, 1)?, me.head(a.q, 1)?),
            };
            // Packed: q, k and v are slices of one [n, q + k + v] tensor (token stride `pw`).
            let pw = qd + 2 * width;
            let (q_in, k_in, v_in, strides) = match a.packed {
                Some(t) => {
                    let b = me.buf(t);
                    let (f, len) = (4u64, 4 * ((n - 1) * pw + qd + 2 * width) as u64);
                    (
                        b.slice(0, len)?,
                        b.slice(f * qd as u64, len - f * qd as u64)?,
                        b.slice(f * (qd + width) as u64, len - f * (qd + width) as u64)?,
                        Some((pw, pw)),
                    )
                }
                None => (
                    me.head(a.q, n * qd)?,
                    me.head(a.k, n * width)?,
                    me.head(a.v, n * width)?,
                    None,
                ),
            };
            let d = RopeKvAppend {
                q: q_in,
                k: k_in,
                v: v_in,
                q_norm: qw,
                k_norm: kw,
                pos: me.head(a.positions, n)?,
                table: me.ropes[ti].buf.all(),
                q_out: me.head(a.q_out, n * qd)?,
                k_cache: kc,
                v_cache: vc,
            };
            if !quant {
                let d = d.dispatch(&RopeKvAppendShape {
                    row_stride: stride,
                    tok_strides: strides,
                    ..shape
                })?;
                return Ok(r.dispatch(d)?);
            }
            let (sk, sv) = me.kv_stage.as_ref().ok_or(vkllm_vk::Error::Recording(
                "quantized KV append without its staging rows",
            ))?;
            let (sk, sv) = (sk.all(), sv.all());
            let staged = RopeKvAppend {
                k_cache: sk,
                v_cache: sv,
                ..d
            }
            .dispatch(&RopeKvAppendShape {
                kv: KvType::F32,
                row_stride: 1,
                ring: 1,
                tok_strides: strides,
                ..shape
            })?;
            r.dispatch(staged)?;
            Ok(r.dispatch(me.kv_append(kv, width, n, (sk, sv), a.positions)?)?)
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
        next_norm: Option<(Tensor, f32)>,
    ) -> Result<(), ModelError> {
        if !self.fused || w.bias.is_some() {
            self.linear(w, x, n, tmp)?;
            return self.add_inplace(acc, tmp, n * w.rows);
        }
        let decode = self.decoding();
        self.record(|me, r| {
            let y = me.head(acc, n * w.rows)?;
            let out = match next_norm {
                Some((norm, offset)) => Out::AddBeforeNorm(me.head(norm, w.rows)?, offset),
                None => Out::Add,
            };
            let (m, xs) = (me.matrix(w.weight), me.head(x, n * w.cols)?);
            product((me.fused, decode), r, m, xs, n, y, out)
        })
    }

    /// `Backend::norm_qkv`: RMSNorm + q/k/v as one fused matvec writing the packed tensor, for
    /// 1..=8 tokens without biases; otherwise (or when the weights cannot share a dispatch) the
    /// separate ops.
    pub(super) fn norm_qkv_op(&mut self, a: &NormQkv<'_>) -> Result<bool, ModelError> {
        let plain = a.q.bias.is_none() && a.k.bias.is_none() && a.v.bias.is_none();
        let cols_max = self.columns_max(&[a.q, a.k, a.v]);
        if self.fused
            && self.groups_products(a.n)
            && a.n > cols_max
            && vkllm_vk::coop_group_step(self.dev.tuning(), "qkv")
        {
            self.rmsnorm(a.x, a.norm, a.n, a.q.cols, a.eps, a.norm_offset, a.h)?;
            let ws = [(a.q, a.q_out), (a.k, a.k_out), (a.v, a.v_out)];
            self.linear_group(&ws, a.h, a.n)?;
            return Ok(false);
        }
        if !self.fused || a.n > cols_max || !plain || a.head_dim > MAX_HEAD_DIM {
            norm_qkv_unfused(self, a)?;
            return Ok(false);
        }
        let (qd, kd) = (a.q.rows, a.k.rows);
        let width = qd + 2 * kd;
        let offsets = [0, qd, qd + kd];
        let done = self.try_fused_matvec(
            &[a.q, a.k, a.v],
            a.x,
            a.n,
            a.packed,
            width,
            &offsets,
            (a.norm, a.eps, a.norm_offset),
            Epilogue::Store,
        )?;
        if !done {
            norm_qkv_unfused(self, a)?;
        }
        Ok(done)
    }

    /// `Backend::norm_gated_mlp`: for prefill-sized batches the norm, then one gated launch
    /// where it applies, else the products (grouped, or one by one when unbiased) and the
    /// activation; for 1..=8 tokens with no biases one fused matvec; else the separate ops.
    pub(super) fn norm_gated_mlp_op(&mut self, a: &NormMlp<'_>) -> Result<(), ModelError> {
        let unbiased = a.gate.bias.is_none() && a.up.bias.is_none();
        let cols_max = self.columns_max(&[a.gate, a.up]);
        if self.fused && self.groups_products(a.n) && a.n > cols_max {
            let grouped = vkllm_vk::coop_group_step(self.dev.tuning(), "mlp");
            if unbiased || grouped {
                self.rmsnorm(a.x, a.norm, a.n, a.gate.cols, a.eps, a.norm_offset, a.h)?;
                // (`vkllm_vk::coop_glu_enabled` and the weights decide whether it applies.)
                if unbiased && self.gated_product(a)? {
                    return Ok(());
                }
                if grouped {
                    let ws = [(a.gate, a.gate_out), (a.up, a.up_out)];
                    self.linear_group(&ws, a.h, a.n)?;
                } else {
                    self.linear(a.gate, a.h, a.n, a.gate_out)?;
                    self.linear(a.up, a.h, a.n, a.up_out)?;
                }
                return self.gated_act(a.act, a.gate_out, a.up_out, a.n * a.gate.rows, a.out);
            }
        }
        if !self.fused || a.n > cols_max || !unbiased {
            return norm_gated_mlp_unfused(self, a);
        }
        let act = match a.act {
            Activation::Silu => GatedAct::Silu,
            Activation::GeluTanh => GatedAct::GeluTanh,
        };
        let ff = a.gate.rows;
        let done = self.try_fused_matvec(
            &[a.gate, a.up],
            a.x,
            a.n,
            a.out,
            ff,
            &[0, 0],
            (a.norm, a.eps, a.norm_offset),
            Epilogue::Gated { act },
        )?;
        if !done {
            norm_gated_mlp_unfused(self, a)?;
        }
        Ok(())
    }

    /// `Backend::norm_linears`: for as many tokens as the multi-column matvec takes and no
    /// biases, each product with the norm as its prologue (no normed copy of x is written; the
    /// products are independent launches); a product that cannot take it, or more tokens, reads
    /// the norm's output instead.
    pub(super) fn norm_linears_op(
        &mut self,
        x: Tensor,
        norm: (Tensor, f32, f32),
        n: usize,
        h: Tensor,
        ws: &[(&Linear, Tensor)],
    ) -> Result<(), ModelError> {
        let refs: Vec<&Linear> = ws.iter().map(|(w, _)| *w).collect();
        let fusable =
            self.fused && n <= self.columns_max(&refs) && refs.iter().all(|w| w.bias.is_none());
        let mut normed = false;
        for &(w, out) in ws {
            if fusable
                && self.try_fused_matvec(&[w], x, n, out, w.rows, &[0], norm, Epilogue::Store)?
            {
                continue;
            }
            if !normed {
                self.rmsnorm(x, norm.0, n, w.cols, norm.1, norm.2, h)?;
                normed = true;
            }
            self.linear(w, h, n, out)?;
        }
        Ok(())
    }

    /// `a.out = act(a.h gate^T) * (a.h up^T)` as one gated launch
    /// ([`vkllm_vk::Recorder::matmul_glu`]); `Ok(false)`, with nothing recorded, where none
    /// applies.
    fn gated_product(&mut self, a: &NormMlp<'_>) -> Result<bool, ModelError> {
        let act = match a.act {
            Activation::Silu => KAct::Silu,
            Activation::GeluTanh => KAct::GeluTanh,
        };
        let mut done = false;
        self.record(|me, r| {
            let (g, u) = (me.matrix(a.gate.weight), me.matrix(a.up.weight));
            let x = me.head(a.h, a.n * a.gate.cols)?;
            let out = me.head(a.out, a.n * a.gate.rows)?;
            done = r.matmul_glu(g, u, x, a.n, out, act)?;
            Ok(())
        })?;
        Ok(done)
    }

    /// The most tokens every one of `ws` takes through the multi-column matvec: in a recorded
    /// decode step [`vkllm_vk::decode_columns_max`], else (prompt prefill) [`MAX_COLUMNS`].
    pub(super) fn columns_max(&self, ws: &[&Linear]) -> usize {
        if !self.decoding() {
            return MAX_COLUMNS;
        }
        ws.iter()
            .map(|w| {
                let m = self.matrix(w.weight);
                vkllm_vk::decode_columns_max(&self.dev, m.dtype, m.cols)
            })
            .min()
            .unwrap_or(MAX_COLUMNS)
    }

    /// Whether products of `n` tokens of one input go through [`VulkanBackend::linear_group`]:
    /// prefill-sized `n` (past the fused matvec's columns, at least
    /// [`vkllm_vk::COOP_MIN_N`]) on a device with cooperative matrices, where `matmul_coop` can
    /// run several weights in one launch.
    fn groups_products(&self, n: usize) -> bool {
        n >= vkllm_vk::COOP_MIN_N.max(MAX_COLUMNS + 1) && self.dev.coopmat()
    }

    /// [`Backend::linear`] of each `(weight, output)` over the same `x`, the products recorded
    /// together ([`vkllm_vk::Recorder::matmul_group`]: one launch for weights of one type and
    /// width where that is faster). Biases are copied into the outputs first and accumulated
    /// onto, as `linear` does; a mix of weights with and without bias runs as separate
    /// `linear`s.
    pub(super) fn linear_group(
        &mut self,
        ws: &[(&Linear, Tensor)],
        x: Tensor,
        n: usize,
    ) -> Result<(), ModelError> {
        let with_bias = ws.iter().filter(|(w, _)| w.bias.is_some()).count();
        if with_bias != 0 && with_bias != ws.len() {
            for &(w, out) in ws {
                self.linear(w, x, n, out)?;
            }
            return Ok(());
        }
        let mut bias = Vec::with_capacity(ws.len());
        for (w, _) in ws {
            if let Some(b) = w.bias {
                bias.push(self.bias_rows(b, w.rows, n)?);
            }
        }
        self.record(|me, r| {
            let mut ys = Vec::with_capacity(ws.len());
            for (i, &(w, out)) in ws.iter().enumerate() {
                let y = me.head(out, n * w.rows)?;
                if let Some(&b) = bias.get(i) {
                    r.copy(me.tiled_bias[b].2.slice(0, 4 * (n * w.rows) as u64)?, y)?;
                }
                ys.push(y);
            }
            let mats: Vec<&vkllm_vk::Tensor> =
                ws.iter().map(|(w, _)| me.matrix(w.weight)).collect();
            let xs = me.head(x, n * ws[0].0.cols)?;
            r.matmul_group(&mats, xs, n, &ys, with_bias != 0)?;
            Ok(())
        })
    }

    /// Records one `matvec_fused` with an RMSNorm prologue; `Ok(false)` (nothing recorded) when
    /// the weights cannot share a dispatch (`Unfusable`: mixed types off the int8 kernel, split
    /// weights).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn try_fused_matvec(
        &mut self,
        ws: &[&Linear],
        x: Tensor,
        n: usize,
        y: Tensor,
        y_stride: usize,
        offsets: &[usize],
        (norm, eps, offset): (Tensor, f32, f32),
        epilogue: Epilogue,
    ) -> Result<bool, ModelError> {
        let cols = ws[0].cols;
        let mut done = false;
        self.record(|me, r| {
            let mats: Vec<_> = ws.iter().map(|w| me.matrix(w.weight)).collect();
            let mut plan = MatvecPlan::new(n, y_stride, offsets);
            plan.norm = Some((me.head(norm, cols)?, NormPrologue { eps, offset }));
            plan.epilogue = epilogue;
            match r.matvec_fused(
                &mats,
                me.head(x, n * cols)?,
                me.head(y, (n - 1) * y_stride + y_stride)?,
                &plan,
            ) {
                Ok(()) => {
                    done = true;
                    Ok(())
                }
                Err(vkllm_vk::Error::Unfusable { .. }) => Ok(()),
                Err(e) => Err(e.into()),
            }
        })?;
        Ok(done)
    }
}

/// `y (+)= W x` for 2 to 8 tokens, or in a decode step up to [`vkllm_vk::decode_columns_max`]
/// (with the int8 kernel the tuning's `decode_int8_max_n`), through the multi-column fused
/// matvec (each weight block read once for up to 16 tokens) instead of the tiled matmul, which
/// is built for prefill-sized batches.
/// `Ok(false)`: nothing recorded (more tokens, or a weight the kernel cannot take), the caller
/// runs the matmul.
pub(super) fn multi_column(
    r: &mut vkllm_vk::Recorder,
    decode: bool,
    m: &vkllm_vk::Tensor,
    x: vkllm_vk::BufSlice<'_>,
    n: usize,
    y: vkllm_vk::BufSlice<'_>,
    accumulate: bool,
) -> Result<bool, ModelError> {
    let max = if decode {
        vkllm_vk::decode_columns_max(r.device(), m.dtype, m.cols)
    } else {
        MAX_COLUMNS
    };
    if !(2..=max).contains(&n) {
        return Ok(false);
    }
    let mut plan = MatvecPlan::new(n, m.rows, &[0]);
    if accumulate {
        plan.epilogue = Epilogue::Accumulate;
    }
    match r.matvec_fused(&[m], x, y, &plan) {
        Ok(()) => Ok(true),
        Err(vkllm_vk::Error::Unfusable { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// How [`product`] writes y.
#[derive(Clone, Copy)]
pub(super) enum Out<'a> {
    Store,
    Add,
    /// Accumulate, and the next product reads y with this RMSNorm prologue (weights, offset).
    AddBeforeNorm(vkllm_vk::BufSlice<'a>, f32),
}

/// `y (+)= W x` for `n` tokens with the kernel that suits `n`: the matvec for one token, the
/// multi-column fused matvec for 2..=8 (in a decode step, `decode`, up to
/// [`vkllm_vk::decode_columns_max`]) when fused ops are on, else the tiled matmul (on devices
/// whose matvec runs the rows layout, CPU implementations such as lavapipe, the multi-column
/// matvec 8 tokens at a time instead: see [`in_column_chunks`]).
pub(super) fn product(
    (fused, decode): (bool, bool),
    r: &mut vkllm_vk::Recorder,
    m: &vkllm_vk::Tensor,
    x: vkllm_vk::BufSlice<'_>,
    n: usize,
    y: vkllm_vk::BufSlice<'_>,
    out: Out<'_>,
) -> Result<(), ModelError> {
    let accumulate = !matches!(out, Out::Store);
    if n == 1 {
        match out {
            // A decode step's product may quantize y for the norm product after it.
            Out::AddBeforeNorm(norm, offset) if decode => {
                r.matvec_add_before_norm(m, x, y, (norm, offset))?;
            }
            _ => r.matvec(m, x, y, accumulate)?,
        }
    } else if !(fused
        && (multi_column(r, decode, m, x, n, y, accumulate)?
            || in_column_chunks(r, m, x, n, y, accumulate)?))
    {
        r.matmul(m, x, n, y, accumulate)?;
    }
    Ok(())
}

/// `n` tokens as multi-column matvecs of up to [`MAX_COLUMNS`] tokens each, when the device's
/// matvec layout is [`MatvecLayout::Rows`] and the weight takes the fused kernel (false: nothing
/// recorded). On lavapipe the rows kernel decodes each weight block once for 8 tokens with no
/// shared memory or barriers, where the tiled matmul's 64 x 64 tiles and barriers cost several
/// times more for a short prompt.
fn in_column_chunks(
    r: &mut vkllm_vk::Recorder,
    m: &vkllm_vk::Tensor,
    x: vkllm_vk::BufSlice<'_>,
    n: usize,
    y: vkllm_vk::BufSlice<'_>,
    accumulate: bool,
) -> Result<bool, ModelError> {
    if n <= MAX_COLUMNS
        || vkllm_vk::default_matvec_layout(r.device()) != MatvecLayout::Rows
        || !MatvecOp::plain(m.dtype, m.rows, m.cols).fast_supported()
    {
        return Ok(false);
    }
    let (xb, yb) = (4 * m.cols as u64, 4 * m.rows as u64);
    for t0 in (0..n).step_by(MAX_COLUMNS) {
        let c = MAX_COLUMNS.min(n - t0);
        let t0 = t0 as u64;
        let xs = x.buffer.slice(x.offset + t0 * xb, c as u64 * xb)?;
        let ys = y.buffer.slice(y.offset + t0 * yb, c as u64 * yb)?;
        if c == 1 {
            r.matvec(m, xs, ys, accumulate)?;
        } else if !multi_column(r, false, m, xs, c, ys, accumulate)? {
            return Err(ModelError::Config {
                field: "linear".into(),
                msg: format!(
                    "{} [{}, {}]: the multi-column matvec refused a chunk it takes",
                    m.dtype.name(),
                    m.rows,
                    m.cols
                ),
            });
        }
    }
    Ok(true)
}
