//! `shaders/matvec_fused.wgsl`: the decode matvec in its fast layout (a team of lanes per row,
//! 16-byte loads, any subgroup size) with its fusions: `n` activation columns, an RMSNorm
//! prologue, up to three weight parts in one dispatch, and store / accumulate / gated-activation
//! epilogues. Every weight type (float and quantized) goes through this one kernel.
//!
//! The reference kernels ([`crate::matvec::Matvec`], one column, plain store/accumulate) stay
//! selectable through [`MatvecImpl::Reference`].

use crate::mat_quant::format_overrides;
use crate::matvec::{MatShape, check_weight};
use crate::quantize_act_q8::ActQ8Layout;
use crate::sources::MATVEC_FUSED as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides, WeightType};

pub static MATVEC_FUSED: KernelSpec = KernelSpec {
    name: "matvec_fused",
    file: "matvec_fused.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("w0"), rd("x"), rw("y"), rd("w1"), rd("w2"), rd("norm_w")],
    push_size: 52,
    exact_fp: false,
    glsl: None,
};

/// Most activation columns (tokens) one dispatch takes.
pub const MAX_COLUMNS: usize = 8;
/// Most weight parts one dispatch takes.
pub const MAX_PARTS: usize = 3;

/// Which matvec kernel runs a plain `y (+)= W x`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatvecImpl {
    /// `matvec.wgsl` / `mat_quant.wgsl`'s `matvec`: one workgroup per R rows, one column, no
    /// fusions. Kept as the reference the fast kernel is checked against.
    Reference,
    /// `matvec_fused.wgsl` (when [`MatvecOp::fast_supported`]; else the reference runs).
    #[default]
    Fast,
    /// `matvec_q8a.wgsl`: activations quantized to int8 per 32 and int8 dot products (when
    /// [`crate::matvec_q8a::supported`] and the device has int8 dot products; else as `Fast`).
    /// Not exact: see [`crate::matvec_q8a`].
    Int8,
}

/// The activation of a gated epilogue, as vkllm-cpu's `silu` / `gelu_tanh`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GatedAct {
    Silu,
    GeluTanh,
}

/// What the kernel does with each finished dot product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// `y = result`.
    #[default]
    Store,
    /// `y += result` (a fused residual add).
    Accumulate,
    /// Two parts of equal rows, gate and up: `y[off_0 + r] = act(gate_r . x) * (up_r . x)`.
    Gated { act: GatedAct },
}

/// RMSNorm of each activation column before the product:
/// `x' = x * inv_rms(x) * (offset + norm_w)`, `inv_rms = 1 / sqrt(mean(x^2) + eps)`
/// (vkllm-cpu's `rmsnorm`; `offset` 0 for Llama/Qwen, 1 for Gemma's `1 + w`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormPrologue {
    pub eps: f32,
    pub offset: f32,
}

/// One weight part: `rows` rows written at `y[t * y_stride + y_offset + r]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatvecPart {
    pub rows: usize,
    pub y_offset: usize,
}

/// Launch shape of the fast kernel. `lanes` invocations own `rows_per_team` rows; a workgroup of
/// `wg` invocations holds `wg / lanes` teams. Powers of two; `1 <= rows_per_team <= 4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatvecTuning {
    pub wg: u32,
    pub lanes: u32,
    pub rows_per_team: u32,
}

/// One fused matvec: `y[t] = epilogue(W_i . prologue(x[t]))` for each part `i` and column `t`.
#[derive(Clone, Debug, PartialEq)]
pub struct MatvecOp {
    /// Weight type of the parts ([`MatvecOp::part_types`] may differ for the int8 kernel).
    pub dtype: WeightType,
    pub cols: usize,
    /// 1 to [`MAX_PARTS`] parts (exactly 2, gate then up, for [`Epilogue::Gated`]).
    pub parts: Vec<MatvecPart>,
    /// Each part's weight type where they differ (empty: all `dtype`): one launch of
    /// `matvec_q8a.wgsl` takes mixed types (q/k/v of Q4_K_M files: V in Q6_K), ungated only.
    pub part_types: Vec<WeightType>,
    /// Activation columns, 1 to [`MAX_COLUMNS`]: x is `[n_cols, cols]`, y is `[n_cols, y_stride]`.
    pub n_cols: usize,
    pub y_stride: usize,
    pub norm: Option<NormPrologue>,
    pub epilogue: Epilogue,
    /// `None`: [`MatvecOp::default_tuning`].
    pub tuning: Option<MatvecTuning>,
    /// Launch rules of the int8 kernel (ignored by the others).
    pub q8a: crate::matvec_q8a::Q8aRules,
}

