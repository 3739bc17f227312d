//! The Vulkan backend's hybrid (Gated DeltaNet) and MoE ops, each one `vkllm-kernels` dispatch
//! (two for the experts) recorded like the dense ops: no host round trip, so a MoE layer's expert
//! ids stay on the device between the router and the experts.
//!
//! Limits: the routed experts must be single-part matrices, all three f32 or all three in block
//! formats (`moe_experts_quant`: each its own format); key heads up to
//! `gated_delta_rule::MAX_K_DIM` (256) and top-k up to 32.

use vkllm_cpu::DeltaShape;
use vkllm_kernels::WeightType;
use vkllm_kernels::causal_conv1d::{CausalConv1d, ConvShape};
use vkllm_kernels::gated_delta_rule::{
    CHUNKED_MAX_K_DIM, DeltaNorm, DeltaShape as DeltaShapeK, GatedDeltaRule, NORM_MAX_V_DIM,
    StateRows,
};
use vkllm_kernels::gated_rmsnorm::GatedRmsNorm;
use vkllm_kernels::matvec_fused::{Epilogue, NormPrologue};
use vkllm_kernels::moe_experts::{MoeExperts, MoeShape};
use vkllm_kernels::moe_experts_grouped::{MoeExpertsGrouped, Q8gLaunch};
use vkllm_kernels::moe_experts_q8a::{MoeExpertsQ8a, MoeFusions};
use vkllm_kernels::moe_experts_quant::{MoeExpertsQuant, MoeQuantShape};
use vkllm_vk::BufSlice;

use crate::backend::moe_scratch_parts;
use vkllm_kernels::moe_route::MoeRoute;
use vkllm_kernels::sigmoid_mul::SigmoidMul;

use super::VulkanBackend;
use crate::backend::{
    Backend, DeltaOutNorm, Experts, HybridOps, KvRows, MoeFfn, StateView, Tensor, moe_ffn_unfused,
};
use crate::error::ModelError;
use crate::family::Activation;

/// The kernels' name for the slot(s) a state view addresses.
fn state_rows(st: &StateView) -> StateRows {
    match st.rows {
        KvRows::Slot(slot) => StateRows::Sequence { slot },
        KvRows::PerRow => StateRows::PerRow {
            capacity: st.capacity,
        },
    }
}

