//! Several products of one X in one `matmul_coop` launch ([`Recorder::matmul_group`]): q/k/v of
//! a prefill layer, whose small weights alone leave most of a large GPU idle. Weights whose own
//! grids fill the GPU gain nothing and stay apart (docs/benchmarks-history.md).

use vkllm_kernels::WeightType;
use vkllm_kernels::dequant_f16::f16_bytes;
use vkllm_kernels::matmul_coop::{CoopConfig, CoopSegment, MAX_SEGMENTS, MatmulCoopGroup};

use crate::buffer::BufSlice;
use crate::error::{Error, Result};
use crate::recorder::Recorder;
use crate::tensor::{COOP_MIN_GROUPS, COOP_MIN_N, MatmulKernel, Tensor};
use crate::tuning::{CoopGroup, Tuning};

/// Whether the graph step `step` (`"qkv"` or `"mlp"`) groups its products under `t`
/// ([`Tuning::coop_group`]; grouping q/k/v gains on small models, grouped gate + up lose since
/// the two products would otherwise overlap on the GPU, docs/benchmarks-history.md).
pub fn group_step(t: &Tuning, step: &str) -> bool {
    match t.coop_group {
        CoopGroup::Qkv => step == "qkv",
        CoopGroup::Mlp => step == "mlp",
        CoopGroup::All => true,
        CoopGroup::None => false,
    }
}

/// The launch of one grouped product of `rows` (each weight's rows) x `n` tokens over `cols`
/// columns of `dtype` weights with `kernel`, or `None` where the weights run apart: fewer than
/// 2 or more than [`MAX_SEGMENTS`] weights, no cooperative launch that groups (the portable
/// kernels, the original launch, fewer than [`COOP_MIN_N`] tokens), or under
/// [`MatmulKernel::Auto`] grouping off ([`CoopGroup::None`]) or every weight's own launch making
/// at least `2 COOP_MIN_GROUPS` workgroups (it fills the GPU already; see the module's
/// figures). The grouped launch is [`crate::coop_auto_config`]'s for the summed rows.
pub fn group_config(
    dev: &crate::Device,
    dtype: vkllm_kernels::WeightType,
    rows: &[usize],
    n: usize,
    cols: usize,
    kernel: MatmulKernel,
) -> Option<CoopConfig> {
    if !(2..=MAX_SEGMENTS).contains(&rows.len()) || !dev.coopmat() {
        return None;
    }
    let sg = dev.info().subgroup_size;
    let cfg = match kernel {
        MatmulKernel::CoopWith(c) => c,
        MatmulKernel::Auto if n >= COOP_MIN_N && dev.tuning().coop_group != CoopGroup::None => {
            let apart = rows.iter().map(|&r| {
                crate::coop_auto_config(dev.tuning(), dtype, r, n, cols, sg, COOP_MIN_GROUPS)
                    .map_or(0, |c| c.tile.groups(r, n))
            });
            if apart.clone().all(|g| g >= 2 * COOP_MIN_GROUPS) {
                return None;
            }
            let total = rows.iter().sum();
            crate::coop_auto_config(dev.tuning(), dtype, total, n, cols, sg, COOP_MIN_GROUPS)?
        }
        _ => return None,
    };
    (cfg != CoopConfig::plain(cfg.tile)).then_some(cfg)
}

