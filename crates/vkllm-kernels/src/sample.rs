//! `shaders/sample.wgsl`: vkllm-cpu's sampler v2 (penalties, bias, temperature, top-k, top-p,
//! min-p, the Gumbel race) on the GPU, bit for bit, in four passes (prep, sieve, gather,
//! finish; the shader's header says what each does).

use crate::sources::SAMPLE as SRC;
use crate::spec::{BindingSpec, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, Indirect, KernelBuffer, KernelSpec, Overrides};

const BINDINGS: &[BindingSpec] = &[
    rd("logits"),
    rd("counts"),
    rd("bias"),
    rd("cfg"),
    rw("scratch"),
    rw("out"),
    rw("ctr"),
    rd("mask"),
];

const fn pass(name: &'static str, entry: &'static str) -> KernelSpec {
    KernelSpec {
        name,
        file: "sample.wgsl",
        entry,
        source: SRC,
        bindings: BINDINGS,
        push_size: 20,
        exact_fp: true,
        glsl: None,
    }
}

/// Pass 1: working logits, part maxima, the race of unfiltered rows.
pub static SAMPLE_PREP: KernelSpec = pass("sample_prep", "prep");
/// Pass 2: l0; the min-p race or the bucket histogram.
pub static SAMPLE_SIEVE: KernelSpec = pass("sample_sieve", "sieve");
/// Pass 3: the boundary bucket; the candidate list (and top-p's race before it).
pub static SAMPLE_GATHER: KernelSpec = pass("sample_gather", "gather");
/// Pass 4: sort the list, the filters, the race, the chosen token.
pub static SAMPLE_FINISH: KernelSpec = pass("sample_finish", "finish");

/// Top-k rows with k up to this are drawn by pass 1 alone (the shader's `KF`).
pub const PREP_TOP_K: usize = 128;
/// Parts per row at most (the shader's `NP`).
pub const MAX_PARTS: usize = 128;
/// Histogram buckets per row (the shader's `NB`).
const BUCKETS: usize = 1024;
/// Words before the first row's counters in `ctr` (the shader's `HEAD`): passes 2-4's launch
/// sizes.
const CTR_HEAD: usize = 16;
/// Vocabularies must be smaller than this (the shader's 12-bit weight halves sum in u32).
pub const MAX_VOCAB: usize = 1 << 20;

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SamplePush {
    pub v: u32,
    pub p2: u32,
    pub n_rows: u32,
    pub max_bias: u32,
    /// Parts each row is split into by passes 1-3.
    pub parts: u32,
}

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
    /// 1: the row's words of the `mask` buffer say which tokens may be drawn.
    pub masked: u32,
    pub pad: u32,
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
    /// Ban the tokens whose bit is clear in the row's words of `mask` (structured outputs).
    pub masked: bool,
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
            masked: self.masked as u32,
            pad: 0,
        }
    }
}

impl SampleRow {
    /// Whether pass 1 alone draws this row's token (the shader's `fast`): greedy rows,
    /// unfiltered rows, and top-k rows with k <= [`PREP_TOP_K`] (with or without top-p and
    /// min-p).
    // Negated comparisons: a NaN top-p or min-p is "off", as in the shader.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn prep_only(&self, vocab: usize) -> bool {
        let top_k_on = self.top_k > 0 && (self.top_k as usize) < vocab;
        self.greedy != 0
            || (top_k_on && self.top_k as usize <= PREP_TOP_K)
            || (!top_k_on && !(self.top_p < 1.0) && !(self.min_p > 0.0))
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
    /// The `mask` buffer holds [`SampleShape::mask_words`] words per row (rows may then set
    /// `masked`); when false no row may set it.
    pub mask: bool,
}

impl SampleShape {
    /// Mask words per row: one bit per token.
    pub fn mask_words(vocab: usize) -> usize {
        vocab.div_ceil(32)
    }
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
    /// [`Sample::ctr_bytes`] bytes: launch sizes, histograms, list lengths (pass 1 writes or
    /// clears them) and a counter per row that must be zero before the first dispatch (every
    /// dispatch leaves them zero): zero the buffer once when it is created.
    pub ctr: B,
    /// Allowed-token bits per row (any buffer when [`SampleShape::mask`] is false).
    pub mask: B,
}

