//! The int8 matvec on activations quantized once per product (`quantize_act_q8`, then
//! `matvec_q8a.wgsl` with `XG`), and accumulating products that quantize their own output for
//! the norm product after them (`main_qout`), which then skips its quantize launch.

use ash::vk;
use vkllm_kernels::matvec_fused::{Epilogue, MatvecFused, MatvecImpl, MatvecOp, MatvecPart};
use vkllm_kernels::matvec_q8a::QuantOut;
use vkllm_kernels::quantize_act_q8::{ActNorm, ActQ8Layout, QuantizeActQ8};

use crate::buffer::BufSlice;
use crate::error::Result;
use crate::recorder::Recorder;
use crate::tensor::{Tensor, unfusable, whole_parts};

/// What the int8 scratch holds after a quantizing producer: one column of `cols` elements of
/// (buffer, byte offset) with the norm weights at (buffer, byte offset) and offset (f32 bits).
pub(crate) type Q8xKey = (vk::Buffer, u64, usize, vk::Buffer, u64, u32);

fn key(x: BufSlice<'_>, cols: usize, norm_w: BufSlice<'_>, offset: f32) -> Q8xKey {
    (
        x.buffer.raw(),
        x.offset,
        cols,
        norm_w.buffer.raw(),
        norm_w.offset,
        offset.to_bits(),
    )
}

impl Recorder {
    /// Whether [`Recorder::matvec_fused_with`] takes `matvec_q8a.wgsl` on activations
    /// quantized once per product (`quantize_act_q8`): the op's `q8a.xg` rule (the tuning's
    /// `q8a_xg`, or what the recording set), [`MatvecImpl::Int8`], two or more columns (or one
    /// that the rules' `xg_single` takes, or one column too long for the shared-memory launch's
    /// copy of x: rows past [`vkllm_kernels::matvec_q8a::MAX_ELEMS`], e.g. the down projection
    /// of a 17408-wide MLP, which otherwise fell to the float kernel), a device with integer
    /// dot products and subgroups of 4+ lanes, and [`vkllm_kernels::matvec_q8a::supported_xg`].
    pub fn q8a_xg_runs(&self, imp: MatvecImpl, op: &MatvecOp) -> bool {
        let dev = self.device();
        op.q8a.xg
            && imp == MatvecImpl::Int8
            && (op.n_cols > 1
                || op.q8a.xg_single.takes(op.norm.is_some(), op.cols)
                || op.n_cols * op.cols > vkllm_kernels::matvec_q8a::MAX_ELEMS)
            && dev.int8_dot()
            && dev.info().min_subgroup_size >= 4
            && vkllm_kernels::matvec_q8a::supported_xg(op)
    }

