//! `shaders/moe_experts_grouped.wgsl`: the routed experts of many tokens grouped by expert
//! (prompt prefill): the slots routed to each expert are listed on the device, then tiles of an
//! expert's weight rows (llama.cpp blocks, dequantized once per tile) meet tiles of its slots.
//! Five dispatches: group, gate, up (SiLU-gated), down into per-slot rows, and the weighted sum;
//! the three products either on scalar f32 tiles or on cooperative matrices
//! (`shaders/moe_experts_coop.wgsl`, [`MoeExpertsGrouped::dispatch_coop`]), or for decode
//! batches gate/up and down on int8 dot products over each expert's listed slots
//! (`matvec_q8a.wgsl`'s grouped MOE modes, [`MoeExpertsGrouped::dispatch_q8a`]).

use crate::mat_quant::format_overrides;
use crate::moe_experts_q8a::MoeFusions;
use crate::moe_experts_quant::MoeQuantShape;
use crate::sources::MOE_EXPERTS_COOP as SRC_COOP;
use crate::sources::MOE_EXPERTS_GROUPED as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, WeightType};

const WG: u32 = 256;
/// Rows and slots of one tile, columns per step.
const TR: usize = 64;
const TT: usize = 32;
const KC: usize = 32;

const BINDINGS: &[crate::BindingSpec] = &[
    rd("w"),
    rd("src"),
    rd("ids"),
    rd("weights"),
    rw("lists"),
    rw("dst"),
];

pub static MOE_GROUP: KernelSpec = KernelSpec {
    name: "moe_group",
    file: "moe_experts_grouped.wgsl",
    entry: "group",
    source: SRC,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};
pub static MOE_GROUPED: KernelSpec = KernelSpec {
    name: "moe_grouped",
    file: "moe_experts_grouped.wgsl",
    entry: "grouped",
    source: SRC,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};
pub static MOE_GROUPED_SUM: KernelSpec = KernelSpec {
    name: "moe_grouped_sum",
    file: "moe_experts_grouped.wgsl",
    entry: "sum",
    source: SRC,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};

/// The products of `grouped` on cooperative matrices (same bindings and push constants).
pub static MOE_GROUPED_COOP: KernelSpec = KernelSpec {
    name: "moe_grouped_coop",
    file: "moe_experts_coop.wgsl",
    entry: "main",
    source: SRC_COOP,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};
/// Slots and weight rows of one [`MOE_GROUPED_COOP`] tile.
const COOP_SLOTS: usize = 32;
const COOP_ROWS: usize = 128;

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GroupedParams {
    pub n: u32,
    pub top_k: u32,
    pub rows: u32,
    pub cols: u32,
    pub n_experts: u32,
    pub stage: u32,
    pub pad: [u32; 2],
}

/// How [`MoeExpertsGrouped::dispatch_q8a`] launches: `columns` (1 to 8) slots per pass, and
/// `per_expert` workgroups per expert it aims for (each then takes up to 16 row groups, sharing
/// one quantization of its slots' x; 0: one row group per workgroup).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Q8gLaunch {
    pub columns: usize,
    pub per_expert: u32,
}

/// The grouped expert computation: `act` (`[n, top_k, ff]`), `y` (`[n, top_k, hidden]`) and
/// `lists` ([`MoeExpertsGrouped::list_words`]) are scratch; the result goes to `out`
/// (`[n, hidden]`).
pub struct MoeExpertsGrouped<B> {
    pub x: B,
    pub ids: B,
    pub weights: B,
    /// `[n_experts * ff, hidden]`, `[n_experts * ff, hidden]`, `[n_experts * hidden, ff]`.
    pub gate: B,
    pub up: B,
    pub down: B,
    pub act: B,
    pub y: B,
    pub lists: B,
    pub out: B,
}

impl<B> MoeExpertsGrouped<B> {
    /// Words of the slot lists: `[n_experts, n]` then `n_experts` counts (padded to whole
    /// 16-byte words, as the int8 launches read them).
    pub fn list_words(n: usize, n_experts: usize) -> usize {
        (n_experts * (n + 1)).next_multiple_of(4)
    }

    /// Whether [`MoeExpertsGrouped::dispatch_q8a`] takes this shape with `columns` slots per
    /// pass: what the grouped kernels and the per-token int8 launches take, and `columns`
    /// rows of x (and of the activations) within the int8 kernel's shared copy.
    pub fn supports_q8a(s: &MoeQuantShape, columns: usize) -> bool {
        let elems = crate::matvec_q8a::MAX_ELEMS;
        Self::supports(s)
            && crate::moe_experts_q8a::supported(s)
            && (1..=crate::matvec_fused::MAX_COLUMNS).contains(&columns)
            && columns * s.hidden.max(s.ff) <= elems
    }

