//! `shaders/moe_experts_quant.wgsl`: the routed experts over llama.cpp-quantized expert weights
//! (the stacked GGUF blocks), reading only the selected experts' rows. Two dispatches (gate and
//! up with SiLU, down summed with the routing weights) when gate and up share a format, else
//! three (gate, up fused with SiLU, down), each binding its weights with their format.

use crate::mat_quant::format_overrides;
use crate::sources::MOE_EXPERTS_QUANT as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides, WeightType};

/// Invocations per workgroup of the team launch; the reference launch is one 64-invocation
/// workgroup per output row.
const WG: u32 = 128;
const REF_WG: u32 = 64;
/// Lanes per output row of [`MoeExpertsQuant::dispatch`].
pub const MOE_QUANT_LANES: u32 = 16;

const BINDINGS: &[crate::BindingSpec] = &[
    rd("w"),
    rd("x"),
    rd("ids"),
    rd("weights"),
    rw("act"),
    rw("out"),
    rd("w2"),
];

pub static MOE_GATE_UP_QUANT: KernelSpec = KernelSpec {
    name: "moe_gate_up_quant",
    file: "moe_experts_quant.wgsl",
    entry: "gate_up",
    source: SRC,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};
pub static MOE_DOWN_QUANT: KernelSpec = KernelSpec {
    name: "moe_down_quant",
    file: "moe_experts_quant.wgsl",
    entry: "down_sum",
    source: SRC,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MoeQuantParams {
    pub n: u32,
    pub top_k: u32,
    pub hidden: u32,
    pub ff: u32,
    pub n_experts: u32,
    pub stage: u32,
    pub pad: [u32; 2],
}

/// Sizes and weight formats of one quantized MoE expert pass.
#[derive(Clone, Copy, Debug)]
pub struct MoeQuantShape {
    pub n: usize,
    pub top_k: usize,
    pub hidden: usize,
    pub ff: usize,
    pub n_experts: usize,
    /// Formats of the stacked gate, up and down matrices (quantized types).
    pub gate: WeightType,
    pub up: WeightType,
    pub down: WeightType,
}

/// The expert computation over quantized weights: [`MoeExpertsQuant::dispatch`] returns the
/// dispatches, gate and up (SiLU-gated) into `act` (`[n, top_k, ff]` scratch; one dispatch when
/// they share a format, else two), then down into `out` (`[n, hidden]`).
pub struct MoeExpertsQuant<B> {
    pub x: B,
    pub ids: B,
    pub weights: B,
    /// `[n_experts * ff, hidden]`, `[n_experts * ff, hidden]`, `[n_experts * hidden, ff]`.
    pub gate: B,
    pub up: B,
    pub down: B,
    pub act: B,
    pub out: B,
}

/// Bytes of a `[rows, cols]` matrix of `dtype`, or an error naming the weight.
fn matrix_bytes(
    k: &'static KernelSpec,
    name: &str,
    dtype: WeightType,
    rows: usize,
    cols: usize,
) -> Result<u64, Error> {
    if !dtype.is_quantized() {
        return Err(shape_err(
            k,
            format!("{name}: {} is not a block format", dtype.name()),
        ));
    }
    let Some(rb) = dtype.row_bytes(cols as u64) else {
        return Err(shape_err(
            k,
            format!(
                "{name}: {} rows need a multiple of {} columns, got {cols}",
                dtype.name(),
                dtype.block_size()
            ),
        ));
    };
    let bytes = rb * rows as u64;
    if bytes > u32::MAX as u64 - 16 {
        return Err(shape_err(k, format!("{name}: over 4 GiB in one buffer")));
    }
    Ok(bytes.div_ceil(4) * 4)
}

impl<B: KernelBuffer> MoeExpertsQuant<B> {
    /// The dispatches with [`MOE_QUANT_LANES`] lanes per output row, gate and up in one when
    /// they share a format.
    pub fn dispatch(self, s: &MoeQuantShape) -> Result<Vec<Dispatch<B>>, Error> {
        self.dispatch_lanes(s, MOE_QUANT_LANES)
    }

    /// The dispatches with `lanes` (1, 2, 4, ..., 128) invocations per output row, 128 / lanes
    /// rows per workgroup, gate and up in one dispatch when they share a format; lanes 0: one
    /// 64-invocation workgroup per row and separate gate and up dispatches (the reference).
    pub fn dispatch_lanes(self, s: &MoeQuantShape, lanes: u32) -> Result<Vec<Dispatch<B>>, Error> {
        let k = &MOE_GATE_UP_QUANT;
        if lanes != 0 && (!lanes.is_power_of_two() || lanes > WG) {
            return Err(shape_err(
                k,
                format!("lanes per row {lanes}: not a power of two <= {WG}"),
            ));
        }
        let (wg, lpr) = if lanes == 0 {
            (REF_WG, REF_WG)
        } else {
            (WG, lanes)
        };
        let per_wg = (wg / lpr) as u64;
        if s.n == 0 || s.top_k == 0 || s.top_k > s.n_experts || s.hidden == 0 || s.ff == 0 {
            return Err(shape_err(k, format!("bad shape {s:?}")));
        }
        let (n, kk, h, f) = (s.n as u64, s.top_k as u64, s.hidden as u64, s.ff as u64);
        let ef = s.n_experts * s.ff;
        need(
            k,
            "gate",
            &self.gate,
            matrix_bytes(k, "gate", s.gate, ef, s.hidden)?,
        )?;
        need(
            k,
            "up",
            &self.up,
            matrix_bytes(k, "up", s.up, ef, s.hidden)?,
        )?;
        let eh = s.n_experts * s.hidden;
        need(
            k,
            "down",
            &self.down,
            matrix_bytes(k, "down", s.down, eh, s.ff)?,
        )?;
        need(k, "x", &self.x, 4 * n * h)?;
        need(k, "ids", &self.ids, 4 * n * kk)?;
        need(k, "weights", &self.weights, 4 * n * kk)?;
        need(k, "act", &self.act, 4 * n * kk * f)?;
        need(k, "out", &self.out, 4 * n * h)?;
        to_u32(k, "n * top_k * ff", s.n * s.top_k * s.ff)?;
        let p = |stage: u32| -> Result<MoeQuantParams, Error> {
            Ok(MoeQuantParams {
                n: to_u32(k, "n", s.n)?,
                top_k: to_u32(k, "top_k", s.top_k)?,
                hidden: to_u32(k, "hidden", s.hidden)?,
                ff: to_u32(k, "ff", s.ff)?,
                n_experts: to_u32(k, "n_experts", s.n_experts)?,
                stage,
                pad: [0; 2],
            })
        };
        let ov = |dtype: WeightType| -> Overrides {
            format_overrides(dtype)
                .set("WG", wg as f64)
                .set("LPR", lpr as f64)
        };
        let bufs = |w: B, w2: B| vec![w, self.x, self.ids, self.weights, self.act, self.out, w2];
        let rows = grid_for(k, (n * kk * f).div_ceil(per_wg))?;
        let down = Dispatch::new(
            &MOE_DOWN_QUANT,
            ov(s.down),
            bufs(self.down, self.down),
            &p(0)?,
            grid_for(&MOE_DOWN_QUANT, (n * h).div_ceil(per_wg))?,
        );
        Ok(if lanes != 0 && s.gate == s.up {
            vec![
                Dispatch::new(k, ov(s.gate), bufs(self.gate, self.up), &p(2)?, rows),
                down,
            ]
        } else {
            vec![
                Dispatch::new(k, ov(s.gate), bufs(self.gate, self.gate), &p(0)?, rows),
                Dispatch::new(k, ov(s.up), bufs(self.up, self.up), &p(1)?, rows),
                down,
            ]
        })
    }
}