impl MatvecOp {
    /// `y[0..rows] = W x`: one part, one column, no fusion.
    pub fn plain(dtype: WeightType, rows: usize, cols: usize) -> Self {
        MatvecOp {
            dtype,
            cols,
            parts: vec![MatvecPart { rows, y_offset: 0 }],
            part_types: Vec::new(),
            n_cols: 1,
            y_stride: rows,
            norm: None,
            epilogue: Epilogue::Store,
            tuning: None,
            q8a: Default::default(),
        }
    }

    /// Part `i`'s weight type.
    pub fn part_type(&self, i: usize) -> WeightType {
        self.part_types.get(i).copied().unwrap_or(self.dtype)
    }

    /// Whether the parts' weight types differ.
    pub fn mixed(&self) -> bool {
        (0..self.parts.len()).any(|i| self.part_type(i) != self.dtype)
    }

    /// Elements per unit of work: a 16-byte float word, or 16 quantized elements.
    pub fn unit_elems(&self) -> usize {
        match self.dtype {
            WeightType::F32 => 4,
            WeightType::F16 | WeightType::Bf16 => 8,
            _ => 16,
        }
    }

    /// The fast kernel reads whole 16-byte words of each float row: cols a multiple of 4 (f32)
    /// or 8 (f16/bf16); quantized rows are whole blocks. Otherwise only the reference runs
    /// (plain ops) or the op is refused (fused ones).
    pub fn fast_supported(&self) -> bool {
        self.cols > 0 && self.cols.is_multiple_of(self.unit_elems())
    }

    pub(crate) fn slots(&self, rows_per_team: u32) -> u32 {
        match self.epilogue {
            Epilogue::Gated { .. } => 2 * rows_per_team,
            _ => rows_per_team,
        }
    }

    /// Rows the grid covers (gated: the gate's rows; the up part rides along).
    fn grid_rows(&self) -> impl Iterator<Item = usize> + '_ {
        let n = match self.epilogue {
            Epilogue::Gated { .. } => 1,
            _ => self.parts.len(),
        };
        self.parts.iter().take(n).map(|p| p.rows)
    }

    /// The launch shape used when `tuning` is `None`: 128-invocation workgroups (enough of them
    /// to spread over every SM for 1024-row matrices); 32 lanes per row (a warp on NVIDIA: the
    /// 16-byte loads of a row are one 512-byte coalesced stretch), fewer for rows shorter than
    /// 32 units so no lane idles; 2 rows per team for large matrices (more loads in flight,
    /// x reused twice), 1 otherwise (more teams for small ones).
    pub fn default_tuning(&self) -> MatvecTuning {
        let units = (self.cols / self.unit_elems()).max(1);
        let lanes = units.next_power_of_two().clamp(4, 32) as u32;
        let rows: usize = self.grid_rows().sum();
        let r = if rows >= 16384 && self.slots(2) as usize * self.n_cols <= 16 {
            2
        } else {
            1
        };
        MatvecTuning {
            wg: 128,
            lanes,
            rows_per_team: r,
        }
    }

    /// Bytes of weights one dispatch reads (every part once).
    pub fn weight_bytes(&self) -> u64 {
        self.parts
            .iter()
            .enumerate()
            .map(|(i, p)| self.part_type(i).storage_bytes((p.rows * self.cols) as u64))
            .sum()
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatvecFusedParams {
    pub cols: u32,
    pub y_stride: u32,
    pub rows: [u32; 3],
    pub y_offset: [u32; 3],
    pub wg1: u32,
    pub wg2: u32,
    pub wg_end: u32,
    pub eps: f32,
    pub norm_offset: f32,
}

/// `matvec_q8a.wgsl`'s push constants: the fused kernel's, then the first column.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Q8aParams {
    pub base: MatvecFusedParams,
    pub col0: u32,
}