    /// Whether the grouped kernels take this shape (block formats, rows of whole 32-column
    /// steps); otherwise use [`crate::moe_experts_quant::MoeExpertsQuant`].
    pub fn supports(s: &MoeQuantShape) -> bool {
        let fmt_ok = |t: WeightType, cols: usize| {
            t.is_quantized() && cols.is_multiple_of(KC) && cols.is_multiple_of(t.block_size())
        };
        fmt_ok(s.gate, s.hidden) && fmt_ok(s.up, s.hidden) && fmt_ok(s.down, s.ff)
    }
}

impl<B: KernelBuffer> MoeExpertsGrouped<B> {
    /// [`MoeExpertsGrouped::dispatch`] with the gate, up and down products on cooperative
    /// matrices (f16 inputs, f32 sums: `vkllm_cpu::moe_experts_f16`), for a device that runs
    /// them with subgroups of `subgroup_size` (16, 32 or 64).
    pub fn dispatch_coop(
        self,
        s: &MoeQuantShape,
        subgroup_size: u32,
    ) -> Result<[Dispatch<B>; 5], Error> {
        let k = &MOE_GROUPED_COOP;
        if !matches!(subgroup_size, 16 | 32 | 64) {
            return Err(shape_err(k, format!("subgroups of {subgroup_size}")));
        }
        let mut ds = self.dispatch(s)?;
        let wg = 4 * subgroup_size;
        for (d, rows) in ds[1..4].iter_mut().zip([s.ff, s.ff, s.hidden]) {
            let t = [
                rows.div_ceil(COOP_ROWS),
                s.n.div_ceil(COOP_SLOTS),
                s.n_experts,
            ];
            if t.iter().any(|&v| v > 65535) {
                return Err(shape_err(k, format!("grid {t:?}")));
            }
            d.kernel = k;
            d.overrides = d
                .overrides
                .clone()
                .set("SG", subgroup_size as f64)
                .set("WG", wg as f64)
                .set("NPI", (256 / wg) as f64);
            d.groups = t.map(|v| v as u32);
        }
        Ok(ds)
    }

    /// [`MoeExpertsGrouped::dispatch`] with gate/up (one gated launch) and down on int8 dot
    /// products (`matvec_q8a.wgsl`, MOE 3 and 4): a workgroup per (row group, expert) takes the
    /// expert's listed slots `columns` at a time, so each routed expert's blocks are read once
    /// per step however many tokens chose it (decode batches). Not exact: x and the
    /// activations are quantized per 32 elements (`vkllm_cpu::quant::moe_gate_up_q8act` /
    /// `moe_down_q8act`, up to the order of the down sums). Four dispatches: group, gate/up,
    /// down into per-slot rows, sum.
    pub fn dispatch_q8a(
        self,
        s: &MoeQuantShape,
        launch: Q8gLaunch,
    ) -> Result<[Dispatch<B>; 4], Error> {
        let none = MoeFusions {
            norm: None,
            accumulate: false,
        };
        self.dispatch_q8a_fused(s, launch, none)
    }

    /// [`MoeExpertsGrouped::dispatch_q8a`] with `f`'s fusions: x normalized in gate/up's
    /// quantization (as `matvec_q8a`'s prologue), the weighted sum added into `out`.
    pub fn dispatch_q8a_fused(
        self,
        s: &MoeQuantShape,
        launch: Q8gLaunch,
        f: MoeFusions<B>,
    ) -> Result<[Dispatch<B>; 4], Error> {
        let columns = launch.columns;
        use crate::matvec_fused::{MatvecFused, MatvecOp};
        use crate::moe_experts_q8a::{MoeGather, gate_up_op};
        if !Self::supports_q8a(s, columns) {
            return Err(shape_err(
                &crate::matvec_q8a::MATVEC_Q8A,
                format!("not a grouped int8 MoE launch: {s:?}, {columns} columns"),
            ));
        }
        let (x, act, y, lists, weights) = (self.x, self.act, self.y, self.lists, self.weights);
        let (gate, up, down) = (self.gate, self.up, self.down);
        let [group, _, _, _, sum] = self.dispatch_stages(s, f.accumulate)?;
        let gather = |stage| MoeGather::of(s, stage);
        let mut gu = gate_up_op(s, s.ff, columns, f.norm.as_ref().map(|n| n.1));
        gu.q8a.workgroups = launch.per_expert;
        let gate_up = MatvecFused {
            w: vec![gate, up],
            x,
            y: act,
            norm_w: f.norm.map(|n| n.0),
        }
        .dispatch_q8a_moe(&gu, gather(3), lists, weights)?;
        let mut dn = MatvecOp::plain(s.down, s.hidden, s.ff);
        dn.n_cols = columns;
        dn.q8a.workgroups = launch.per_expert;
        let down = MatvecFused {
            w: vec![down],
            x: act,
            y,
            norm_w: None,
        }
        .dispatch_q8a_moe(&dn, gather(4), lists, weights)?;
        Ok([group, gate_up, down, sum])
    }

