//! `shaders/causal_conv1d.wgsl`: depthwise causal convolution with SiLU and a rolling state.

pub use crate::gated_delta_rule::StateRows;
use crate::sources::CAUSAL_CONV1D as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 64;
/// Rows per invocation (the shader's TB; at least kernel - 1, so that only the first row block
/// reads the state).
const TB: usize = 16;

pub static CAUSAL_CONV1D: KernelSpec = KernelSpec {
    name: "causal_conv1d",
    file: "causal_conv1d.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("x"), rd("w"), rw("state"), rw("out"), rd("pos")],
    push_size: 32,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ConvParams {
    pub n: u32,
    pub channels: u32,
    pub kernel: u32,
    pub apply_silu: u32,
    pub per_row: u32,
    pub slot: u32,
    pub capacity: u32,
    pub pad: u32,
}

/// Shape of one convolution call.
#[derive(Clone, Copy, Debug)]
pub struct ConvShape {
    /// Tokens.
    pub n: usize,
    pub channels: usize,
    /// Taps (the state holds `kernel - 1` rows).
    pub kernel: usize,
    pub silu: bool,
    /// Which slots of the slot-major state (`[slots, kernel - 1, channels]`) the rows use.
    pub rows: StateRows,
}

/// `out = act(conv(state ++ x))`, `state` rolled forward (`out` must not alias `x`); `pos`
/// (`[n]` u32) marks idle rows in per-row mode.
pub struct CausalConv1d<B> {
    pub x: B,
    pub w: B,
    pub state: B,
    pub out: B,
    pub pos: B,
}

impl<B: KernelBuffer> CausalConv1d<B> {
    pub fn dispatch(self, s: &ConvShape) -> Result<Dispatch<B>, Error> {
        let k = &CAUSAL_CONV1D;
        if s.kernel == 0 || s.channels == 0 || s.n == 0 {
            return Err(shape_err(k, format!("empty shape {s:?}")));
        }
        let rows = 4 * (s.n * s.channels) as u64;
        need(k, "x", &self.x, rows)?;
        need(k, "out", &self.out, rows)?;
        need(k, "w", &self.w, 4 * (s.channels * s.kernel) as u64)?;
        need(
            k,
            "state",
            &self.state,
            4 * (s.rows.slots_needed(s.n) * (s.kernel - 1) * s.channels) as u64,
        )?;
        if matches!(s.rows, StateRows::PerRow { .. }) {
            need(k, "pos", &self.pos, 4 * s.n as u64)?;
        }
        let (per_row, slot, capacity) = s.rows.words(k)?;
        let tb = TB.max(s.kernel - 1);
        let p = ConvParams {
            n: to_u32(k, "n", s.n)?,
            channels: to_u32(k, "channels", s.channels)?,
            kernel: to_u32(k, "kernel", s.kernel)?,
            apply_silu: s.silu as u32,
            per_row,
            slot,
            capacity,
            pad: 0,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new().set("WG", WG as f64).set("TB", tb as f64),
            vec![self.x, self.w, self.state, self.out, self.pos],
            &p,
            grid_for(
                k,
                (s.channels as u64).div_ceil(WG as u64) * s.n.div_ceil(tb) as u64,
            )?,
        ))
    }
}
