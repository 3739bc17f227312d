//! The routed experts of a MoE block on int8 dot products: `matvec_q8a.wgsl` in its `MOE`
//! modes, two launches for `n` tokens (one workgroup row per token): gate and up with SiLU into
//! `act` (`[n, top_k, ff]`), the op's rows being the token's `top_k * ff` expert rows; then down,
//! whose x is the token's `top_k * ff` activations, each lane step reading the expert row of its
//! slot and weighing it by the slot's routing weight. The weights stay in their GGUF blocks
//! (stacked `[E * ff, hidden]` gate/up, `[E * hidden, ff]` down).
//!
//! Not exact, as [`crate::matvec_q8a`]: x and the activations are quantized to int8 per 32
//! elements; the oracle is vkllm-cpu's `moe_experts_q8act`.

use crate::matvec_fused::{Epilogue, GatedAct, MatvecFused, MatvecOp, MatvecPart, NormPrologue};
use crate::moe_experts_quant::MoeQuantShape;
use crate::spec::shape_err;
use crate::{Dispatch, Error, KernelBuffer, WeightType};

/// What a `MOE` launch of `matvec_q8a.wgsl` gathers: `stage` 1 (gate/up) or 2 (down) per
/// token, 3 (gate/up) or 4 (down) per expert over the grouped kernels' slot lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeGather {
    pub stage: u32,
    pub tokens: usize,
    pub top_k: usize,
    pub ff: usize,
    pub n_experts: usize,
}

impl MoeGather {
    /// Stage `stage` of the experts of `s`.
    pub fn of(s: &MoeQuantShape, stage: u32) -> Self {
        MoeGather {
            stage,
            tokens: s.n,
            top_k: s.top_k,
            ff: s.ff,
            n_experts: s.n_experts,
        }
    }
}

/// The gated gate/up product over `rows` output rows per column (SiLU), `n_cols` columns, x
/// normalized first by `norm`.
pub(crate) fn gate_up_op(
    s: &MoeQuantShape,
    rows: usize,
    n_cols: usize,
    norm: Option<NormPrologue>,
) -> MatvecOp {
    let part = MatvecPart { rows, y_offset: 0 };
    let mut gu = MatvecOp::plain(s.gate, rows, s.hidden);
    gu.parts = vec![part, part];
    gu.epilogue = Epilogue::Gated {
        act: GatedAct::Silu,
    };
    gu.n_cols = n_cols;
    gu.norm = norm;
    gu
}

/// Most tokens one launch takes (workgroup rows of the grid).
pub const MAX_TOKENS: usize = 65535;

/// Whether the int8 expert launches take `s`: gate and up of one format, every format one the
/// int8 kernel decodes, expert rows of whole blocks (`ff` of whole super-blocks for K-quants,
/// so a down lane step never straddles two experts), and one token's `top_k * ff` activations
/// within the kernel's shared copy.
pub fn supported(s: &MoeQuantShape) -> bool {
    let types = &crate::matvec_q8a::TYPES;
    let whole = |t: WeightType, cols: usize| {
        let b = match t {
            WeightType::Q4_K | WeightType::Q6_K => 256,
            _ => 32,
        };
        cols > 0 && cols.is_multiple_of(b)
    };
    s.gate == s.up
        && types.contains(&s.gate)
        && types.contains(&s.down)
        && whole(s.gate, s.hidden)
        && whole(s.down, s.ff)
        && s.top_k > 0
        && s.top_k <= s.n_experts
        && s.top_k * s.ff <= crate::matvec_q8a::MAX_ELEMS
        && s.hidden <= crate::matvec_q8a::MAX_ELEMS
        && (1..=MAX_TOKENS).contains(&s.n)
}

/// The buffers: x `[n, hidden]`, routing `ids` / `weights` `[n, top_k]` (each padded to a
/// multiple of 4 entries: the kernel reads them as 16-byte words), the stacked expert blocks,
/// `act` `[n, top_k, ff]` scratch and `out` `[n, hidden]`.
pub struct MoeExpertsQ8a<B> {
    pub x: B,
    pub ids: B,
    pub weights: B,
    pub gate: B,
    pub up: B,
    pub down: B,
    pub act: B,
    pub out: B,
}

/// Fusions of [`MoeExpertsQ8a::dispatch_fused`]: an RMSNorm of x before gate/up (its weights
/// `[hidden]` and parameters, as `matvec_fused`'s prologue), and down adding into `out`
/// (a residual add) instead of storing.
pub struct MoeFusions<B> {
    pub norm: Option<(B, NormPrologue)>,
    pub accumulate: bool,
}

impl<B: KernelBuffer> MoeExpertsQ8a<B> {
    /// The two launches (gate/up, then down).
    pub fn dispatch(self, s: &MoeQuantShape) -> Result<[Dispatch<B>; 2], Error> {
        self.dispatch_fused(
            s,
            MoeFusions {
                norm: None,
                accumulate: false,
            },
        )
    }

    /// [`MoeExpertsQ8a::dispatch`] with `f`'s fusions.
    pub fn dispatch_fused(
        self,
        s: &MoeQuantShape,
        f: MoeFusions<B>,
    ) -> Result<[Dispatch<B>; 2], Error> {
        let k = &crate::matvec_q8a::MATVEC_Q8A;
        if !supported(s) {
            return Err(shape_err(k, format!("not an int8 MoE launch: {s:?}")));
        }
        let rows = s.top_k * s.ff;
        let gather = |stage| MoeGather::of(s, stage);
        let gu = gate_up_op(s, rows, 1, f.norm.as_ref().map(|n| n.1));
        let gate_up = MatvecFused {
            w: vec![self.gate, self.up],
            x: self.x,
            y: self.act,
            norm_w: f.norm.map(|n| n.0),
        }
        .dispatch_q8a_moe(&gu, gather(1), self.ids, self.weights)?;
        let mut dn = MatvecOp::plain(s.down, s.hidden, rows);
        if f.accumulate {
            dn.epilogue = Epilogue::Accumulate;
        }
        let down = MatvecFused {
            w: vec![self.down],
            x: self.act,
            y: self.out,
            norm_w: None,
        }
        .dispatch_q8a_moe(&dn, gather(2), self.ids, self.weights)?;
        Ok([gate_up, down])
    }
}
