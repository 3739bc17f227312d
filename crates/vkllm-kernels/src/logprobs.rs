//! `shaders/logprobs.wgsl`: the chosen token's logprob and the top-n logprobs per row, into a
//! ring of per-step records (vkllm-cpu's `log_softmax` / `top_logprobs` on the GPU).

use crate::sources::LOGPROBS as SRC;
use crate::spec::{need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

/// Most top logprobs per token (the OpenAI API's limit).
pub const MAX_TOP: usize = 20;

pub static LOGPROBS: KernelSpec = KernelSpec {
    name: "logprobs",
    file: "logprobs.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("logits"), rd("chosen"), rd("want"), rd("ctl"), rw("out")],
    push_size: 16,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct LogprobsParams {
    pub v: u32,
    pub n_rows: u32,
    pub n_top: u32,
    pub stride: u32,
}

/// The batch a [`Logprobs`] dispatch covers.
#[derive(Clone, Copy, Debug)]
pub struct LogprobsShape {
    pub vocab: usize,
    pub rows: usize,
    /// Top entries reserved per record (<= [`MAX_TOP`]).
    pub n_top: usize,
    /// Records per row in `out` (ring steps).
    pub ring_steps: usize,
}

impl LogprobsShape {
    /// 32-bit words per record: chosen logprob, count, then (id, logprob) pairs.
    pub fn record_words(&self) -> usize {
        2 + 2 * self.n_top
    }
}

/// Record `ctl[0] * rows + r` of `out` = row `r`'s chosen logprob and its `want[r]` best tokens
/// (`want[r] == u32::MAX`: row skipped).
pub struct Logprobs<B> {
    pub logits: B,
    pub chosen: B,
    pub want: B,
    pub ctl: B,
    pub out: B,
}

impl<B: KernelBuffer> Logprobs<B> {
    pub fn dispatch(self, s: &LogprobsShape) -> Result<Dispatch<B>, Error> {
        let k = &LOGPROBS;
        if s.vocab == 0 || s.rows == 0 || s.ring_steps == 0 {
            return Err(shape_err(k, "empty vocabulary, rows or ring"));
        }
        if s.n_top > MAX_TOP {
            return Err(shape_err(k, format!("n_top {} > {MAX_TOP}", s.n_top)));
        }
        if s.rows > crate::spec::MAX_GROUPS_X as usize {
            return Err(shape_err(k, "too many rows"));
        }
        need(k, "logits", &self.logits, 4 * (s.vocab * s.rows) as u64)?;
        need(k, "chosen", &self.chosen, 4 * s.rows as u64)?;
        need(k, "want", &self.want, 4 * s.rows as u64)?;
        need(k, "ctl", &self.ctl, 4)?;
        let words = s.record_words() * s.rows * s.ring_steps;
        need(k, "out", &self.out, 4 * words as u64)?;
        let p = LogprobsParams {
            v: to_u32(k, "vocab", s.vocab)?,
            n_rows: to_u32(k, "rows", s.rows)?,
            n_top: s.n_top as u32,
            stride: s.record_words() as u32,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new(),
            vec![self.logits, self.chosen, self.want, self.ctl, self.out],
            &p,
            [s.rows as u32, 1, 1],
        ))
    }
}