/// Which kernel [`MatvecFused`] dispatches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Kind {
    Fused,
    Q8a,
    Xg {
        src: ActQ8Layout,
        col0: usize,
    },
    /// `main_qout`: [`Kind::Q8a`], then y quantized with the next norm's offset.
    Qout(f32),
    Moe(crate::moe_experts_q8a::MoeGather),
}

/// The buffers of [`MATVEC_FUSED`]: one weight per part (same order as [`MatvecOp::parts`],
/// each padded to a whole number of 16-byte words), `x` `[n_cols, cols]`, `y`
/// `[n_cols, y_stride]`, and `norm_w` `[cols]` iff the op has a norm.
pub struct MatvecFused<B> {
    pub w: Vec<B>,
    pub x: B,
    pub y: B,
    pub norm_w: Option<B>,
}

impl<B: KernelBuffer> MatvecFused<B> {
    pub fn dispatch(self, op: &MatvecOp) -> Result<Dispatch<B>, Error> {
        self.dispatch_on(op, Kind::Fused, &[])
    }

    /// The same op on `matvec_q8a.wgsl` ([`crate::matvec_q8a`]): same buffers, checks and
    /// parameters; only the weight types and sizes of [`crate::matvec_q8a::supported`].
    pub fn dispatch_q8a(self, op: &MatvecOp) -> Result<Dispatch<B>, Error> {
        self.dispatch_on(op, Kind::Q8a, &[])
    }

    /// The int8 kernel over activations already quantized by
    /// [`crate::quantize_act_q8::QuantizeActQ8`] (the kernel's `XG`): `x` holds the codes and
    /// `norm_w` the scales of `src`, the quantization of every column; this launch takes
    /// columns `col0 .. col0 + op.n_cols` of it (and of y). With `op.norm` the norm's weights
    /// were applied by the quantization and inv_rms comes from its sums. Up to
    /// [`crate::matvec_q8a::XG_MAX_COLUMNS`] columns of any length.
    pub fn dispatch_q8a_xg(
        self,
        op: &MatvecOp,
        src: ActQ8Layout,
        col0: usize,
    ) -> Result<Dispatch<B>, Error> {
        self.dispatch_on(op, Kind::Xg { src, col0 }, &[])
    }

    /// `matvec_q8a.wgsl` over the routed experts of one MoE block ([`crate::moe_experts_q8a`]:
    /// its `MOE` modes): `op` is the product of one token (`n_cols` 1, no norm), the weights
    /// are the stacked expert matrices, `ids` and `weights` the routing (`[tokens, top_k]`
    /// u32 and f32), and the launch takes `moe.tokens` tokens (x and y rows) at once.
    pub(crate) fn dispatch_q8a_moe(
        self,
        op: &MatvecOp,
        moe: crate::moe_experts_q8a::MoeGather,
        ids: B,
        weights: B,
    ) -> Result<Dispatch<B>, Error> {
        let k = &crate::matvec_q8a::MATVEC_Q8A;
        // Only gate/up may normalize x first (down's norm_w binding holds the routing weights).
        let grouped = moe.stage >= 3;
        if (op.n_cols != 1 && !grouped) || (op.norm.is_some() && !matches!(moe.stage, 1 | 3)) {
            return Err(shape_err(
                k,
                "a per-token MoE launch takes one column, and a norm only in gate/up",
            ));
        }
        // Read as 16-byte words: whole words of the routing entries (grouped: the slot lists).
        let words = if grouped {
            crate::moe_experts_grouped::MoeExpertsGrouped::<B>::list_words(
                moe.tokens,
                moe.n_experts,
            )
        } else {
            moe.tokens * moe.top_k
        };
        need(k, "ids", &ids, 4 * words.next_multiple_of(4) as u64)?;
        // (The grouped launches bind the routing weights unread: the grouped `sum` weighs.)
        let routing = moe.tokens * moe.top_k;
        let routing = if grouped {
            routing
        } else {
            routing.next_multiple_of(4)
        };
        need(k, "weights", &weights, 4 * routing as u64)?;
        let normed = self.norm_w.is_some();
        let mut d = self.dispatch_on(op, Kind::Moe(moe), &[])?;
        // The ids go where a third part's weights would, the routing weights in norm_w's place
        // (unless gate/up reads the norm's weights there).
        d.buffers[4] = ids;
        if !normed {
            d.buffers[5] = weights;
        }
        Ok(d)
    }