impl HybridOps for VulkanBackend {
    #[allow(clippy::too_many_arguments)]
    fn causal_conv1d(
        &mut self,
        x: Tensor,
        n: usize,
        channels: usize,
        kernel: usize,
        weight: Tensor,
        st: &StateView,
        out: Tensor,
    ) -> Result<(), ModelError> {
        st.check(n);
        let rows = state_rows(st);
        self.record(|me, r| {
            let d = CausalConv1d {
                x: me.head(x, n * channels)?,
                w: me.head(weight, channels * kernel)?,
                state: me.all(st.state),
                out: me.head(out, n * channels)?,
                pos: me.all(st.positions),
            }
            .dispatch(&ConvShape {
                n,
                channels,
                kernel,
                silu: true,
                rows,
            })?;
            Ok(r.dispatch(d)?)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn gated_delta_rule(
        &mut self,
        qkv: Tensor,
        n: usize,
        s: &DeltaShape,
        a: Tensor,
        b: Tensor,
        a_log: Tensor,
        dt_bias: Tensor,
        st: &StateView,
        out: Tensor,
    ) -> Result<(), ModelError> {
        self.delta_rule_launch(qkv, n, s, (a, b, a_log, dt_bias), st, None, out)
    }

    #[allow(clippy::too_many_arguments)]
    fn gated_delta_rule_norm(
        &mut self,
        qkv: Tensor,
        n: usize,
        s: &DeltaShape,
        a: Tensor,
        b: Tensor,
        a_log: Tensor,
        dt_bias: Tensor,
        st: &StateView,
        norm: &DeltaOutNorm,
        out: Tensor,
    ) -> Result<(), ModelError> {
        // Decode steps on the register-resident recurrence take the norm into the same launch
        // (tuning `delta_norm`); prompts keep the chunked form and a separate norm.
        let t = self.dev.tuning();
        let decode = n == 1 || matches!(state_rows(st), StateRows::PerRow { .. });
        if decode && t.delta_wide && t.delta_norm && s.v_dim <= NORM_MAX_V_DIM {
            let gates = (a, b, a_log, dt_bias);
            return self.delta_rule_launch(qkv, n, s, gates, st, Some(norm), out);
        }
        self.gated_delta_rule(qkv, n, s, a, b, a_log, dt_bias, st, norm.core)?;
        let hr = n * s.n_v_heads;
        self.gated_rmsnorm(norm.core, norm.z, norm.weight, hr, s.v_dim, norm.eps, out)
    }

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
    ) -> Result<(), ModelError> {
        self.record(|me, r| {
            let d = GatedRmsNorm {
                x: me.head(x, rows * dim)?,
                z: me.head(z, rows * dim)?,
                weight: me.head(weight, dim)?,
                out: me.head(out, rows * dim)?,
            }
            .dispatch(rows, dim, eps)?;
            Ok(r.dispatch(d)?)
        })
    }

    fn sigmoid_mul(
        &mut self,
        x: Tensor,
        gate: Tensor,
        rows: usize,
        cols: usize,
        per_row: bool,
    ) -> Result<(), ModelError> {
        assert_ne!(x, gate, "sigmoid_mul: x and gate alias");
        self.record(|me, r| {
            let d = SigmoidMul {
                x: me.head(x, rows * cols)?,
                gate: me.head(gate, if per_row { rows } else { rows * cols })?,
            }
            .dispatch(rows, cols, per_row)?;
            Ok(r.dispatch(d)?)
        })
    }

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
    ) -> Result<(), ModelError> {
        let (ew, kk) = (n_experts + shared as usize, top_k + shared as usize);
        self.record(|me, r| {
            let d = MoeRoute {
                logits: me.head(logits, n * ew)?,
                ids: me.head(ids, n * kk)?,
                weights: me.head(weights, n * kk)?,
            }
            .dispatch_shared(n, n_experts, top_k, renormalize, shared)?;
            Ok(r.dispatch(d)?)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn moe_experts(
        &mut self,
        x: Tensor,
        n: usize,
        ex: &Experts,
        act: Activation,
        top_k: usize,
        ids: Tensor,
        weights: Tensor,
        scratch: Tensor,
        out: Tensor,
    ) -> Result<(), ModelError> {
        if act != Activation::Silu {
            return Err(self.unsupported("moe_experts with a non-SiLU activation"));
        }
        let mats = [ex.gate, ex.up, ex.down].map(|t| self.matrix(t));
        if mats.iter().any(|m| m.parts.len() != 1) {
            return Err(self.unsupported("moe_experts over expert weights split in parts"));
        }
        let dtypes = mats.map(|m| m.dtype);
        if dtypes.iter().all(|d| d.is_quantized()) {
            return self.moe_experts_quant(x, n, ex, top_k, ids, weights, scratch, out);
        }
        if dtypes.iter().any(|&d| d != WeightType::F32) {
            return Err(self.unsupported("moe_experts over mixed float/block expert weights"));
        }
        let (h, ff) = (ex.hidden, ex.ff);
        self.record(|me, r| {
            let w = |t: Tensor| me.matrix(t).parts[0].buffer.all();
            let ds = MoeExperts {
                x: me.head(x, n * h)?,
                ids: me.head(ids, n * top_k)?,
                weights: me.head(weights, n * top_k)?,
                gate: w(ex.gate),
                up: w(ex.up),
                down: w(ex.down),
                act: me.head(scratch, n * top_k * ff)?,
                out: me.head(out, n * h)?,
            }
            .dispatch(&MoeShape {
                n,
                top_k,
                hidden: h,
                ff,
                n_experts: ex.n_experts,
            })?;
            for d in ds {
                r.dispatch(d)?;
            }
            Ok(())
        })
    }
}

impl VulkanBackend {
    /// One launch of the gated delta rule (`HybridOps::gated_delta_rule`'s arguments, the gate
    /// tensors as `(a, b, a_log, dt_bias)`): the form the call and the tuning pick (chunked for
    /// a prompt of one sequence unless `delta_chunked=0`, each form register-resident unless
    /// `delta_wide=0` / `delta_chunked_wide=0`), or with `norm` the register-resident
    /// recurrence writing its rows through the layer's gated RMSNorm.
    #[allow(clippy::too_many_arguments)]
    fn delta_rule_launch(
        &mut self,
        qkv: Tensor,
        n: usize,
        s: &DeltaShape,
        (a, b, a_log, dt_bias): (Tensor, Tensor, Tensor, Tensor),
        st: &StateView,
        norm: Option<&DeltaOutNorm>,
        out: Tensor,
    ) -> Result<(), ModelError> {
        st.check(n);
        let rows = state_rows(st);
        let hv = s.n_v_heads;
        let tuning = self.dev.tuning();
        let chunked = n > 1
            && matches!(rows, StateRows::Sequence { .. })
            && s.k_dim <= CHUNKED_MAX_K_DIM
            && tuning.delta_chunked;
        let (wide, chunked_wide) = (tuning.delta_wide, tuning.delta_chunked_wide);
        self.record(|me, r| {
            let k = GatedDeltaRule {
                qkv: me.head(qkv, n * (2 * s.qk_width() + s.v_width()))?,
                a: me.head(a, n * hv)?,
                b: me.head(b, n * hv)?,
                a_log: me.head(a_log, hv)?,
                dt_bias: me.head(dt_bias, hv)?,
                state: me.all(st.state),
                out: me.head(out, n * s.v_width())?,
                pos: me.all(st.positions),
            };
            let shape = DeltaShapeK {
                n,
                n_k_heads: s.n_k_heads,
                n_v_heads: hv,
                k_dim: s.k_dim,
                v_dim: s.v_dim,
                tiled_v_heads: s.tiled_v_heads,
                rows,
            };
            let d = match norm {
                Some(nm) => {
                    let dn = DeltaNorm {
                        z: me.head(nm.z, n * s.v_width())?,
                        weight: me.head(nm.weight, s.v_dim)?,
                        eps: nm.eps,
                    };
                    k.dispatch_wide_norm(&shape, dn)?
                }
                None if chunked && chunked_wide => k.dispatch_chunked_wide(&shape)?,
                None if chunked => k.dispatch_chunked(&shape)?,
                None if wide => k.dispatch_wide(&shape)?,
                None => k.dispatch(&shape)?,
            };
            Ok(r.dispatch(d)?)
        })
    }
}

impl VulkanBackend {
    /// Whether `s`'s expert products group the tokens by expert (tiled products): from tuning
    /// `moe_grouped_min` tokens where the per-token int8 launches run, `moe_grouped_min_f32`
    /// where they do not.
    fn moe_grouped(&self, s: &MoeQuantShape) -> bool {
        let t = self.dev.tuning();
        let min = match vkllm_vk::moe_q8a_runs(&self.dev, s) {
            true => t.moe_grouped_min,
            false => t.moe_grouped_min_f32,
        } as usize;
        min > 0 && s.n >= min && MoeExpertsGrouped::<BufSlice<'_>>::supports(s)
    }

    /// The grouped int8 launch where `s`'s expert products take it (tuning `moe_q8g_min` <= n
    /// < `moe_grouped_min`, where the per-token int8 launches run).
    fn moe_q8g_launch(&self, s: &MoeQuantShape) -> Option<Q8gLaunch> {
        let t = self.dev.tuning();
        let (min, max) = (t.moe_q8g_min as usize, t.moe_grouped_min as usize);
        let cols = t.moe_q8g_cols as usize;
        let launch = Q8gLaunch {
            columns: cols,
            per_expert: t.moe_q8g_wpe,
        };
        let below_grouped = max == 0 || s.n < max;
        (min > 0
            && s.n >= min
            && below_grouped
            && vkllm_vk::moe_q8a_runs(&self.dev, s)
            && MoeExpertsGrouped::<BufSlice<'_>>::supports_q8a(s, cols))
        .then_some(launch)
    }

    /// The experts over block-format weights: for few tokens three dispatches reading only the
    /// selected experts' rows per token, for many (tuning `moe_grouped_min`) the tokens grouped
    /// by expert; in between (tuning `moe_q8g_min`) int8 products over each expert's slots.
    #[allow(clippy::too_many_arguments)]
    fn moe_experts_quant(
        &mut self,
        x: Tensor,
        n: usize,
        ex: &Experts,
        top_k: usize,
        ids: Tensor,
        weights: Tensor,
        scratch: Tensor,
        out: Tensor,
    ) -> Result<(), ModelError> {
        let (h, ff) = (ex.hidden, ex.ff);
        let shape = MoeQuantShape {
            n,
            top_k,
            hidden: h,
            ff,
            n_experts: ex.n_experts,
            gate: self.matrix(ex.gate).dtype,
            up: self.matrix(ex.up).dtype,
            down: self.matrix(ex.down).dtype,
        };
        let lanes = self.dev.tuning().moe_lanes;
        let grouped = self.moe_grouped(&shape);
        let int8 = !grouped && vkllm_vk::moe_q8a_runs(&self.dev, &shape);
        // (Implies `int8`: the per-token int8 launches' conditions and fewer tokens than
        // `moe_grouped_min`.)
        let q8g = self.moe_q8g_launch(&shape);
        // The grouped products on cooperative matrices (tuning `moe_coop`) where they run.
        let sg = self.dev.info().subgroup_size;
        let coop = (self.dev.tuning().moe_coop && self.dev.coopmat() && matches!(sg, 16 | 32 | 64))
            .then_some(sg);
        let [a, y, l] = moe_scratch_parts(n, top_k, h, ff, ex.n_experts);
        let (ids_t, weights_t) = (ids, weights);
        self.record(|me, r| {
            let w = |t: Tensor| me.matrix(t).parts[0].buffer.all();
            let part =
                |(off, len): (usize, usize)| me.buf(scratch).slice(4 * off as u64, 4 * len as u64);
            let (x, ids, weights) = (
                me.head(x, n * h)?,
                me.head(ids, n * top_k)?,
                me.head(weights, n * top_k)?,
            );
            let (gate, up, down, out) = (w(ex.gate), w(ex.up), w(ex.down), me.head(out, n * h)?);
            let grouped_op = || -> Result<_, vkllm_vk::Error> {
                Ok(MoeExpertsGrouped {
                    x,
                    ids,
                    weights,
                    gate,
                    up,
                    down,
                    act: part(a)?,
                    y: part(y)?,
                    lists: part(l)?,
                    out,
                })
            };
            let ds: Vec<_> = if let Some(launch) = q8g {
                grouped_op()?.dispatch_q8a(&shape, launch)?.into()
            } else if grouped {
                let g = grouped_op()?;
                match coop {
                    Some(sg) => g.dispatch_coop(&shape, sg)?.into(),
                    None => g.dispatch(&shape)?.into(),
                }
            } else if int8 {
                // The routing entries are read as 16-byte words (the scratch is padded).
                let kw = (n * top_k).next_multiple_of(4);
                MoeExpertsQ8a {
                    x,
                    ids: me.head(ids_t, kw)?,
                    weights: me.head(weights_t, kw)?,
                    gate,
                    up,
                    down,
                    act: part(a)?,
                    out,
                }
                .dispatch(&shape)?
                .into()
            } else {
                let act = part(a)?;
                MoeExpertsQuant {
                    x,
                    ids,
                    weights,
                    gate,
                    up,
                    down,
                    act,
                    out,
                }
                .dispatch_lanes(&shape, lanes)?
            };
            for d in ds {
                r.dispatch(d)?;
            }
            Ok(())
        })
    }
}

impl VulkanBackend {
    /// `Backend::moe_ffn`: where the experts run on the int8 launches (few tokens,
    /// [`vkllm_vk::moe_q8a_runs`]) and the router takes the fused matvec, the norm goes into
    /// the router's and gate/up's products and the residual add into down's (four launches:
    /// router, routing, gate/up, down); otherwise the separate ops.
    pub(super) fn moe_ffn_op(&mut self, a: &MoeFfn<'_>) -> Result<(), ModelError> {
        let ex = a.experts;
        let (n, h, k) = (a.n, ex.hidden, a.top_k + a.shared as usize);
        let mats = [ex.gate, ex.up, ex.down].map(|t| self.matrix(t));
        if !self.fused || a.router.bias.is_some() || mats.iter().any(|m| m.parts.len() != 1) {
            return moe_ffn_unfused(self, a);
        }
        let shape = MoeQuantShape {
            n,
            top_k: k,
            hidden: h,
            ff: ex.ff,
            n_experts: ex.n_experts,
            gate: mats[0].dtype,
            up: mats[1].dtype,
            down: mats[2].dtype,
        };
        let grouped = self.moe_grouped(&shape);
        let q8g = self.moe_q8g_launch(&shape);
        if grouped
            || !vkllm_vk::moe_q8a_runs(&self.dev, &shape)
            || n > self.columns_max(&[a.router])
        {
            return moe_ffn_unfused(self, a);
        }
        let norm = (a.norm, a.eps, a.norm_offset);
        let (rows, logits) = (a.router.rows, a.logits);
        let store = Epilogue::Store;
        if !self.try_fused_matvec(&[a.router], a.x, n, logits, rows, &[0], norm, store)? {
            return moe_ffn_unfused(self, a);
        }
        let (ne, renorm) = (a.n_experts, a.renormalize);
        self.moe_route(logits, n, ne, a.top_k, renorm, a.shared, a.ids, a.weights)?;
        let parts = moe_scratch_parts(n, k, h, ex.ff, ex.n_experts);
        self.record(|me, r| {
            // The routing entries are read as 16-byte words (the scratch is padded).
            let kw = (n * k).next_multiple_of(4);
            let w = |t: Tensor| me.matrix(t).parts[0].buffer.all();
            let part = |(off, len): (usize, usize)| {
                me.buf(a.scratch).slice(4 * off as u64, 4 * len as u64)
            };
            let fusions = MoeFusions {
                norm: Some((
                    me.head(a.norm, h)?,
                    NormPrologue {
                        eps: a.eps,
                        offset: a.norm_offset,
                    },
                )),
                accumulate: true,
            };
            // Decode batches (tuning `moe_q8g_min`): the grouped int8 launches, same fusions.
            if let Some(launch) = q8g {
                let ds = MoeExpertsGrouped {
                    x: me.head(a.x, n * h)?,
                    ids: me.head(a.ids, n * k)?,
                    weights: me.head(a.weights, n * k)?,
                    gate: w(ex.gate),
                    up: w(ex.up),
                    down: w(ex.down),
                    act: part(parts[0])?,
                    y: part(parts[1])?,
                    lists: part(parts[2])?,
                    out: me.head(a.x, n * h)?,
                }
                .dispatch_q8a_fused(&shape, launch, fusions)?;
                for d in ds {
                    r.dispatch(d)?;
                }
                return Ok(());
            }
            let ds = MoeExpertsQ8a {
                x: me.head(a.x, n * h)?,
                ids: me.head(a.ids, kw)?,
                weights: me.head(a.weights, kw)?,
                gate: w(ex.gate),
                up: w(ex.up),
                down: w(ex.down),
                act: part(parts[0])?,
                out: me.head(a.x, n * h)?,
            }
            .dispatch_fused(&shape, fusions)?;
            for d in ds {
                r.dispatch(d)?;
            }
            Ok(())
        })
    }

    /// The storage format of a weight matrix (`None` for an activation buffer): tells a test or
    /// a report whether a weight is kept in its block format.
    pub fn matrix_dtype(&self, t: Tensor) -> Option<WeightType> {
        match &self.slots.get(t.index())? {
            super::Slot::Matrix(m) => Some(m.dtype),
            super::Slot::Buf { .. } => None,
        }
    }
}
