//! Prefill products on workgroup-scope cooperative matrices (`matmul_cm2.comp`,
//! VK_NV_cooperative_matrix2): f16 weights, or quantized ones through their f16 copy
//! (coop_dequant.rs; Q4_K decoded in the kernel's loads unless tuning `cm2_matmul_decode` is
//! off), times X converted once to f16. Taken by [`MatmulKernel::Auto`] where the
//! tuning's `cm2_matmul` is on and the device runs the cm2 kernels; `MatmulKernel::Cm2` asks
//! for it by name.

use vkllm_kernels::WeightType;
use vkllm_kernels::activation::Activation;
use vkllm_kernels::dequant_f16::f16_bytes;
use vkllm_kernels::matmul_cm2::{Cm2Segment, CmTile, MAX_SEGMENTS, MatmulCm2, MatmulCm2Group};

use crate::buffer::BufSlice;
use crate::error::{Error, Result};
use crate::recorder::Recorder;
use crate::tensor::{COOP_MIN_GROUPS, COOP_MIN_N, MatmulKernel, Tensor, TensorPart};

impl Recorder {
    /// The tile a product of `w` (`rows` of it in this launch) over `n` tokens takes on the cm2
    /// kernel, if it takes it: `kernel` [`MatmulKernel::Cm2`] (its tile), or
    /// [`MatmulKernel::Auto`] with tuning `cm2_matmul` on and at least its `cm2_matmul_min_n`
    /// tokens (tuning `cm2_matmul_tile`, or `cm2_matmul_glu_tile` when `gated`, else
    /// [`CmTile::for_shape`]; tuning `cm2_matmul_tokens_first` its grid order); either way a
    /// device that runs the cm2 kernels, at least [`COOP_MIN_N`] tokens, `cols % 8 == 0` (X's
    /// f16 copy), and f16 weights or a quantized weight taking its f16 copy.
    pub(crate) fn cm2_tile(
        &self,
        w: &Tensor,
        rows: usize,
        n: usize,
        gated: bool,
        kernel: MatmulKernel,
    ) -> Option<CmTile> {
        let dev = self.device();
        let t = dev.tuning();
        let by_name = match kernel {
            MatmulKernel::Cm2(tile) => Some(tile),
            MatmulKernel::Auto if t.cm2_matmul && n >= t.cm2_matmul_min_n => None,
            _ => return None,
        };
        let weight_ok = self.cm2_reads(w.dtype)
            || (dev.coopmat() && self.dequant_applies(w, w.rows * w.cols, n));
        if !dev.coopmat2() || n < COOP_MIN_N || !w.cols.is_multiple_of(8) || !weight_ok {
            return None;
        }
        let tuned = match gated {
            true => t.cm2_matmul_glu_tile,
            false => t.cm2_matmul_tile,
        };
        // A tuned tile off the device's granularities keeps the kernel's own.
        let tuned = tuned.filter(|x| dev.info().cm2_matmul_fits(x));
        let tile = by_name.unwrap_or_else(|| {
            tuned
                .unwrap_or_else(|| CmTile::for_shape(rows, n, COOP_MIN_GROUPS))
                .with_tokens_first(t.cm2_matmul_tokens_first)
        });
        (tile.fits(gated) && dev.info().cm2_matmul_fits(&tile)).then_some(tile)
    }

    /// Whether the cm2 kernel reads `dtype` weights as stored (f16; Q4_K unless tuning
    /// `cm2_matmul_decode` is off), not through an f16 copy.
    fn cm2_reads(&self, dtype: WeightType) -> bool {
        dtype == WeightType::F16
            || (self.device().tuning().cm2_matmul_decode && vkllm_kernels::matmul_cm2::reads(dtype))
    }

    /// The launch shape of part `p` of `w` and, where the kernel does not read `w` as stored,
    /// its f16 copy (recorded here; the shape then says f16).
    fn cm2_weight(
        &mut self,
        w: &Tensor,
        p: &TensorPart,
        accumulate: bool,
    ) -> Result<(vkllm_kernels::matvec::MatShape, Option<crate::Buffer>)> {
        let mut shape = w.shape(p, accumulate);
        if self.cm2_reads(w.dtype) {
            return Ok((shape, None));
        }
        shape.dtype = WeightType::F16;
        Ok((shape, Some(self.f16_weight(w)?)))
    }

