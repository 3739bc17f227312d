//! `shaders/gated_delta_rule.wgsl`: the gated delta rule (recurrent form, gates included), and
//! `shaders/gated_delta_rule_chunked.wgsl`: its chunked form for prefill.

use crate::sources::GATED_DELTA_RULE as SRC;
use crate::sources::GATED_DELTA_RULE_CHUNKED as SRC_CHUNKED;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 64;
/// Largest key head size (the shader's shared q/k arrays).
pub const MAX_K_DIM: usize = 256;

pub static GATED_DELTA_RULE: KernelSpec = KernelSpec {
    name: "gated_delta_rule",
    file: "gated_delta_rule.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[
        rd("qkv"),
        rd("a"),
        rd("b"),
        rd("a_log"),
        rd("dt_bias"),
        rw("state"),
        rw("out"),
        rd("pos"),
        rd("z"),
        rd("norm_w"),
    ],
    push_size: 48,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DeltaParams {
    pub n: u32,
    pub hk: u32,
    pub hv: u32,
    pub dk: u32,
    pub dv: u32,
    pub col_blocks: u32,
    pub tiled: u32,
    pub per_row: u32,
    pub slot: u32,
    pub capacity: u32,
    /// The fused output norm's epsilon (`main_wide` with NORM = 1), else 0.
    pub eps: f32,
    pub pad: u32,
}

/// Which sequences of a slot-major recurrent state (`[slots, per-slot state]`) a call
/// addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateRows {
    /// Every row is a token of the sequence in slot `slot`, in order.
    Sequence { slot: usize },
    /// Row `t` is one token of the sequence in slot `t`; a row whose `pos[t] >= capacity` is
    /// idle (state untouched, output row zero).
    PerRow { capacity: usize },
}

impl StateRows {
    /// The slots the state buffer must hold for `n` rows.
    pub fn slots_needed(self, n: usize) -> usize {
        match self {
            StateRows::Sequence { slot } => slot + 1,
            StateRows::PerRow { .. } => n,
        }
    }

    /// `(per_row, slot, capacity)` push-constant words.
    pub(crate) fn words(self, k: &'static KernelSpec) -> Result<(u32, u32, u32), Error> {
        Ok(match self {
            StateRows::Sequence { slot } => (0, to_u32(k, "slot", slot)?, 0),
            StateRows::PerRow { capacity } => (1, 0, to_u32(k, "capacity", capacity)?),
        })
    }
}

/// Head counts and sizes (as `vkllm_cpu::DeltaShape`) and the token count.
#[derive(Clone, Copy, Debug)]
pub struct DeltaShape {
    pub n: usize,
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
    /// Value heads in tiled order (key head `h % n_k_heads`), see `vkllm_cpu::DeltaShape`.
    pub tiled_v_heads: bool,
    pub rows: StateRows,
}

/// The push constants of the recurrent form over blocks of `cols` columns, and its workgroup
/// count.
fn delta_params(
    k: &'static KernelSpec,
    s: &DeltaShape,
    cols: usize,
) -> Result<(DeltaParams, usize), Error> {
    let col_blocks = s.v_dim.div_ceil(cols);
    let (per_row, slot, capacity) = s.rows.words(k)?;
    let p = DeltaParams {
        n: to_u32(k, "n", s.n)?,
        hk: to_u32(k, "n_k_heads", s.n_k_heads)?,
        hv: to_u32(k, "n_v_heads", s.n_v_heads)?,
        dk: to_u32(k, "k_dim", s.k_dim)?,
        dv: to_u32(k, "v_dim", s.v_dim)?,
        col_blocks: to_u32(k, "col_blocks", col_blocks)?,
        tiled: s.tiled_v_heads as u32,
        per_row,
        slot,
        capacity,
        eps: 0.0,
        pad: 0,
    };
    let groups = match s.rows {
        StateRows::Sequence { .. } => s.n_v_heads * col_blocks,
        StateRows::PerRow { .. } => s.n * s.n_v_heads * col_blocks,
    };
    Ok((p, groups))
}

/// `n` tokens of the gated delta rule: `qkv` rows `[q | k | v]`, gate inputs `a`, `b`, the
/// layer's `a_log` and `dt_bias`; `state` (`[slots, v_heads, k_dim, v_dim]`) updated in place,
/// `out` `[n, v_heads * v_dim]`; `pos` (`[n]` u32) marks idle rows in per-row mode.
pub struct GatedDeltaRule<B> {
    pub qkv: B,
    pub a: B,
    pub b: B,
    pub a_log: B,
    pub dt_bias: B,
    pub state: B,
    pub out: B,
    pub pos: B,
}

