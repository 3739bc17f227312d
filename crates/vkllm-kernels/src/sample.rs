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
        rw("scratch"),
        rw("out"),
        rd("step"),
    ],
    push_size: 80,
    exact_fp: true,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SampleParams {
    pub v: u32,
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
    pub p2: u32,
    pub step_from_buffer: u32,
}

/// The sampler settings (the fields of `vkllm_cpu::SamplingParams` other than the bias list,
/// which is a device buffer of `(id: u32, bias: f32)` pairs).
#[derive(Clone, Copy, Debug)]
pub struct SampleSettings {
    pub vocab: usize,
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
    /// Entries in the bias buffer.
    pub n_bias: usize,
    /// Apply penalties from the counts buffer (`false`: the CPU's empty `token_counts`).
    pub use_counts: bool,
    /// Read the step from the `step` buffer (two u32 words, low first) instead of `step`, so a
    /// recorded sequence replays with a counter updated on the device or by the host.
    pub step_from_buffer: bool,
}

/// `out[0]` = the token the CPU sampler would choose.
pub struct Sample<B> {
    pub logits: B,
    /// One u32 count per token (any buffer when `use_counts` is false).
    pub counts: B,
    /// `n_bias` pairs of (id, bias bits) (any buffer when `n_bias` is 0).
    pub bias: B,
    /// [`Sample::scratch_bytes`] bytes.
    pub scratch: B,
    pub out: B,
    /// The step counter (8 bytes) when `step_from_buffer` is set (any buffer otherwise).
    pub step: B,
}

impl<B: KernelBuffer> Sample<B> {
    pub fn scratch_bytes(vocab: usize) -> u64 {
        16 * vocab.max(1).next_power_of_two() as u64
    }

    pub fn dispatch(self, s: &SampleSettings) -> Result<Dispatch<B>, Error> {
        let k = &SAMPLE;
        if s.vocab == 0 {
            return Err(shape_err(k, "empty vocabulary"));
        }
        need(k, "logits", &self.logits, 4 * s.vocab as u64)?;
        if s.use_counts {
            need(k, "counts", &self.counts, 4 * s.vocab as u64)?;
        }
        need(k, "bias", &self.bias, 8 * s.n_bias as u64)?;
        need(k, "scratch", &self.scratch, Self::scratch_bytes(s.vocab))?;
        need(k, "out", &self.out, 4)?;
        if s.step_from_buffer {
            need(k, "step", &self.step, 8)?;
        }
        // Host reciprocals, as the specification says (f32 division here, never on the device).
        // A NaN temperature is greedy, hence the negated comparison.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let greedy = !(s.temperature > 0.0);
        let p = SampleParams {
            v: to_u32(k, "vocab", s.vocab)?,
            n_bias: to_u32(k, "n_bias", s.n_bias)?,
            use_counts: s.use_counts as u32,
            greedy: greedy as u32,
            top_k: s.top_k.min(u32::MAX as usize) as u32,
            top_p: s.top_p,
            min_p: s.min_p,
            rep: s.repetition_penalty,
            inv_rep: 1.0 / s.repetition_penalty,
            presence: s.presence_penalty,
            frequency: s.frequency_penalty,
            inv_t: if greedy { 1.0 } else { 1.0 / s.temperature },
            seed_lo: s.seed as u32,
            seed_hi: (s.seed >> 32) as u32,
            seq_lo: s.seq_id as u32,
            seq_hi: (s.seq_id >> 32) as u32,
            step_lo: s.step as u32,
            step_hi: (s.step >> 32) as u32,
            p2: to_u32(k, "scratch", s.vocab.next_power_of_two())?,
            step_from_buffer: s.step_from_buffer as u32,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new(),
            vec![
                self.logits,
                self.counts,
                self.bias,
                self.scratch,
                self.out,
                self.step,
            ],
            &p,
            [1, 1, 1],
        ))
    }
}
