//! `shaders/quantize_act_q8.wgsl`: activation columns quantized to int8 per 32 elements, once
//! per product, for the multi-column int8 matvec (`matvec_q8a.wgsl` reading x from global
//! memory: [`crate::matvec_fused::MatvecFused::dispatch_q8a_xg`]). The codes, scales and code
//! sums are vkllm-cpu's `quantize_act_q8` of `x` (or `x * (offset + norm_w)` with a norm
//! prologue, whose inv_rms the consumer applies from the per-chunk sums of squares written
//! beside them).

use crate::sources::QUANTIZE_ACT_Q8 as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

pub static QUANTIZE_ACT_Q8: KernelSpec = KernelSpec {
    name: "quantize_act_q8",
    file: "quantize_act_q8.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("x"), rd("norm_w"), rw("q"), rw("meta")],
    push_size: 8,
    exact_fp: false,
    glsl: None,
};

/// Units (32 elements) per workgroup, and per sum-of-squares chunk.
pub const UNITS_PER_CHUNK: usize = 32;

/// Where the quantized activations of `n` columns of `cols` elements live (see the shader's
/// header): codes `[n, cols]` int8, then per column the unit scales and sums and the chunks'
/// sums of squares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActQ8Layout {
    pub cols: usize,
    pub n: usize,
}

impl ActQ8Layout {
    /// Units per column.
    pub fn units(&self) -> usize {
        self.cols / 32
    }
    /// Sum-of-squares chunks per column.
    pub fn chunks(&self) -> usize {
        self.units().div_ceil(UNITS_PER_CHUNK)
    }
    /// Bytes of the codes.
    pub fn code_bytes(&self) -> u64 {
        (self.n * self.cols) as u64
    }
    /// Bytes of the scales, sums and chunk sums.
    pub fn meta_bytes(&self) -> u64 {
        4 * (self.n * (2 * self.units() + self.chunks())) as u64
    }
}

/// Norm prologue of the quantization: `v = x * (offset + norm_w)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActNorm<B> {
    pub norm_w: B,
    pub offset: f32,
}

/// `q`, `meta` = the quantization of `x` (`[n, cols]` f32).
pub struct QuantizeActQ8<B> {
    pub x: B,
    pub norm: Option<ActNorm<B>>,
    pub q: B,
    pub meta: B,
}

impl<B: KernelBuffer> QuantizeActQ8<B> {
    pub fn dispatch(self, l: ActQ8Layout) -> Result<Dispatch<B>, Error> {
        let k = &QUANTIZE_ACT_Q8;
        if l.cols == 0 || !l.cols.is_multiple_of(32) || l.n == 0 {
            return Err(shape_err(
                k,
                format!("{} columns of {} (a positive multiple of 32)", l.n, l.cols),
            ));
        }
        need(k, "x", &self.x, 4 * (l.n * l.cols) as u64)?;
        need(k, "q", &self.q, l.code_bytes())?;
        need(k, "meta", &self.meta, l.meta_bytes())?;
        if let Some(nm) = &self.norm {
            need(k, "norm_w", &nm.norm_w, 4 * l.cols as u64)?;
        }
        let [gx, gy, _] = grid_for(k, l.chunks() as u64)?;
        if gy != 1 {
            return Err(shape_err(k, format!("{} columns is too long", l.cols)));
        }
        let n = to_u32(k, "n", l.n)?;
        let cols = to_u32(k, "cols", l.cols)?;
        let offset = self.norm.as_ref().map_or(0.0, |nm| nm.offset);
        let params = [cols, offset.to_bits()];
        let (nw, norm) = match self.norm {
            Some(nm) => (nm.norm_w, 1.0),
            None => (self.x, 0.0),
        };
        Ok(Dispatch::new(
            k,
            Overrides::new().set("NORM", norm),
            vec![self.x, nw, self.q, self.meta],
            &params,
            [gx, n, 1],
        ))
    }
}
