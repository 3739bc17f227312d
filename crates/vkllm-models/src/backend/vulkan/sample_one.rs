//! One token drawn on the device from one row of logits ([`Backend::sample_token`]): the
//! sampling kernel's passes on a one-row configuration, only the token read back (the recorded
//! decoders sample inside their steps instead).

use vkllm_cpu::sampler::SamplingParams;
use vkllm_kernels::sample::{Sample, SampleSettings, SampleShape};
use vkllm_vk::{BufSlice, Buffer, MemoryKind, Recorder};

use super::VulkanBackend;
use crate::backend::{Backend, Tensor};
use crate::error::ModelError;

/// The one-row sampler's buffers, sized for a vocabulary and a bias list.
pub(super) struct OneSampler {
    vocab: usize,
    max_bias: usize,
    cfg: Buffer,
    counts: Buffer,
    bias: Buffer,
    scratch: Buffer,
    ctr: Buffer,
    out: Buffer,
}

impl VulkanBackend {
    /// Samples `logits` (`[vocab]`) on the device; see [`Backend::sample_token`].
    pub(super) fn sample_one(
        &mut self,
        logits: Tensor,
        vocab: usize,
        p: &SamplingParams,
        counts: &[u32],
        seq: u64,
        step: u64,
    ) -> Result<u32, ModelError> {
        let n_bias = p.logit_bias.len();
        let fits = self
            .one_sampler
            .as_ref()
            .is_some_and(|s| s.vocab == vocab && s.max_bias >= n_bias);
        if !fits {
            self.one_sampler = Some(self.new_one_sampler(vocab, n_bias.max(1))?);
        }
        let penalties =
            p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
        let s = self.one_sampler.as_ref().ok_or(ModelError::EmptyInput)?;
        let row = SampleSettings {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            repetition_penalty: p.repetition_penalty,
            presence_penalty: p.presence_penalty,
            frequency_penalty: p.frequency_penalty,
            seed: p.seed,
            seq_id: seq,
            step,
            n_bias,
            use_counts: penalties,
            masked: false,
        }
        .row();
        s.cfg.write_host(0, bytemuck::bytes_of(&row))?;
        // Penalties read the counts; empty ones are all zero (the CPU sampler's convention).
        let zeros;
        let counts = if penalties && counts.is_empty() {
            zeros = vec![0u32; vocab];
            &zeros[..]
        } else {
            counts
        };
        if penalties {
            if counts.len() != vocab {
                return Err(ModelError::Config {
                    field: "token counts".into(),
                    msg: format!("{} counts for a {vocab}-token vocabulary", counts.len()),
                });
            }
            s.counts.write_host(0, bytemuck::cast_slice(counts))?;
        }
        let bias: Vec<u32> = p
            .logit_bias
            .iter()
            .flat_map(|&(id, b)| [id, b.to_bits()])
            .collect();
        s.bias.write_host(0, bytemuck::cast_slice(&bias))?;
        let shape = SampleShape {
            vocab,
            rows: 1,
            max_bias: s.max_bias,
            counts: penalties,
            mask: false,
        };
        let all_passes = !row.prep_only(vocab);
        self.mark("sample");
        self.record(|me, r| {
            let s = me.one_sampler.as_ref().ok_or(ModelError::EmptyInput)?;
            let sample = Sample {
                logits: me.head(logits, vocab)?,
                counts: s.counts.all(),
                bias: s.bias.all(),
                cfg: s.cfg.all(),
                scratch: s.scratch.all(),
                out: s.out.all(),
                ctr: s.ctr.all(),
                mask: s.counts.all(),
            };
            if all_passes {
                for d in sample.dispatch(&shape)? {
                    r.dispatch(d)?;
                }
            } else {
                r.dispatch(sample.dispatch_prep(&shape)?)?;
            }
            Ok(())
        })?;
        self.flush()?;
        let s = self.one_sampler.as_ref().ok_or(ModelError::EmptyInput)?;
        let id: Vec<u32> = self.dev.read_vec(&s.out, 1)?;
        Ok(id[0])
    }

    fn new_one_sampler(&mut self, vocab: usize, max_bias: usize) -> Result<OneSampler, ModelError> {
        type S<'a> = Sample<BufSlice<'a>>;
        let host = |name: &str, bytes: u64| self.dev.create_buffer(name, bytes, MemoryKind::Host);
        let s = OneSampler {
            vocab,
            max_bias,
            cfg: host(
                "sample cfg",
                std::mem::size_of::<vkllm_kernels::sample::SampleRow>() as u64,
            )?,
            counts: host("sample counts", 4 * vocab as u64)?,
            bias: host("sample bias", 8 * max_bias as u64)?,
            scratch: self.dev.create_buffer(
                "sample scratch",
                S::scratch_bytes(vocab, 1),
                MemoryKind::Device,
            )?,
            ctr: self
                .dev
                .create_buffer("sample ctr", S::ctr_bytes(1), MemoryKind::Device)?,
            out: host("sample out", 4)?,
        };
        // The kernel's persistent counters start at zero (and every dispatch leaves them so).
        let mut r = Recorder::new(&self.dev)?;
        r.fill(s.ctr.all(), 0)?;
        r.finish()?.submit()?;
        Ok(s)
    }
}