    /// One part of [`Recorder::matmul_with`] on the cm2 kernel with tile `tile`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn matmul_cm2_part(
        &mut self,
        w: &Tensor,
        p: &TensorPart,
        x: BufSlice<'_>,
        n: usize,
        y: BufSlice<'_>,
        accumulate: bool,
        tile: CmTile,
    ) -> Result<()> {
        let (shape, copy) = self.cm2_weight(w, p, accumulate)?;
        let wbuf = weight_buf(w, p, &copy)?;
        let half = self.half_x(x, n * w.cols)?;
        let d = MatmulCm2 {
            w: wbuf,
            x: half.all(),
            y,
            w1: None,
        }
        .dispatch(&shape, n, w.rows, tile, None)?;
        self.dispatch(d)
    }

    /// The gated product `out[t, r] = act(x gate^T) * (x up^T)` as one cm2 launch, if the cm2
    /// kernel takes it (`Recorder::cm2_tile`; gate and up of one shape and type, one part
    /// each): `Ok(false)` with nothing recorded otherwise. [`Recorder::matmul_glu`] takes it
    /// first.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_glu_cm2(
        &mut self,
        gate: &Tensor,
        up: &Tensor,
        x: BufSlice<'_>,
        n: usize,
        out: BufSlice<'_>,
        act: Activation,
        kernel: MatmulKernel,
    ) -> Result<bool> {
        let same = gate.rows == up.rows && gate.cols == up.cols && gate.dtype == up.dtype;
        if !same || gate.parts.len() != 1 || up.parts.len() != 1 {
            return Ok(false);
        }
        let Some(tile) = self.cm2_tile(gate, gate.rows, n, true, kernel) else {
            return Ok(false);
        };
        let (rows, cols) = (gate.rows, gate.cols);
        let bytes = f16_bytes(rows, cols);
        let (shape, gc) = self.cm2_weight(gate, &gate.parts[0], false)?;
        let (_, uc) = self.cm2_weight(up, &up.parts[0], false)?;
        let (g, u) = match (&gc, &uc) {
            (Some(g), Some(u)) => (g.slice(0, bytes)?, u.slice(0, bytes)?),
            _ => (gate.parts[0].buffer.all(), up.parts[0].buffer.all()),
        };
        let half = self.half_x(x, n * cols)?;
        let d = MatmulCm2 {
            w: g,
            x: half.all(),
            y: out,
            w1: Some(u),
        }
        .dispatch(&shape, n, rows, tile, Some(act))?;
        self.dispatch(d)?;
        Ok(true)
    }

    /// The products `ys[i] = x ws[i]^T` of [`Recorder::matmul_group`] as one
    /// `matmul_cm2_group` launch, where asked (`kernel` [`MatmulKernel::Cm2`], or
    /// [`MatmulKernel::Auto`] with tuning `cm2_matmul_group` on) and it applies: 2 or 3 weights
    /// of one width, one part each, each taken by the cm2 kernel as f16 (f16 weights or their f16
    /// copies, not Q4_K decoded in the loads), no accumulate. `Ok(false)` with nothing recorded
    /// otherwise. The tile is the one [`Recorder::cm2_tile`] picks for the summed rows.
    pub(crate) fn matmul_group_cm2(
        &mut self,
        ws: &[&Tensor],
        x: BufSlice<'_>,
        n: usize,
        ys: &[BufSlice<'_>],
        accumulate: bool,
        kernel: MatmulKernel,
    ) -> Result<bool> {
        let asked = match kernel {
            MatmulKernel::Cm2(_) => true,
            MatmulKernel::Auto => self.device().tuning().cm2_matmul_group,
            _ => false,
        };
        if !asked || accumulate || !(2..=MAX_SEGMENTS).contains(&ws.len()) || ws.len() != ys.len() {
            return Ok(false);
        }
        let cols = ws[0].cols;
        let each = ws.iter().all(|w| {
            w.parts.len() == 1
                && w.cols == cols
                && (w.dtype == WeightType::F16 || !self.cm2_reads(w.dtype))
                && self.cm2_tile(w, w.rows, n, false, kernel).is_some()
        });
        let total = ws.iter().map(|w| w.rows).sum();
        let tile = match each {
            true => self.cm2_tile(ws[0], total, n, false, kernel),
            false => None,
        };
        let Some(tile) = tile else {
            return Ok(false);
        };
        let mut copies = Vec::with_capacity(ws.len());
        for w in ws {
            copies.push(self.cm2_weight(w, &w.parts[0], false)?.1);
        }
        let half = self.half_x(x, n * cols)?;
        let mut segments = Vec::with_capacity(ws.len());
        for ((w, copy), &y) in ws.iter().zip(&copies).zip(ys) {
            segments.push(Cm2Segment {
                w: weight_buf(w, &w.parts[0], copy)?,
                y,
                rows: w.rows,
            });
        }
        let d = MatmulCm2Group {
            x: half.all(),
            segments,
        }
        .dispatch(cols, n, tile)?;
        self.dispatch(d)?;
        Ok(true)
    }

    /// [`Recorder::matmul_with`] for [`MatmulKernel::Cm2`] where the kernel does not apply.
    pub(crate) fn cm2_missing(&self, w: &Tensor, n: usize) -> Error {
        Error::MissingFeature {
            device: self.device().info().name.clone(),
            feature: format!(
                "the cm2 matmul (VK_NV_cooperative_matrix2) for {} weights of {} columns over \
                 {n} tokens",
                w.dtype.name(),
                w.cols
            ),
        }
    }
}

/// The buffer a cm2 launch reads for part `p` of `w`: its f16 copy where
/// [`Recorder::cm2_weight`] made one, else the part as stored.
fn weight_buf<'a>(
    w: &Tensor,
    p: &'a TensorPart,
    copy: &'a Option<crate::Buffer>,
) -> Result<BufSlice<'a>> {
    match copy {
        Some(b) => Ok(b.slice(0, f16_bytes(w.rows, w.cols))?),
        None => Ok(p.buffer.all()),
    }
}
