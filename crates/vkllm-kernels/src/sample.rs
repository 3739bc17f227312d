//! `shaders/sample.wgsl`: vkllm-cpu's sampler (penalties, bias, temperature, top-k, top-p,
//! min-p, Philox draw) on the GPU, bit for bit.

use crate::sources::SAMPLE as SRC;
use crate::spec::{need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

pub static SAMPLE: KernelSpec = KernelSpec {
    name: "sample",
    file: "sample.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[
        rd("logits"),
        rd("counts"),
        rd("bias"),
        rd("cfg"),
        rw("scratch"),
        rw("out"),
    ],
    push_size: 20,
    exact_fp: true,
};

/// The first pass of the split greedy argmax (see [`Sample::dispatch_split`]).
pub static SAMPLE_ARGMAX_PARTIAL: KernelSpec = KernelSpec {
    name: "sample_argmax_partial",
    file: "sample.wgsl",
    entry: "argmax_partial",
    source: SRC,
    bindings: &[
        rd("logits"),
        rd("counts"),
        rd("bias"),
        rd("cfg"),
        rw("scratch"),
        rd("out"),
    ],
    push_size: 20,
    exact_fp: true,
};

/// Workgroups per row of the split greedy argmax's first pass (at most).
pub const ARGMAX_PARTS: usize = 128;

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SamplePush {
    pub v: u32,
    pub p2: u32,
    pub n_rows: u32,
    pub max_bias: u32,
    /// Partial argmax pairs left in scratch by the first pass (0: one-pass greedy).
    pub n_part: u32,
}

/// One row's settings as the kernel reads them from the `cfg` buffer (80 bytes). A recorded
/// decode step advances `step_lo/step_hi` on the device between tokens.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SampleRow {
    pub n_bias: u32,
    pub use_counts: u32,
    pub greedy: u32,
    pub top_k: u32,
    pub top_p: f32,
    pub min_p: f32,
    pub rep: f32,
    pub inv_rep: f32,
    pub presence: f32,
    pub frequency: f32,
    pub inv_t: f32,
    pub seed_lo: u32,
    pub seed_hi: u32,
    pub seq_lo: u32,
    pub seq_hi: u32,
    pub step_lo: u32,
    pub step_hi: u32,
    /// 0: the row is skipped (an idle slot).
    pub live: u32,
    pub pad: [u32; 2],
}

/// The sampler settings of one row (the fields of `vkllm_cpu::SamplingParams` other than the
/// bias list, which is a device buffer of `(id: u32, bias: f32)` pairs).
#[derive(Clone, Copy, Debug)]
pub struct SampleSettings {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub repetition_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub seed: u64,
    pub seq_id: u64,
    pub step: u64,
    /// Entries of this row's bias list.
    pub n_bias: usize,
    /// Apply penalties from the counts buffer (`false`: the CPU's empty `token_counts`).
    pub use_counts: bool,
}

impl SampleSettings {
    /// The row as the kernel reads it. Reciprocals are computed here, in f32 on the host, as the
    /// specification says (never on the device). A NaN temperature is greedy.
    pub fn row(&self) -> SampleRow {
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let greedy = !(self.temperature > 0.0);
        SampleRow {
            n_bias: self.n_bias.min(u32::MAX as usize) as u32,
            use_counts: self.use_counts as u32,
            greedy: greedy as u32,
            top_k: self.top_k.min(u32::MAX as usize) as u32,
            top_p: self.top_p,
            min_p: self.min_p,
            rep: self.repetition_penalty,
            inv_rep: 1.0 / self.repetition_penalty,
            presence: self.presence_penalty,
            frequency: self.frequency_penalty,
            inv_t: if greedy { 1.0 } else { 1.0 / self.temperature },
            seed_lo: self.seed as u32,
            seed_hi: (self.seed >> 32) as u32,
            seq_lo: self.seq_id as u32,
            seq_hi: (self.seq_id >> 32) as u32,
            step_lo: self.step as u32,
            step_hi: (self.step >> 32) as u32,
            live: 1,
            pad: [0; 2],
        }
    }
}