    /// The int8 path over quantized x: one `quantize_act_q8` of every column (with the norm's
    /// weights), then `matvec_q8a` launches of up to 16 columns each.
    pub(crate) fn matvec_q8a_xg(
        &mut self,
        w: &[&Tensor],
        x: BufSlice<'_>,
        y: BufSlice<'_>,
        norm_w: Option<BufSlice<'_>>,
        mut op: MatvecOp,
        y_offsets: &[usize],
    ) -> Result<()> {
        let gated = matches!(op.epilogue, Epilogue::Gated { .. });
        // (weights, parts) of each launch: a single weight's row parts one by one, else one
        // launch over every weight (each in one part).
        let launches: Vec<(Vec<BufSlice<'_>>, Vec<MatvecPart>)> = if w.len() == 1 && !gated {
            w[0].parts
                .iter()
                .map(|p| {
                    let part = MatvecPart {
                        rows: p.rows,
                        y_offset: y_offsets[0] + p.row_start,
                    };
                    (vec![p.buffer.all()], vec![part])
                })
                .collect()
        } else {
            if w.iter().any(|t| t.parts.len() != 1) {
                return Err(unfusable(w, "a weight is split in row parts"));
            }
            let parts = whole_parts(w, y_offsets);
            vec![(w.iter().map(|t| t.parts[0].buffer.all()).collect(), parts)]
        };
        let src = ActQ8Layout {
            cols: op.cols,
            n: op.n_cols,
        };
        let code_end = src.code_bytes().next_multiple_of(256);
        let buf = self.q8x_scratch(code_end + src.meta_bytes())?;
        let codes = buf.slice(0, src.code_bytes())?;
        let meta = buf.slice(code_end, src.meta_bytes())?;
        let norm = match (norm_w, op.norm) {
            (Some(nw), Some(np)) => Some(ActNorm {
                norm_w: nw,
                offset: np.offset,
            }),
            _ => None,
        };
        // Skipped where the scratch holds exactly this quantization: left by the quantize launch
        // of an earlier product of the same normed x (the rules' `xg_reuse`) or by the product
        // that wrote x (`xg_produce`); both off: every product quantizes, the reference.
        let want = match norm {
            Some(nm) if op.n_cols == 1 && (op.q8a.xg_reuse || op.q8a.xg_produce) => {
                Some(key(x, op.cols, nm.norm_w, nm.offset))
            }
            _ => None,
        };
        if want.is_none() || self.split.q8x_src != want {
            self.dispatch(
                QuantizeActQ8 {
                    x,
                    norm,
                    q: codes,
                    meta,
                }
                .dispatch(src)?,
            )?;
            self.split.q8x_src = want;
        }
        let n = op.n_cols;
        for (ws, parts) in launches {
            op.parts = parts;
            op.n_cols = n;
            let chunk = vkllm_kernels::matvec_q8a::xg_chunk(&op);
            for c0 in (0..n).step_by(chunk) {
                let mut o = op.clone();
                o.n_cols = chunk.min(n - c0);
                let d = MatvecFused {
                    w: ws.clone(),
                    x: codes,
                    y,
                    norm_w: Some(meta),
                }
                .dispatch_q8a_xg(&o, src, c0)?;
                self.dispatch(d)?;
            }
        }
        Ok(())
    }

    /// `y += W x` for one column through `main_qout` where the rules allow it: the int8
    /// launch ([`Recorder::q8a_runs`]) of one weight in one part that `main_qout` takes
    /// ([`vkllm_kernels::matvec_q8a::qout_fits`]), the rules' `xg` and `xg_produce`, and
    /// `xg_single` taking a norm product over `rows` elements (the one after it), leaving y
    /// quantized with the next norm's weights `next` (weights, offset) for that product.
    /// `Ok(false)`: nothing recorded.
    pub(crate) fn matvec_q8a_qout(
        &mut self,
        imp: MatvecImpl,
        w: &Tensor,
        x: BufSlice<'_>,
        y: BufSlice<'_>,
        op: &MatvecOp,
        next: (BufSlice<'_>, f32),
    ) -> Result<bool> {
        let r = op.q8a;
        // The rules first: with the option off (the default) nothing is cloned.
        if !(r.xg && r.xg_produce && r.xg_single.takes(true, w.rows) && w.parts.len() == 1) {
            return Ok(false);
        }
        let mut op = op.clone();
        op.parts = whole_parts(&[w], &[0]);
        if !(vkllm_kernels::matvec_q8a::qout_fits(&op) && self.q8a_runs(imp, &op)) {
            return Ok(false);
        }
        let l = ActQ8Layout { cols: w.rows, n: 1 };
        let code_end = l.code_bytes().next_multiple_of(256);
        let buf = self.q8x_scratch(code_end + l.meta_bytes())?;
        let ctl = self.q8x_ctl(QuantOut::<BufSlice<'_>>::ctl_bytes(w.rows))?;
        let q = QuantOut {
            norm_w: next.0,
            offset: next.1,
            codes: buf.slice(0, l.code_bytes())?,
            meta: buf.slice(code_end, l.meta_bytes())?,
            ctl: ctl.all(),
        };
        let m = MatvecFused {
            w: vec![w.parts[0].buffer.all()],
            x,
            y,
            norm_w: None,
        };
        self.dispatch(m.dispatch_q8a_qout(&op, q)?)?;
        self.split.q8x_src = Some(key(y, w.rows, next.0, next.1));
        Ok(true)
    }
}