impl<B: KernelBuffer> GatedDeltaRule<B> {
    pub fn dispatch(self, s: &DeltaShape) -> Result<Dispatch<B>, Error> {
        let k = &GATED_DELTA_RULE;
        if s.n == 0
            || s.n_k_heads == 0
            || s.n_v_heads == 0
            || !s.n_v_heads.is_multiple_of(s.n_k_heads)
            || s.k_dim == 0
            || s.k_dim > MAX_K_DIM
            || s.v_dim == 0
        {
            return Err(shape_err(
                k,
                format!("{s:?}: need v heads a multiple of k heads, 0 < k_dim <= {MAX_K_DIM}"),
            ));
        }
        let width = 2 * s.n_k_heads * s.k_dim + s.n_v_heads * s.v_dim;
        let hv = s.n_v_heads as u64;
        need(k, "qkv", &self.qkv, 4 * (s.n * width) as u64)?;
        need(k, "a", &self.a, 4 * s.n as u64 * hv)?;
        need(k, "b", &self.b, 4 * s.n as u64 * hv)?;
        need(k, "a_log", &self.a_log, 4 * hv)?;
        need(k, "dt_bias", &self.dt_bias, 4 * hv)?;
        let slots = s.rows.slots_needed(s.n) as u64;
        need(
            k,
            "state",
            &self.state,
            4 * slots * hv * (s.k_dim * s.v_dim) as u64,
        )?;
        if matches!(s.rows, StateRows::PerRow { .. }) {
            need(k, "pos", &self.pos, 4 * s.n as u64)?;
        }
        need(
            k,
            "out",
            &self.out,
            4 * (s.n * s.n_v_heads * s.v_dim) as u64,
        )?;
        let (p, groups) = delta_params(k, s, WG as usize)?;
        Ok(Dispatch::new(
            k,
            Overrides::new().set("WG", WG as f64),
            vec![
                self.qkv,
                self.a,
                self.b,
                self.a_log,
                self.dt_bias,
                self.state,
                self.out,
                self.pos,
                // z and norm_w: read by the fused output norm only.
                self.a_log,
                self.a_log,
            ],
            &p,
            grid_for(k, groups as u64)?,
        ))
    }
}

pub static GATED_DELTA_RULE_WIDE: KernelSpec = KernelSpec {
    name: "gated_delta_rule_wide",
    entry: "main_wide",
    ..GATED_DELTA_RULE
};

/// Columns and row groups of [`GatedDeltaRule::dispatch_wide`]'s workgroups.
const WIDE_COLS: usize = 32;
const WIDE_ROW_GROUPS: usize = 8;

/// The register-resident entry points' workgroup shape (both shaders name it alike): column
/// `c` of row group `rg` holds rows `rg, rg + 8, ...` of its column.
fn wide_overrides(s: &DeltaShape) -> Overrides {
    Overrides::new()
        .set("CW", WIDE_COLS as f64)
        .set("RG", WIDE_ROW_GROUPS as f64)
        .set("RPT", s.k_dim.div_ceil(WIDE_ROW_GROUPS) as f64)
        .set("WGW", (WIDE_COLS * WIDE_ROW_GROUPS) as f64)
}

impl<B: KernelBuffer> GatedDeltaRule<B> {
    /// The recurrence with the state in registers (the shader's `main_wide`): workgroups of
    /// 256 invocations over 32 columns of a head's state, each invocation holding
    /// `ceil(k_dim / 8)` of its column's values from the first token to the last. Same
    /// shapes, rows and buffers as [`GatedDeltaRule::dispatch`].
    pub fn dispatch_wide(self, s: &DeltaShape) -> Result<Dispatch<B>, Error> {
        let k = &GATED_DELTA_RULE_WIDE;
        let mut d = self.dispatch(s)?;
        let (p, groups) = delta_params(k, s, WIDE_COLS)?;
        d.kernel = k;
        d.overrides = wide_overrides(s);
        d.push = bytemuck::bytes_of(&p).to_vec();
        d.groups = grid_for(k, groups as u64)?;
        Ok(d)
    }
}

/// The gated RMSNorm of a Gated DeltaNet layer's output (`vkllm_cpu::gated_rmsnorm`), fused into
/// [`GatedDeltaRule::dispatch_wide_norm`].
#[derive(Clone, Copy, Debug)]
pub struct DeltaNorm<B> {
    /// `[n, v_heads * v_dim]`.
    pub z: B,
    /// `[v_dim]`.
    pub weight: B,
    pub eps: f32,
}

/// Largest value head size [`GatedDeltaRule::dispatch_wide_norm`] takes (one workgroup per head
/// and row: 32 * ceil(v_dim / 32) columns x 8 row groups <= 1024 invocations).
pub const NORM_MAX_V_DIM: usize = 128;