/// The batch a [`Sample`] dispatch covers.
#[derive(Clone, Copy, Debug)]
pub struct SampleShape {
    pub vocab: usize,
    pub rows: usize,
    /// Bias entries reserved per row in the `bias` buffer.
    pub max_bias: usize,
    /// The `counts` buffer holds `[rows, vocab]` counts (rows may then set `use_counts`); when
    /// false no row may set it.
    pub counts: bool,
}

/// `out[r]` = the token the CPU sampler would choose for row `r`'s logits and settings.
pub struct Sample<B> {
    pub logits: B,
    /// One u32 count per token per row (any buffer when no row uses counts).
    pub counts: B,
    /// `max_bias` pairs of (id, bias bits) per row (any buffer when `max_bias` is 0).
    pub bias: B,
    /// One [`SampleRow`] per row.
    pub cfg: B,
    /// [`Sample::scratch_bytes`] bytes.
    pub scratch: B,
    pub out: B,
}

impl<B: KernelBuffer> Sample<B> {
    pub fn scratch_bytes(vocab: usize, rows: usize) -> u64 {
        16 * (vocab.max(1).next_power_of_two() * rows.max(1)) as u64
    }

    /// Greedy rows without penalties or bias split their argmax over many workgroups: a first
    /// dispatch (`argmax_partial`, grid parts x rows) leaves per-part maxima in scratch and the
    /// sampler reduces those. Same choices as [`Sample::dispatch`] (the one-workgroup reference),
    /// which reads all V logits of a row in one workgroup (~190 us for V = 151936 on an H200).
    pub fn dispatch_split(self, s: &SampleShape) -> Result<[Dispatch<B>; 2], Error> {
        let parts = s.vocab.div_ceil(1024).clamp(1, ARGMAX_PARTS);
        let mut main = Sample { ..self }.dispatch(s)?;
        let mut push: SamplePush = bytemuck::pod_read_unaligned(&main.push);
        push.n_part = parts as u32;
        main.push = bytemuck::bytes_of(&push).to_vec();
        let first = Dispatch::new(
            &SAMPLE_ARGMAX_PARTIAL,
            Overrides::new(),
            vec![
                self.logits,
                self.counts,
                self.bias,
                self.cfg,
                self.scratch,
                self.out,
            ],
            &push,
            [parts as u32, s.rows as u32, 1],
        );
        Ok([first, main])
    }

    pub fn dispatch(self, s: &SampleShape) -> Result<Dispatch<B>, Error> {
        let k = &SAMPLE;
        if s.vocab == 0 || s.rows == 0 {
            return Err(shape_err(k, "empty vocabulary or no rows"));
        }
        need(k, "logits", &self.logits, 4 * (s.vocab * s.rows) as u64)?;
        if s.counts {
            need(k, "counts", &self.counts, 4 * (s.vocab * s.rows) as u64)?;
        }
        need(k, "bias", &self.bias, 8 * (s.max_bias * s.rows) as u64)?;
        need(
            k,
            "cfg",
            &self.cfg,
            (std::mem::size_of::<SampleRow>() * s.rows) as u64,
        )?;
        need(
            k,
            "scratch",
            &self.scratch,
            Self::scratch_bytes(s.vocab, s.rows),
        )?;
        need(k, "out", &self.out, 4 * s.rows as u64)?;
        if s.rows > crate::spec::MAX_GROUPS_X as usize {
            return Err(shape_err(k, "too many rows"));
        }
        let p = SamplePush {
            v: to_u32(k, "vocab", s.vocab)?,
            p2: to_u32(k, "scratch", s.vocab.next_power_of_two())?,
            n_rows: to_u32(k, "rows", s.rows)?,
            max_bias: to_u32(k, "max_bias", s.max_bias)?,
            n_part: 0,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new(),
            vec![
                self.logits,
                self.counts,
                self.bias,
                self.cfg,
                self.scratch,
                self.out,
            ],
            &p,
            [s.rows as u32, 1, 1],
        ))
    }
}