    pub fn dispatch(self, s: &MoeQuantShape) -> Result<[Dispatch<B>; 5], Error> {
        self.dispatch_stages(s, false)
    }

    /// [`MoeExpertsGrouped::dispatch`], the sum adding into `out` when `accumulate`.
    fn dispatch_stages(
        self,
        s: &MoeQuantShape,
        accumulate: bool,
    ) -> Result<[Dispatch<B>; 5], Error> {
        let k = &MOE_GROUPED;
        if s.n == 0 || s.top_k == 0 || s.top_k > s.n_experts || s.hidden == 0 || s.ff == 0 {
            return Err(shape_err(k, format!("bad shape {s:?}")));
        }
        if !Self::supports(s) {
            return Err(shape_err(
                k,
                format!("block formats with rows of whole {KC}-column steps needed: {s:?}"),
            ));
        }
        if s.n_experts > 65535 {
            return Err(shape_err(k, format!("{} experts", s.n_experts)));
        }
        let (n, kk, h, f) = (s.n as u64, s.top_k as u64, s.hidden as u64, s.ff as u64);
        let rows_bytes = |t: WeightType, rows: usize, cols: usize| -> Result<u64, Error> {
            let rb = t
                .row_bytes(cols as u64)
                .ok_or_else(|| shape_err(k, format!("{} rows of {cols}", t.name())))?;
            let b = rb * rows as u64;
            if b > u32::MAX as u64 - 16 {
                return Err(shape_err(k, "over 4 GiB in one buffer"));
            }
            Ok(b.div_ceil(4) * 4)
        };
        need(
            k,
            "gate",
            &self.gate,
            rows_bytes(s.gate, s.n_experts * s.ff, s.hidden)?,
        )?;
        need(
            k,
            "up",
            &self.up,
            rows_bytes(s.up, s.n_experts * s.ff, s.hidden)?,
        )?;
        need(
            k,
            "down",
            &self.down,
            rows_bytes(s.down, s.n_experts * s.hidden, s.ff)?,
        )?;
        need(k, "x", &self.x, 4 * n * h)?;
        need(k, "ids", &self.ids, 4 * n * kk)?;
        need(k, "weights", &self.weights, 4 * n * kk)?;
        need(k, "act", &self.act, 4 * n * kk * f)?;
        need(k, "y", &self.y, 4 * n * kk * h)?;
        need(
            k,
            "lists",
            &self.lists,
            4 * Self::list_words(s.n, s.n_experts) as u64,
        )?;
        need(k, "out", &self.out, 4 * n * h)?;
        to_u32(k, "n * top_k * hidden", s.n * s.top_k * s.hidden.max(s.ff))?;
        let p = |rows: usize, cols: usize, stage: u32| -> Result<GroupedParams, Error> {
            Ok(GroupedParams {
                n: to_u32(k, "n", s.n)?,
                top_k: to_u32(k, "top_k", s.top_k)?,
                rows: to_u32(k, "rows", rows)?,
                cols: to_u32(k, "cols", cols)?,
                n_experts: to_u32(k, "n_experts", s.n_experts)?,
                stage,
                pad: [0; 2],
            })
        };
        // Entries without weights take the gate's or down's format constants (unused).
        let ov = |dtype: WeightType| format_overrides(dtype).set("WG", WG as f64);
        let tiles = |rows: usize| -> Result<[u32; 3], Error> {
            let t = [rows.div_ceil(TR), s.n.div_ceil(TT), s.n_experts];
            if t.iter().any(|&v| v > 65535) {
                return Err(shape_err(k, format!("grid {t:?}")));
            }
            Ok(t.map(|v| v as u32))
        };
        let bufs = |w: B, src: B, dst: B| vec![w, src, self.ids, self.weights, self.lists, dst];
        Ok([
            Dispatch::new(
                &MOE_GROUP,
                ov(s.gate),
                bufs(self.gate, self.x, self.act),
                &p(s.ff, s.hidden, 0)?,
                grid_for(&MOE_GROUP, s.n_experts as u64)?,
            ),
            Dispatch::new(
                k,
                ov(s.gate),
                bufs(self.gate, self.x, self.act),
                &p(s.ff, s.hidden, 0)?,
                tiles(s.ff)?,
            ),
            Dispatch::new(
                k,
                ov(s.up),
                bufs(self.up, self.x, self.act),
                &p(s.ff, s.hidden, 1)?,
                tiles(s.ff)?,
            ),
            Dispatch::new(
                k,
                ov(s.down),
                bufs(self.down, self.act, self.y),
                &p(s.hidden, s.ff, 2)?,
                tiles(s.hidden)?,
            ),
            Dispatch::new(
                &MOE_GROUPED_SUM,
                ov(s.down),
                bufs(self.down, self.y, self.out),
                &p(s.hidden, s.ff, accumulate as u32)?,
                grid_for(&MOE_GROUPED_SUM, (n * h).div_ceil(WG as u64))?,
            ),
        ])
    }
}
