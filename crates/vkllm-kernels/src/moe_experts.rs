//! `shaders/moe_experts.wgsl`: the selected experts' gate/up projections with SiLU, then their
//! down projections summed with the routing weights. Two dispatches for every token and every
//! selected expert; only the selected experts' rows are read (expert ids come from the device).

use crate::sources::MOE_EXPERTS as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 64;

const BINDINGS: &[crate::BindingSpec] = &[
    rd("x"),
    rd("ids"),
    rd("weights"),
    rd("gate"),
    rd("up"),
    rd("down"),
    rw("act"),
    rw("out"),
];

pub static MOE_GATE_UP: KernelSpec = KernelSpec {
    name: "moe_gate_up",
    file: "moe_experts.wgsl",
    entry: "gate_up",
    source: SRC,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};
pub static MOE_DOWN: KernelSpec = KernelSpec {
    name: "moe_down",
    file: "moe_experts.wgsl",
    entry: "down_sum",
    source: SRC,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MoeParams {
    pub n: u32,
    pub top_k: u32,
    pub hidden: u32,
    pub ff: u32,
    pub n_experts: u32,
    pub pad: [u32; 3],
}

/// Sizes of one MoE expert pass.
#[derive(Clone, Copy, Debug)]
pub struct MoeShape {
    pub n: usize,
    pub top_k: usize,
    pub hidden: usize,
    pub ff: usize,
    pub n_experts: usize,
}

/// The expert computation (f32 weights): [`MoeExperts::dispatch`] returns the two dispatches,
/// gate/up into `act` (`[n, top_k, ff]` scratch), then down into `out` (`[n, hidden]`).
pub struct MoeExperts<B> {
    pub x: B,
    pub ids: B,
    pub weights: B,
    pub gate: B,
    pub up: B,
    pub down: B,
    pub act: B,
    pub out: B,
}

impl<B: KernelBuffer> MoeExperts<B> {
    pub fn dispatch(self, s: &MoeShape) -> Result<[Dispatch<B>; 2], Error> {
        let k = &MOE_GATE_UP;
        if s.n == 0 || s.top_k == 0 || s.top_k > s.n_experts || s.hidden == 0 || s.ff == 0 {
            return Err(shape_err(k, format!("bad shape {s:?}")));
        }
        let (n, kk, h, f, e) = (
            s.n as u64,
            s.top_k as u64,
            s.hidden as u64,
            s.ff as u64,
            s.n_experts as u64,
        );
        need(k, "x", &self.x, 4 * n * h)?;
        need(k, "ids", &self.ids, 4 * n * kk)?;
        need(k, "weights", &self.weights, 4 * n * kk)?;
        need(k, "gate", &self.gate, 4 * e * f * h)?;
        need(k, "up", &self.up, 4 * e * f * h)?;
        need(k, "down", &self.down, 4 * e * h * f)?;
        need(k, "act", &self.act, 4 * n * kk * f)?;
        need(k, "out", &self.out, 4 * n * h)?;
        let p = MoeParams {
            n: to_u32(k, "n", s.n)?,
            top_k: to_u32(k, "top_k", s.top_k)?,
            hidden: to_u32(k, "hidden", s.hidden)?,
            ff: to_u32(k, "ff", s.ff)?,
            n_experts: to_u32(k, "n_experts", s.n_experts)?,
            pad: [0; 3],
        };
        to_u32(k, "n * top_k * ff", s.n * s.top_k * s.ff)?;
        let bufs = vec![
            self.x,
            self.ids,
            self.weights,
            self.gate,
            self.up,
            self.down,
            self.act,
            self.out,
        ];
        let ov = Overrides::new().set("WG", WG as f64);
        Ok([
            Dispatch::new(k, ov.clone(), bufs.clone(), &p, grid_for(k, n * kk * f)?),
            Dispatch::new(&MOE_DOWN, ov, bufs, &p, grid_for(&MOE_DOWN, n * h)?),
        ])
    }
}