    /// The checks, push constants and buffers of every launch of both kernels; `extra` follows
    /// the six common buffers (`main_qout`'s four).
    pub(crate) fn dispatch_on(
        self,
        op: &MatvecOp,
        kind: Kind,
        extra: &[B],
    ) -> Result<Dispatch<B>, Error> {
        let q8a = kind != Kind::Fused;
        let moe = match kind {
            Kind::Moe(m) => Some(m),
            _ => None,
        };
        let xg = match kind {
            Kind::Xg { src, col0 } => Some((src, col0)),
            _ => None,
        };
        let k = if let Kind::Qout(_) = kind {
            &crate::matvec_q8a::MATVEC_Q8A_QOUT
        } else if q8a {
            &crate::matvec_q8a::MATVEC_Q8A
        } else {
            &MATVEC_FUSED
        };
        let max_cols = if xg.is_some() {
            crate::matvec_q8a::XG_MAX_COLUMNS
        } else {
            MAX_COLUMNS
        };
        let n_parts = op.parts.len();
        if n_parts == 0 || n_parts > MAX_PARTS || self.w.len() != n_parts {
            return Err(shape_err(
                k,
                format!(
                    "{n_parts} parts and {} weights (1..={MAX_PARTS}, one per part)",
                    self.w.len()
                ),
            ));
        }
        if op.n_cols == 0 || op.n_cols > max_cols {
            return Err(shape_err(
                k,
                format!("{} columns (1..={max_cols})", op.n_cols),
            ));
        }
        if let Some((src, col0)) = xg
            && (!crate::matvec_q8a::supported_xg(op)
                || src.cols != op.cols
                || col0 + op.n_cols > src.n)
        {
            return Err(shape_err(
                k,
                format!(
                    "columns {col0}..{} of {} quantized columns of {}, {} x {}: not a \
                     matvec_q8a op on quantized x",
                    col0 + op.n_cols,
                    src.n,
                    src.cols,
                    op.dtype.name(),
                    op.cols
                ),
            ));
        }
        let shared_q8a = kind == Kind::Q8a || matches!(kind, Kind::Qout(_));
        if (shared_q8a || moe.is_some()) && !crate::matvec_q8a::supported(op) {
            return Err(shape_err(
                k,
                format!(
                    "{} x {} columns of {}: not a matvec_q8a op",
                    op.n_cols,
                    op.cols,
                    op.dtype.name()
                ),
            ));
        }
        if !op.fast_supported() {
            return Err(shape_err(
                k,
                format!(
                    "{} rows of {} elements: need a multiple of {}",
                    op.dtype.name(),
                    op.cols,
                    op.unit_elems()
                ),
            ));
        }
        if op.mixed()
            && (!q8a
                || matches!(op.epilogue, Epilogue::Gated { .. })
                || op.part_types.len() != n_parts)
        {
            return Err(shape_err(
                k,
                "parts of mixed weight types need the int8 kernel, ungated, one type per part",
            ));
        }
        if let Epilogue::Gated { .. } = op.epilogue
            && (n_parts != 2 || op.parts[0].rows != op.parts[1].rows)
        {
            return Err(shape_err(
                k,
                "a gated epilogue needs two parts (gate, up) of equal rows",
            ));
        }
        let t = op.tuning.unwrap_or_else(|| match kind {
            Kind::Xg { .. } => crate::matvec_q8a::xg_tuning(op),
            Kind::Q8a | Kind::Qout(_) => crate::matvec_q8a::default_tuning(op),
            // The expert launches keep 256 invocations (their sweeps were at that size).
            Kind::Moe(_) => crate::matvec_q8a::tuning_with_wg(op, 256),
            Kind::Fused => op.default_tuning(),
        });
        let slots = op.slots(t.rows_per_team);
        // Accumulators per invocation: 16, 32 with quantized x.
        let max_sums = if xg.is_some() { 32 } else { 16 };
        if !t.wg.is_power_of_two()
            || !(32..=1024).contains(&t.wg)
            || !t.lanes.is_power_of_two()
            || t.lanes > t.wg
            || !(1..=4).contains(&t.rows_per_team)
            || slots > 4
            || slots as usize * op.n_cols > max_sums
            || (t.wg / 4) as usize * slots as usize * op.n_cols > 1024
        {
            return Err(shape_err(
                k,
                format!("tuning {t:?} with {slots} slots x {} columns", op.n_cols),
            ));
        }
        for (i, (part, w)) in op.parts.iter().zip(&self.w).enumerate() {
            let s = MatShape {
                dtype: op.part_type(i),
                rows: part.rows,
                cols: op.cols,
                row_offset: 0,
                accumulate: false,
            };
            check_weight(k, w, &s)?;
            // Weights are read as whole 16-byte words.
            need(
                k,
                "w",
                w,
                op.part_type(i)
                    .storage_bytes((part.rows * op.cols) as u64)
                    .div_ceil(16)
                    * 16,
            )?;
            let written = !matches!(op.epilogue, Epilogue::Gated { .. }) || i == 0;
            if written && part.y_offset + part.rows > op.y_stride {
                return Err(shape_err(
                    k,
                    format!(
                        "part {i}: rows {}..{} beyond y_stride {}",
                        part.y_offset,
                        part.y_offset + part.rows,
                        op.y_stride
                    ),
                ));
            }
        }
        let ends = op
            .grid_rows()
            .zip(&op.parts)
            .map(|(_, p)| p.y_offset + p.rows)
            .max()
            .unwrap_or(0);
        let col0 = xg.map_or(0, |(_, c)| c);
        // Rows of x and y the launch covers (a MoE launch: one per token; grouped, y one per
        // slot, x one per token for gate/up and per slot for down).
        let (x_rows, y_rows) = match moe {
            Some(m) if m.stage == 3 => (m.tokens, m.tokens * m.top_k),
            Some(m) if m.stage == 4 => (m.tokens * m.top_k, m.tokens * m.top_k),
            Some(m) => (m.tokens, m.tokens),
            None => (col0 + op.n_cols, col0 + op.n_cols),
        };
        need(
            k,
            "y",
            &self.y,
            4 * ((y_rows - 1) * op.y_stride + ends) as u64,
        )?;
        match (xg, &op.norm, &self.norm_w) {
            (Some((src, _)), _, Some(meta)) => {
                need(k, "x", &self.x, src.code_bytes())?;
                need(k, "norm_w", meta, src.meta_bytes())?;
            }
            (Some(_), _, None) => {
                return Err(shape_err(k, "norm_w must hold the quantized x's scales"));
            }
            (None, Some(_), Some(nw)) => {
                need(k, "x", &self.x, 4 * (x_rows * op.cols) as u64)?;
                need(k, "norm_w", nw, 4 * op.cols as u64)?;
            }
            (None, None, None) => need(k, "x", &self.x, 4 * (x_rows * op.cols) as u64)?,
            _ => {
                return Err(shape_err(
                    k,
                    "norm_w must be given exactly when the op has a norm prologue",
                ));
            }
        }
        // With quantized x no workgroup quantizes, so nothing is amortized over row groups.
        let nit = if q8a && xg.is_none() {
            crate::matvec_q8a::groups_per_workgroup(op, t)
        } else {
            1
        };
        let rows_per_wg = (t.wg / t.lanes * t.rows_per_team * nit) as usize;
        let mut wg_start = [0u32; 3];
        let mut total = 0u64;
        for (i, rows) in op.grid_rows().enumerate() {
            wg_start[i] = u32::try_from(total).map_err(|_| shape_err(k, "too many rows"))?;
            total += rows.div_ceil(rows_per_wg) as u64;
        }
        let mut grid = grid_for(k, total)?;
        match moe {
            Some(m) if m.stage >= 3 => grid[2] = to_u32(k, "experts", m.n_experts)?,
            Some(m) => grid[2] = to_u32(k, "tokens", m.tokens)?,
            None => {}
        }
        let mut rows = [0u32; 3];
        let mut y_offset = [0u32; 3];
        for (i, part) in op.parts.iter().enumerate() {
            rows[i] = to_u32(k, "rows", part.rows)?;
            y_offset[i] = to_u32(k, "y_offset", part.y_offset)?;
        }
        let norm = op.norm.unwrap_or(NormPrologue {
            eps: 0.0,
            offset: 0.0,
        });
        let p = MatvecFusedParams {
            cols: to_u32(k, "cols", op.cols)?,
            y_stride: to_u32(k, "y_stride", op.y_stride)?,
            rows,
            y_offset,
            wg1: if n_parts > 1 { wg_start[1] } else { u32::MAX },
            wg2: if n_parts > 2 { wg_start[2] } else { u32::MAX },
            wg_end: total as u32,
            eps: norm.eps,
            norm_offset: match kind {
                Kind::Qout(offset) => offset,
                _ => norm.offset,
            },
        };
        let base = if op.dtype.is_quantized() {
            format_overrides(op.dtype)
        } else {
            Overrides::new()
                .set("QTYPE", 0.0)
                .set("DTYPE", op.dtype.code())
        };
        let epi = match op.epilogue {
            Epilogue::Store => 0.0,
            Epilogue::Accumulate => 1.0,
            Epilogue::Gated {
                act: GatedAct::Silu,
            } => 2.0,
            Epilogue::Gated {
                act: GatedAct::GeluTanh,
            } => 3.0,
        };
        let base = if q8a {
            let o = Overrides::new()
                .set("QTYPE", op.dtype.ggml_id() as f64)
                .set("TS", op.dtype.bytes() as f64)
                .set("NIT", nit as f64)
                .set("XG", xg.is_some() as u32 as f64)
                .set("MIXED", op.mixed() as u32 as f64)
                .set("QTYPE1", op.part_type(1).ggml_id() as f64)
                .set("QTYPE2", op.part_type(2).ggml_id() as f64);
            let o = match moe {
                Some(m) => o
                    .set("MOE", f64::from(m.stage))
                    .set("MOE_FF", m.ff as f64)
                    .set("MOE_K", m.top_k as f64)
                    .set("MOE_E", m.n_experts as f64),
                None => o,
            };
            if moe.is_none() && crate::matvec_q8a::quad(op, t) {
                o.set("QUAD", 1.0)
            } else {
                o
            }
        } else {
            base.set("UE", op.unit_elems() as f64)
        };
        let overrides = base
            .set("WG", t.wg as f64)
            .set("LPR", t.lanes as f64)
            .set("R", t.rows_per_team as f64)
            .set("NC", op.n_cols as f64)
            .set("NPARTS", n_parts as f64)
            .set("NORM", op.norm.is_some() as u32 as f64)
            .set("EPI", epi);
        let w0 = self.w[0];
        let w1 = self.w.get(1).copied().unwrap_or(w0);
        let w2 = self.w.get(2).copied().unwrap_or(w0);
        let nw = self.norm_w.unwrap_or(self.x);
        let mut buffers = vec![w0, self.x, self.y, w1, w2, nw];
        buffers.extend_from_slice(extra);
        Ok(if q8a {
            // A grouped MoE launch reads the slot lists' stride (tokens) from col0.
            let col0 = match moe {
                Some(m) if m.stage >= 3 => m.tokens,
                _ => col0,
            };
            let p = Q8aParams {
                base: p,
                col0: to_u32(k, "col0", col0)?,
            };
            Dispatch::new(k, overrides, buffers, &p, grid)
        } else {
            Dispatch::new(k, overrides, buffers, &p, grid)
        })
    }
}
