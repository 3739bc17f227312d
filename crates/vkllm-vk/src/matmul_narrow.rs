//! Few-token products of quantized weights on `matmul_narrow` ([`Recorder::matmul_narrow`]):
//! batched decode steps (Q4_K and Q6_K from `coop_narrow_min` rows, other types past the int8
//! matvec's `decode_int8_max_n`) and short prompt chunks, up to `coop_narrow` tokens, where
//! `matmul_coop`'s 64-token tiles are mostly padding and its per-step loads keep too few weight
//! bytes in flight.

use vkllm_kernels::WeightType;
use vkllm_kernels::matmul_narrow::{MAX_N, MatmulNarrow, NarrowConfig, direct_q4k, supported};

use crate::buffer::BufSlice;
use crate::error::Result;
use crate::recorder::Recorder;
use crate::tensor::Tensor;

/// The launch [`crate::MatmulKernel::Auto`] takes for `rows` x `n` outputs over `cols` columns
/// of `dtype` weights on `dev`, or `None` where the kernel does not apply: cooperative matrices
/// off, `n` outside `2..=`[`crate::Tuning::coop_narrow`] (at most [`MAX_N`]), a weight type or
/// subgroup size the kernel does not take. Split-K from [`crate::Tuning::coop_narrow_split`], by
/// default enough workgroups for four per multiprocessor; X as f16 where
/// [`crate::Tuning::coop_x_f16`] (one conversion shared by the products of one source).
pub fn narrow_config(
    dev: &crate::Device,
    dtype: WeightType,
    rows: usize,
    n: usize,
    cols: usize,
) -> Option<NarrowConfig> {
    let t = dev.tuning();
    let sg = dev.info().subgroup_size;
    let on = dev.coopmat()
        && (2..=(t.coop_narrow as usize).min(MAX_N)).contains(&n)
        && supported(dtype, cols, sg);
    if !on {
        return None;
    }
    let cu = dev.info().compute_units.unwrap_or(64);
    let split = t
        .coop_narrow_split
        .unwrap_or_else(|| NarrowConfig::auto_split(rows, cols, cu, 4));
    Some(NarrowConfig {
        split,
        x_f16: t.coop_x_f16 && cols.is_multiple_of(8),
        q6k_direct: t.coop_narrow_q6k,
    })
}

/// Whether a decode product of `n` tokens of `dtype` weights with rows of `cols` takes
/// `matmul_narrow` ahead of the int8 matvec on `dev` from `coop_narrow_min` tokens: Q4_K read
/// straight into registers, and Q6_K, whose int8 decoding costs the matvec more than the
/// staged decoding costs this kernel (other types stay on the int8 matvec up to
/// `decode_int8_max_n`: docs/benchmarks.md, "Few-token products").
pub(crate) fn decode_applies(
    dev: &crate::Device,
    dtype: WeightType,
    n: usize,
    cols: usize,
) -> bool {
    let kind = match dtype {
        WeightType::Q4_K => direct_q4k(dtype, dev.info().subgroup_size),
        WeightType::Q6_K => true,
        _ => false,
    };
    // (The row count only sets the split: any will do here.)
    kind && narrow_config(dev, dtype, 1, n, cols).is_some()
}

impl Recorder {
    /// `Y[n, rows] (+)= X[n, cols] W^T` over every part of `w` on `matmul_narrow` with `cfg`
    /// (see [`narrow_config`]); an error where the kernel does not take the shape.
    pub fn matmul_narrow(
        &mut self,
        w: &Tensor,
        x: BufSlice<'_>,
        n: usize,
        y: BufSlice<'_>,
        accumulate: bool,
        cfg: NarrowConfig,
    ) -> Result<()> {
        let sg = self.device().info().subgroup_size;
        let half = cfg.x_f16.then(|| self.half_x(x, n * w.cols)).transpose()?;
        let x = half.as_ref().map_or(x, |h| h.all());
        for p in &w.parts {
            let shape = w.shape(p, accumulate);
            let (pb, cb) = cfg.scratch_bytes(p.rows, n);
            // (The kernel binds the counters even unsplit: at least one word.)
            let (buf, ctr) = self.split_slot(pb, cb.max(4))?;
            let scratch = crate::coop_split::scratch_slices(&buf, ctr)?;
            let d = MatmulNarrow {
                w: p.buffer.all(),
                x,
                y,
            }
            .dispatch(&shape, n, w.rows, sg, &cfg, scratch)?;
            self.dispatch(d)?;
        }
        Ok(())
    }
}