impl<B: KernelBuffer> GatedDeltaRule<B> {
    /// [`GatedDeltaRule::dispatch_wide`] with each output row written through the layer's gated
    /// RMSNorm: `out = (weight * (o * r)) * silu(z)`, `r = 1 / sqrt(mean(o^2) + eps)` over each
    /// head's `v_dim` values (one launch instead of two). `v_dim <= NORM_MAX_V_DIM`.
    pub fn dispatch_wide_norm(
        self,
        s: &DeltaShape,
        norm: DeltaNorm<B>,
    ) -> Result<Dispatch<B>, Error> {
        let k = &GATED_DELTA_RULE_WIDE;
        if s.v_dim > NORM_MAX_V_DIM {
            return Err(shape_err(
                k,
                format!("fused norm: v_dim {} > {NORM_MAX_V_DIM}", s.v_dim),
            ));
        }
        need(k, "z", &norm.z, 4 * (s.n * s.n_v_heads * s.v_dim) as u64)?;
        need(k, "norm_w", &norm.weight, 4 * s.v_dim as u64)?;
        let mut d = self.dispatch(s)?;
        let cols = s.v_dim.next_multiple_of(WIDE_COLS);
        let (mut p, groups) = delta_params(k, s, cols)?;
        p.eps = norm.eps;
        d.kernel = k;
        d.overrides = wide_overrides(s)
            .set("CW", cols as f64)
            .set("WGW", (cols * WIDE_ROW_GROUPS) as f64)
            .set("NORM", 1.0);
        d.buffers[8] = norm.z;
        d.buffers[9] = norm.weight;
        d.push = bytemuck::bytes_of(&p).to_vec();
        d.groups = grid_for(k, groups as u64)?;
        Ok(d)
    }
}

/// Largest key head size of the chunked form (its shared q/k tiles).
pub const CHUNKED_MAX_K_DIM: usize = 128;

pub static GATED_DELTA_RULE_CHUNKED: KernelSpec = KernelSpec {
    name: "gated_delta_rule_chunked",
    file: "gated_delta_rule_chunked.wgsl",
    entry: "main",
    source: SRC_CHUNKED,
    bindings: &[
        rd("qkv"),
        rd("a"),
        rd("b"),
        rd("a_log"),
        rd("dt_bias"),
        rw("state"),
        rw("out"),
    ],
    push_size: 32,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DeltaChunkedParams {
    pub n: u32,
    pub hk: u32,
    pub hv: u32,
    pub dk: u32,
    pub dv: u32,
    pub col_blocks: u32,
    pub tiled: u32,
    pub slot: u32,
}

impl<B: KernelBuffer> GatedDeltaRule<B> {
    /// The same computation in the chunked form (16 tokens at a time, see the shader's
    /// header): for the tokens of one sequence (`StateRows::Sequence`), `k_dim <=
    /// CHUNKED_MAX_K_DIM`. `pos` is not read.
    pub fn dispatch_chunked(self, s: &DeltaShape) -> Result<Dispatch<B>, Error> {
        let k = &GATED_DELTA_RULE_CHUNKED;
        if !matches!(s.rows, StateRows::Sequence { .. }) {
            return Err(shape_err(
                k,
                "the chunked form runs one sequence (Sequence rows)",
            ));
        }
        if s.k_dim > CHUNKED_MAX_K_DIM {
            return Err(shape_err(
                k,
                format!("k_dim {} > {CHUNKED_MAX_K_DIM}", s.k_dim),
            ));
        }
        // The shape and buffer checks of the recurrent form (same bindings, same sizes).
        let d = self.dispatch(s)?;
        let (p, groups) = chunked_params(k, s, WG as usize)?;
        let mut bufs = d.buffers;
        bufs.truncate(7);
        Ok(Dispatch::new(
            k,
            Overrides::new().set("WG", WG as f64),
            bufs,
            &p,
            grid_for(k, groups as u64)?,
        ))
    }

    /// The chunked form with the state in registers (the shader's `main_wide`): workgroups of
    /// 256 invocations over 32 columns of a head's state, each invocation holding
    /// `ceil(k_dim / 8)` of its column's values from the first chunk to the last. Same shapes,
    /// rows and buffers as [`GatedDeltaRule::dispatch_chunked`].
    pub fn dispatch_chunked_wide(self, s: &DeltaShape) -> Result<Dispatch<B>, Error> {
        let k = &GATED_DELTA_RULE_CHUNKED_WIDE;
        let mut d = self.dispatch_chunked(s)?;
        let (p, groups) = chunked_params(k, s, WIDE_COLS)?;
        d.kernel = k;
        d.overrides = wide_overrides(s);
        d.push = bytemuck::bytes_of(&p).to_vec();
        d.groups = grid_for(k, groups as u64)?;
        Ok(d)
    }
}

pub static GATED_DELTA_RULE_CHUNKED_WIDE: KernelSpec = KernelSpec {
    name: "gated_delta_rule_chunked_wide",
    entry: "main_wide",
    ..GATED_DELTA_RULE_CHUNKED
};

/// The chunked form's push constants over blocks of `cols` columns, and its workgroup count
/// (`s.rows` is `Sequence`: checked by `dispatch_chunked`).
fn chunked_params(
    k: &'static KernelSpec,
    s: &DeltaShape,
    cols: usize,
) -> Result<(DeltaChunkedParams, usize), Error> {
    let (d, groups) = delta_params(k, s, cols)?;
    let p = DeltaChunkedParams {
        n: d.n,
        hk: d.hk,
        hv: d.hv,
        dk: d.dk,
        dv: d.dv,
        col_blocks: d.col_blocks,
        tiled: d.tiled,
        slot: d.slot,
    };
    Ok((p, groups))
}