impl<B: KernelBuffer> Sample<B> {
    pub fn scratch_bytes(vocab: usize, rows: usize) -> u64 {
        let v = vocab.max(1);
        4 * ((3 * v + 4 * MAX_PARTS + 2 * v.next_power_of_two()) * rows.max(1)) as u64
    }

    pub fn ctr_bytes(rows: usize) -> u64 {
        4 * (CTR_HEAD + (3 * BUCKETS + 4) * rows.max(1)) as u64
    }

    /// The words of `ctr` holding row `row`'s persistent counter (prep's arrival count: zero
    /// before the first dispatch, left zero by each).
    pub fn ctr_counter_words(row: usize) -> std::ops::Range<usize> {
        let at = CTR_HEAD + (3 * BUCKETS + 4) * row + 3 * BUCKETS + 1;
        at..at + 1
    }

    /// The parts per row the automatic launch uses: one per 1024 tokens, at most [`MAX_PARTS`].
    pub fn auto_parts(vocab: usize) -> usize {
        vocab.div_ceil(1024).clamp(1, MAX_PARTS)
    }

    /// The four passes with [`Sample::auto_parts`] parts per row.
    pub fn dispatch(self, s: &SampleShape) -> Result<[Dispatch<B>; 4], Error> {
        let parts = Self::auto_parts(s.vocab);
        self.dispatch_parts(s, parts)
    }

    /// Pass 1 alone ([`Sample::auto_parts`] parts per row): enough when every live row is
    /// [`SampleRow::prep_only`]; any other live row gets no token.
    pub fn dispatch_prep(self, s: &SampleShape) -> Result<Dispatch<B>, Error> {
        let [prep, ..] = self.dispatch(s)?;
        Ok(prep)
    }

    /// The four passes with `parts` parts per row (`1..=MAX_PARTS`; every count gives the same
    /// tokens, 1 is the simplest launch). Passes 2-4 are indirect launches sized by pass 1: they
    /// launch nothing when every live row is greedy, unfiltered or top-k with k <= 128.
    pub fn dispatch_parts(self, s: &SampleShape, parts: usize) -> Result<[Dispatch<B>; 4], Error> {
        let k = &SAMPLE_PREP;
        if s.vocab == 0 || s.rows == 0 {
            return Err(shape_err(k, "empty vocabulary or no rows"));
        }
        if s.vocab >= MAX_VOCAB {
            return Err(shape_err(k, "vocabulary of 2^20 tokens or more"));
        }
        if !(1..=MAX_PARTS).contains(&parts) {
            return Err(shape_err(k, "parts outside 1..=128"));
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
        need(k, "ctr", &self.ctr, Self::ctr_bytes(s.rows))?;
        if s.mask {
            need(
                k,
                "mask",
                &self.mask,
                4 * (SampleShape::mask_words(s.vocab) * s.rows) as u64,
            )?;
        }
        if s.rows > crate::spec::MAX_GROUPS_X as usize {
            return Err(shape_err(k, "too many rows"));
        }
        let p = SamplePush {
            v: to_u32(k, "vocab", s.vocab)?,
            p2: to_u32(k, "scratch", s.vocab.next_power_of_two())?,
            n_rows: to_u32(k, "rows", s.rows)?,
            max_bias: to_u32(k, "max_bias", s.max_bias)?,
            parts: parts as u32,
        };
        let bufs = vec![
            self.logits,
            self.counts,
            self.bias,
            self.cfg,
            self.scratch,
            self.out,
            self.ctr,
            self.mask,
        ];
        let rows = s.rows as u32;
        let d = |k: &'static KernelSpec, grid: [u32; 3]| {
            Dispatch::new(k, Overrides::new(), bufs.clone(), &p, grid)
        };
        let at = |pass: u64| Indirect {
            binding: 6,
            offset: 12 * pass,
        };
        Ok([
            d(&SAMPLE_PREP, [parts as u32, rows, 1]),
            d(&SAMPLE_SIEVE, [parts as u32, rows, 1]).indirect(at(0)),
            d(&SAMPLE_GATHER, [parts as u32, rows, 1]).indirect(at(1)),
            d(&SAMPLE_FINISH, [rows, 1, 1]).indirect(at(2)),
        ])
    }
}