impl Recorder {
    /// `ys[i][t, r] (+)= sum_c x[t, c] ws[i][r, c]` for `t < n`: [`Recorder::matmul`] of each
    /// weight, the weights of one type and width (each in one part) as one launch where
    /// [`group_config`] gives one, the others one product each.
    pub fn matmul_group(
        &mut self,
        ws: &[&Tensor],
        x: BufSlice<'_>,
        n: usize,
        ys: &[BufSlice<'_>],
        accumulate: bool,
    ) -> Result<()> {
        self.matmul_group_with(ws, x, n, ys, accumulate, MatmulKernel::Auto)
    }

    /// [`Recorder::matmul_group`] on a chosen kernel ([`MatmulKernel::CoopWith`] groups with
    /// that launch; [`MatmulKernel::Portable`] and [`MatmulKernel::Coop`] run apart).
    pub fn matmul_group_with(
        &mut self,
        ws: &[&Tensor],
        x: BufSlice<'_>,
        n: usize,
        ys: &[BufSlice<'_>],
        accumulate: bool,
        kernel: MatmulKernel,
    ) -> Result<()> {
        if ws.len() != ys.len() {
            return Err(Error::Shape(format!(
                "matmul_group: {} weights, {} outputs",
                ws.len(),
                ys.len()
            )));
        }
        // All of them on the cm2 kernel, whose f16 copies make stored types alike (q/k of Q4_K
        // with v of Q6_K); else weights of one type and width (each in one part) go together, in
        // order of their first.
        if self.matmul_group_cm2(ws, x, n, ys, accumulate, kernel)? {
            return Ok(());
        }
        let mut left: Vec<usize> = (0..ws.len()).collect();
        while let Some(&i) = left.first() {
            let (w0, one) = (ws[i], ws[i].parts.len() == 1);
            let (now, rest): (Vec<usize>, Vec<usize>) = left.iter().partition(|&&j| {
                j == i
                    || (one
                        && ws[j].dtype == w0.dtype
                        && ws[j].cols == w0.cols
                        && ws[j].parts.len() == 1)
            });
            left = rest;
            let gw: Vec<&Tensor> = now.iter().map(|&j| ws[j]).collect();
            let gy: Vec<BufSlice<'_>> = now.iter().map(|&j| ys[j]).collect();
            self.matmul_group_once(&gw, x, n, &gy, accumulate, kernel)?;
        }
        Ok(())
    }

    /// One grouped launch of weights of one type and width, or one product each.
    fn matmul_group_once(
        &mut self,
        ws: &[&Tensor],
        x: BufSlice<'_>,
        n: usize,
        ys: &[BufSlice<'_>],
        accumulate: bool,
        kernel: MatmulKernel,
    ) -> Result<()> {
        if self.matmul_group_cm2(ws, x, n, ys, accumulate, kernel)? {
            return Ok(());
        }
        let f = ws[0];
        let rows: Vec<usize> = ws.iter().map(|w| w.rows).collect();
        // Quantized weights multiplied as f16 copies (coop_dequant.rs) group as f16 weights.
        let elements = ws.iter().map(|w| w.rows * w.cols).min().unwrap_or(0);
        let copied = self.device().coopmat() && self.dequant_applies(f, elements, n);
        let dtype = match copied {
            true => WeightType::F16,
            false => f.dtype,
        };
        // Few-token products run apart on `matmul_narrow` (matmul_narrow.rs).
        let narrow = kernel == MatmulKernel::Auto
            && crate::matmul_narrow::narrow_config(self.device(), f.dtype, f.rows, n, f.cols)
                .is_some();
        // Products the cm2 kernel takes run apart on it unless grouped above (matmul_cm2.rs).
        let cm2 = self.cm2_tile(f, f.rows, n, false, kernel).is_some();
        let cfg = match f.parts.len() {
            1 if !narrow && !cm2 => group_config(self.device(), dtype, &rows, n, f.cols, kernel),
            _ => None,
        };
        let Some(c) = cfg else {
            for (w, &y) in ws.iter().zip(ys) {
                self.matmul_with(w, x, n, y, accumulate, kernel)?;
            }
            return Ok(());
        };
        let half = c.x_f16.then(|| self.half_x(x, n * f.cols)).transpose()?;
        let x = half.as_ref().map_or(x, |h| h.all());
        let copies = match copied {
            true => ws
                .iter()
                .map(|w| self.f16_weight(w))
                .collect::<Result<Vec<_>>>()?,
            false => Vec::new(),
        };
        let mut segments = Vec::with_capacity(ws.len());
        for (i, (w, &y)) in ws.iter().zip(ys).enumerate() {
            let mut shape = w.shape(&w.parts[0], accumulate);
            shape.dtype = dtype;
            let wbuf = match copies.get(i) {
                Some(b) => b.slice(0, f16_bytes(w.rows, w.cols))?,
                None => w.parts[0].buffer.all(),
            };
            segments.push(CoopSegment {
                w: wbuf,
                y,
                shape,
                y_stride: w.rows,
            });
        }
        let scratch = if c.split > 1 {
            let (pb, cb) = c.scratch_bytes_segments(&rows, n);
            let (buf, ctr) = self.split_slot(pb, cb)?;
            Some((buf, ctr))
        } else {
            None
        };
        let scratch = match &scratch {
            Some((buf, ctr)) => Some(crate::coop_split::scratch_slices(buf, *ctr)?),
            None => None,
        };
        let sg = self.device().info().subgroup_size;
        let d = MatmulCoopGroup {
            x,
            segments,
            glu: None,
        }
        .dispatch_with(n, sg, &c, scratch)?;
        self.dispatch(d)
    }
}
