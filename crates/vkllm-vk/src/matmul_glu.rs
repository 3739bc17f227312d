//! The MLP's gated product in one `matmul_coop` launch ([`Recorder::matmul_glu`]):
//! `act(X gate^T) * (X up^T)` with gate and up rows interleaved in each workgroup, so the
//! products' f32 outputs never reach memory and no separate activation pass reads them back
//! (the reference path: two products and `silu_mul` / `gelu_tanh_mul`, tuning `coop_glu=0`).

use vkllm_kernels::WeightType;
use vkllm_kernels::activation::Activation;
use vkllm_kernels::dequant_f16::f16_bytes;
use vkllm_kernels::matmul_coop::{CoopConfig, CoopGlu, CoopSegment, MatmulCoopGroup};

use crate::buffer::BufSlice;
use crate::error::Result;
use crate::recorder::Recorder;
use crate::tensor::{COOP_MIN_GROUPS, COOP_MIN_N, Tensor};

/// The gated launch for `rows` gate (and up) rows x `n` tokens over `cols` columns of float
/// `dtype` weights: [`crate::coop_split::auto_config`]'s launch for the `2 rows` interleaved
/// rows, unsplit (the gated epilogue has no split-K) and without the direct epilogue.
pub fn glu_config(
    t: &crate::Tuning,
    dtype: WeightType,
    rows: usize,
    n: usize,
    cols: usize,
    subgroup_size: u32,
) -> Option<CoopConfig> {
    if dtype.is_quantized() || subgroup_size < 8 {
        return None;
    }
    let c = crate::coop_split::auto_config(
        t,
        dtype,
        2 * rows,
        n,
        cols,
        subgroup_size,
        COOP_MIN_GROUPS,
    )?;
    Some(CoopConfig {
        split: 1,
        direct: false,
        ..c
    })
}

impl Recorder {
    /// `out[t, r] = act(sum_c x[t, c] gate[r, c]) * sum_c x[t, c] up[r, c]` for `t < n`
    /// (`out` dense, `[n, gate.rows]`) in one gated `matmul_coop` launch. `Ok(false)`, with
    /// nothing recorded, where it does not apply: [`crate::Tuning::coop_glu`] off, no cooperative
    /// matrices, fewer than [`COOP_MIN_N`] tokens, gate and up of different shapes or types,
    /// split in parts, quantized weights without f16 copies (coop_dequant.rs), or no launch
    /// ([`glu_config`]). The caller then runs the two products and the activation.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_glu(
        &mut self,
        gate: &Tensor,
        up: &Tensor,
        x: BufSlice<'_>,
        n: usize,
        out: BufSlice<'_>,
        act: Activation,
    ) -> Result<bool> {
        let dev = self.device().clone();
        let same = gate.rows == up.rows && gate.cols == up.cols && gate.dtype == up.dtype;
        if !dev.tuning().coop_glu || !dev.coopmat() || n < COOP_MIN_N || !same {
            return Ok(false);
        }
        if gate.parts.len() != 1 || up.parts.len() != 1 {
            return Ok(false);
        }
        if self.matmul_glu_cm2(gate, up, x, n, out, act, crate::MatmulKernel::Auto)? {
            return Ok(true);
        }
        let (rows, cols) = (gate.rows, gate.cols);
        let copied = self.dequant_applies(gate, rows * cols, n);
        let dtype = match copied {
            true => WeightType::F16,
            false => gate.dtype,
        };
        let sg = dev.info().subgroup_size;
        let Some(c) = glu_config(dev.tuning(), dtype, rows, n, cols, sg) else {
            return Ok(false);
        };
        let half = c.x_f16.then(|| self.half_x(x, n * cols)).transpose()?;
        let x = half.as_ref().map_or(x, |h| h.all());
        let copies = match copied {
            true => vec![self.f16_weight(gate)?, self.f16_weight(up)?],
            false => Vec::new(),
        };
        let mut segments = Vec::with_capacity(2);
        for (i, w) in [gate, up].into_iter().enumerate() {
            let mut shape = w.shape(&w.parts[0], false);
            shape.dtype = dtype;
            let wbuf = match copies.get(i) {
                Some(b) => b.slice(0, f16_bytes(rows, cols))?,
                None => w.parts[0].buffer.all(),
            };
            // (Segment 1's output binding is not written by the gated epilogue.)
            segments.push(CoopSegment {
                w: wbuf,
                y: out,
                shape,
                y_stride: rows,
            });
        }
        // The output's f16 copy for the down projection (where it reads f16 X), in the f16
        // scratch that does not hold this launch's X.
        let slot = match &half {
            Some(h) if self.half_slot_is(1, h) => 0,
            _ => 1,
        };
        let copy = match rows.is_multiple_of(2)
            && dev.tuning().coop_glu_half
            && crate::coop_split::half_x_wanted(&dev, n, rows)
        {
            true => Some(self.half_copy_target_in(slot, n * rows)?),
            false => None,
        };
        let copy_bytes = vkllm_kernels::to_f16::packed_bytes(n * rows);
        let half_out = match &copy {
            Some(b) => Some(b.slice(0, copy_bytes)?),
            None => None,
        };
        let d = MatmulCoopGroup {
            x,
            segments,
            glu: Some(CoopGlu {
                act,
                half: half_out,
            }),
        }
        .dispatch_with(n, sg, &c, None)?;
        self.dispatch(d)?;
        if copy.is_some() {
            self.half_copy_written_in(slot, out, n * rows);
        }
        Ok(true)
    }
}
