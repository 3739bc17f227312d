//! Batched decode on the device: a decode step over `slots` sequences, recorded once together
//! with GPU sampling, logprobs and the device-side advance, replayed several steps per submit.
//!
//! Per step: the model graph over one token per slot (row i = slot i, KV slot-major, idle slots
//! masked by an out-of-range position), then `sample` (each slot's settings and RNG step in the
//! `cfg` buffer), `logprobs` (only for slots that asked), and `decode_advance`, which feeds each
//! sampled id to the next step's embedding, appends it to the id ring and moves positions on. A
//! submit of k steps therefore costs one host round trip for k tokens per slot; the host reads
//! the ring afterwards and discards tokens past a stop. Slots join and leave between submits by
//! rewriting their rows of the (host-visible) state buffers; nothing is re-recorded.

use vkllm_cpu::decode::IDLE;
use vkllm_cpu::sampler::SamplingParams;
use vkllm_kernels::logprobs::{LogprobsShape, MAX_TOP};
use vkllm_kernels::sample::{Sample, SampleRow, SampleSettings, SampleShape};
use vkllm_vk::{Buffer, MemoryKind, Recording, Validation};

use super::slot_graph::SlotGraph;
use super::{Slot, VulkanBackend};
use crate::backend::Tensor;
use crate::error::ModelError;
use crate::forward::{KvCache, Model};
use crate::hybrid::{HybridModel, HybridState};

/// Sizes fixed when a slot decoder is recorded.
#[derive(Clone, Copy, Debug)]
pub struct SlotDecoderConfig {
    /// Most logit-bias entries per slot.
    pub max_bias: usize,
    /// Most top logprobs per token (<= 20); 0: only the chosen token's logprob.
    pub max_top: usize,
    /// Logprobs may be asked for: every shape is also recorded with the logprobs dispatch, and a
    /// submit runs that recording only while a slot it covers asks for logprobs (otherwise the
    /// one without: a dispatch fewer per step). `false`: no slot may ask (the benchmark's
    /// decode, like llama-bench's, computes none).
    pub logprobs: bool,
    /// Keep per-slot token counts on the device (repetition/presence/frequency penalties).
    pub counts: bool,
    /// Most steps per submit (recordings are made for every power of two up to this).
    pub max_steps: usize,
    /// Also record one step as two submits, the forward and then the sampler
    /// ([`VulkanBackend::slots_forward`] / [`VulkanBackend::slots_finish`]), so the host can
    /// write token masks while the forward runs (structured outputs).
    pub split_step: bool,
}

impl Default for SlotDecoderConfig {
    fn default() -> Self {
        SlotDecoderConfig {
            max_bias: 64,
            max_top: MAX_TOP,
            logprobs: true,
            counts: true,
            max_steps: 8,
            split_step: false,
        }
    }
}

/// A slot decoder owned by a [`VulkanBackend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotDecoderId(usize);

/// What a slot starts decoding with (after its prompt was prefilled and its first token sampled).
#[derive(Clone, Debug)]
pub struct SlotStart<'a> {
    /// The token the next step feeds (the last sampled one).
    pub token: u32,
    /// Its position.
    pub pos: usize,
    pub sampling: &'a SamplingParams,
    /// The sampler's sequence id and the step counter of the next draw.
    pub seq_id: u64,
    pub step: u64,
    /// Token counts so far (`vocab` entries) for penalties; `None` = all zero.
    pub counts: Option<&'a [u32]>,
    /// Top logprobs per token (0..=max_top), or `None` for no logprobs.
    pub logprobs: Option<usize>,
}

/// A token's logprob and the top alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// One dispatch of a profiled decode step.
#[derive(Clone, Debug)]
pub struct ProfiledDispatch {
    /// The graph region (`Backend::mark`) or the decode tail ("sample", "logprobs", "advance").
    pub region: &'static str,
    /// The kernel.
    pub kernel: &'static str,
    /// Start relative to the step's first dispatch, and duration (GPU timestamps).
    pub start_ns: f64,
    pub ns: f64,
}

/// The tokens of one submit: `ids[step * slots + slot]` (`u32::MAX` where the slot was idle).
#[derive(Clone, Debug)]
pub struct SlotSteps {
    pub steps: usize,
    pub slots: usize,
    pub ids: Vec<u32>,
    /// Per `(step, slot)` like `ids`, for slots that asked for logprobs.
    pub logprobs: Vec<Option<TokenLogprobs>>,
}

impl SlotSteps {
    pub fn id(&self, step: usize, slot: usize) -> u32 {
        self.ids[step * self.slots + slot]
    }
}

/// A slot recording's (rows, steps, with logprobs, all sampler passes).
type RecKey = (usize, usize, bool, bool);

pub(super) struct SlotDecoder {
    /// Recordings by (rows, steps, with logprobs, all sampler passes): rows are the leading
    /// slots a recording covers (so a lone sequence in slot 0 runs matrix-vector products, not a
    /// 16-row batch); without all passes only the sampler's first runs (enough for greedy,
    /// unfiltered and small top-k rows; it saves three launches per step).
    /// Recordings first: they must be dropped before the buffers they use.
    pub(super) recs: Vec<(RecKey, Recording)>,
    /// With `split_step`: one step's forward by rows, and its sampler tail by (rows, with
    /// logprobs, all passes).
    pub(super) fwd: Vec<(usize, Recording)>,
    pub(super) smp: Vec<(RecKey3, Recording)>,
    /// Slots started and not stopped (the device may retire one at capacity earlier).
    pub(super) live: Vec<bool>,
    /// Live slots that asked for logprobs.
    pub(super) wants_lp: Vec<bool>,
    /// Live slots whose settings need every sampler pass (`SampleRow::prep_only` is false).
    pub(super) wants_all: Vec<bool>,
    pub(super) slots: usize,
    pub(super) capacity: usize,
    pub(super) vocab: usize,
    pub(super) cfg_: SlotDecoderConfig,
    pub(super) ids: Tensor,
    pub(super) pos: Tensor,
    pub(super) cfg: Buffer,
    pub(super) bias: Buffer,
    pub(super) want: Buffer,
    pub(super) ctl: Buffer,
    pub(super) ring: Buffer,
    pub(super) lp_ring: Buffer,
    pub(super) counts: Buffer,
    pub(super) scratch: Buffer,
    pub(super) sample_ctr: Buffer,
    pub(super) sampled: Buffer,
    /// Allowed-token bits per slot (structured outputs), read for slots set `masked`.
    pub(super) mask: Buffer,
    /// The rows of a forward submitted by `slots_forward` and not finished yet.
    pub(super) inflight: Option<usize>,
}

/// A sampler recording's (rows, with logprobs, all sampler passes).
pub(super) type RecKey3 = (usize, bool, bool);

impl SlotDecoder {
    /// The leading slots a step must cover: up to the last live one.
    pub(super) fn rows_needed(&self) -> usize {
        self.live.iter().rposition(|&l| l).map_or(1, |i| i + 1)
    }

    /// Whether a step over the leading `rows` slots needs the logprobs dispatch.
    pub(super) fn lp_needed(&self, rows: usize) -> bool {
        self.wants_lp[..rows.min(self.slots)].iter().any(|&w| w)
    }

    /// Whether a step over the leading `rows` slots needs every sampler pass.
    pub(super) fn all_needed(&self, rows: usize) -> bool {
        self.wants_all[..rows.min(self.slots)].iter().any(|&w| w)
    }

    /// The recording of `rows` x `k` steps, with the logprobs dispatch when `lp`, every sampler
    /// pass when `all`.
    pub(super) fn rec(
        &self,
        rows: usize,
        k: usize,
        lp: bool,
        all: bool,
    ) -> Result<&Recording, ModelError> {
        self.recs
            .iter()
            .find(|r| r.0 == (rows, k, lp, all))
            .map(|r| &r.1)
            .ok_or(ModelError::Vulkan(vkllm_vk::Error::Recording(
                "no slot recording of that shape",
            )))
    }

    /// The smallest recorded row count >= `rows`, and the largest recorded step count <=
    /// `steps` for it.
    pub(super) fn pick(&self, rows: usize, steps: usize) -> (usize, usize) {
        let r = self
            .recs
            .iter()
            .map(|x| x.0.0)
            .filter(|&r| r >= rows)
            .min()
            .unwrap_or(self.slots);
        let k = self
            .recs
            .iter()
            .filter(|x| x.0.0 == r && x.0.1 <= steps.max(1))
            .map(|x| x.0.1)
            .max()
            .unwrap_or(1);
        (r, k)
    }

    pub(super) fn lp_shape(&self) -> LogprobsShape {
        LogprobsShape {
            vocab: self.vocab,
            rows: self.slots,
            n_top: self.cfg_.max_top,
            ring_steps: self.cfg_.max_steps,
        }
    }
}

/// Row counts the slot decoder records steps for, up to `slots`: 1, 2, 4, ... and from 32 on
/// also 3 x 2^k (48, 96, ...), then `slots`. A step runs the smallest recording that covers
/// the live rows, so 33-48 live rows run 48 rows rather than 64.
fn row_counts(slots: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |&k| Some(k * 2))
        .take_while(|&k| k < slots)
        .flat_map(|k| match k >= 32 {
            true => vec![k, k + k / 2],
            false => vec![k],
        })
        .filter(|&k| k < slots)
        .collect();
    v.push(slots.max(1));
    v
}

/// 1, 2, 4, ... below `n`, then `n`.
fn powers_up_to(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |&k| Some(k * 2))
        .take_while(|&k| k < n)
        .collect();
    v.push(n.max(1));
    v
}

pub(super) fn cfg_err(field: &str, msg: String) -> ModelError {
    ModelError::Config {
        field: field.into(),
        msg,
    }
}

impl VulkanBackend {
    /// A tensor the host writes and kernels read (and the device-side advance writes): mapped,
    /// device-local where the device allows (never read back by the host).
    fn host_tensor(&mut self, label: &str, words: usize) -> Result<(Tensor, usize), ModelError> {
        let buf = self
            .dev
            .create_buffer(label, 4 * words.max(1) as u64, MemoryKind::Upload)?;
        buf.write_host(0, &vec![0u8; 4 * words.max(1)])?;
        let t = self.push(Slot::Buf { buf, host: None });
        Ok((t, t.index()))
    }

    fn host_buffer(&self, label: &str, bytes: usize) -> Result<Buffer, ModelError> {
        let buf = self
            .dev
            .create_buffer(label, bytes.max(4) as u64, MemoryKind::Host)?;
        buf.write_host(0, &vec![0u8; bytes.max(4)])?;
        Ok(buf)
    }

    /// Records `model`'s batched decode over every slot of `kv` (one token per slot per step),
    /// with sampling, logprobs and the advance on the device. All slots start idle.
    pub fn slot_decoder(
        &mut self,
        model: &Model,
        kv: &KvCache,
        c: SlotDecoderConfig,
    ) -> Result<SlotDecoderId, ModelError> {
        self.slot_decoder_for(&(model, kv), c)
    }

    /// Records a hybrid (Gated DeltaNet / MoE) model's batched decode over every slot of `st`,
    /// as [`VulkanBackend::slot_decoder`]. A slot's recurrent state must hold its sequence
    /// when it starts: prefill it with `HybridModel::forward_slot` into that slot (after
    /// `HybridModel::reset_slot` for a new sequence) or restore a snapshot into it.
    pub fn hybrid_slot_decoder(
        &mut self,
        model: &HybridModel,
        st: &HybridState,
        c: SlotDecoderConfig,
    ) -> Result<SlotDecoderId, ModelError> {
        self.slot_decoder_for(&(model, st), c)
    }

    /// [`VulkanBackend::slot_decoder`] for any [`SlotGraph`].
    pub fn slot_decoder_for(
        &mut self,
        g: &dyn SlotGraph,
        c: SlotDecoderConfig,
    ) -> Result<SlotDecoderId, ModelError> {
        if c.max_top > MAX_TOP {
            return Err(cfg_err(
                "max_top",
                format!("{} > {MAX_TOP} top logprobs", c.max_top),
            ));
        }
        if c.max_steps == 0 {
            return Err(cfg_err("max_steps", "must be at least 1".into()));
        }
        self.flush()?;
        let (slots, vocab) = (g.slots(), g.vocab());
        let (ids, _) = self.host_tensor("slot ids", slots)?;
        let (pos, _) = self.host_tensor("slot positions", slots)?;
        self.slot_words(pos, &vec![IDLE; slots])?;
        let idle_rows = vec![SampleRow::default(); slots];
        let cfg = self.host_buffer("slot sampler rows", std::mem::size_of_val(&idle_rows[..]))?;
        let bias = self.host_buffer("slot logit bias", 8 * slots * c.max_bias.max(1))?;
        let want = self.host_buffer("slot logprobs wanted", 4 * slots)?;
        want.write_host(0, bytemuck::cast_slice(&vec![u32::MAX; slots]))?;
        let ctl = self.host_buffer("slot ring step", 4)?;
        let ring = self.host_buffer("slot id ring", 4 * slots * c.max_steps)?;
        let lp_words = LogprobsShape {
            vocab,
            rows: slots,
            n_top: c.max_top,
            ring_steps: c.max_steps,
        }
        .record_words();
        let lp_ring = self.host_buffer("slot logprob ring", 4 * lp_words * slots * c.max_steps)?;
        let counts = self.dev.create_buffer(
            "slot token counts",
            if c.counts {
                4 * (slots * vocab) as u64
            } else {
                4
            },
            MemoryKind::Device,
        )?;
        let scratch = self.dev.create_buffer(
            "slot sampler scratch",
            Sample::<vkllm_vk::BufSlice<'_>>::scratch_bytes(vocab, slots),
            MemoryKind::Device,
        )?;
        let sample_ctr = self.dev.create_buffer(
            "slot sampler counters",
            Sample::<vkllm_vk::BufSlice<'_>>::ctr_bytes(slots),
            MemoryKind::Device,
        )?;
        let sampled =
            self.dev
                .create_buffer("slot sampled ids", 4 * slots as u64, MemoryKind::Device)?;
        // Device-local where the device allows (the sampler reads a word per token); the host
        // writes it before each constrained step.
        let mask_bytes = 4 * slots * SampleShape::mask_words(vocab);
        let mask = self.dev.create_buffer(
            "slot token masks",
            mask_bytes.max(4) as u64,
            MemoryKind::Upload,
        )?;
        mask.write_host(0, &vec![0u8; mask_bytes.max(4)])?;
        self.record(|_, r| {
            r.fill(counts.all(), 0)?;
            Ok(r.fill(sample_ctr.all(), 0)?)
        })?;
        self.flush()?;
        let mut d = SlotDecoder {
            recs: Vec::new(),
            live: vec![false; slots],
            wants_lp: vec![false; slots],
            wants_all: vec![false; slots],
            slots,
            capacity: g.capacity(),
            vocab,
            cfg_: c,
            ids,
            pos,
            cfg,
            bias,
            want,
            ctl,
            ring,
            lp_ring,
            counts,
            scratch,
            sample_ctr,
            sampled,
            mask,
            fwd: Vec::new(),
            smp: Vec::new(),
            inflight: None,
        };
        let lps: &[bool] = match c.logprobs {
            true => &[false, true],
            false => &[false],
        };
        for rows in row_counts(slots) {
            for k in powers_up_to(c.max_steps) {
                for &lp in lps {
                    for all in [false, true] {
                        let rec = self.record_slot_steps(g, &d, rows, k, lp, all)?;
                        d.recs.push(((rows, k, lp, all), rec));
                    }
                }
            }
            if c.split_step {
                self.record_split_step(g, &mut d, rows, lps)?;
            }
        }
        self.slot_decoders.push(Some(d));
        Ok(SlotDecoderId(self.slot_decoders.len() - 1))
    }

    fn slot_words(&self, t: Tensor, words: &[u32]) -> Result<(), ModelError> {
        Ok(self.buf(t).write_host(0, bytemuck::cast_slice(words))?)
    }

    fn record_slot_steps(
        &mut self,
        g: &dyn SlotGraph,
        d: &SlotDecoder,
        rows: usize,
        steps: usize,
        with_lp: bool,
        all_passes: bool,
    ) -> Result<Recording, ModelError> {
        self.capture_steps(g.capacity(), |me| {
            for _ in 0..steps {
                g.decode_rows(me, d.ids, d.pos, rows)?;
                me.record_sample_tail(g.logits(), d, rows, with_lp, all_passes)?;
            }
            Ok(())
        })
    }

    /// Times one batched decode step of `d`'s current slots, dispatch by dispatch: records the
    /// step once more with timestamps, replays it `reps` times and returns the last replay.
    /// (The slots advance by `reps` tokens.)
    pub fn slot_profile(
        &mut self,
        d: SlotDecoderId,
        model: &Model,
        kv: &KvCache,
        reps: usize,
    ) -> Result<Vec<ProfiledDispatch>, ModelError> {
        self.slot_profile_for(d, &(model, kv), reps)
    }

    /// [`VulkanBackend::slot_profile`] for any [`SlotGraph`] (e.g. `(&HybridModel,
    /// &HybridState)`).
    pub fn slot_profile_for(
        &mut self,
        d: SlotDecoderId,
        g: &dyn SlotGraph,
        reps: usize,
    ) -> Result<Vec<ProfiledDispatch>, ModelError> {
        self.flush()?;
        self.not_inflight(d)?;
        self.timestamps = 16384;
        self.marks.clear();
        let dec = self.slot_decoders[d.0]
            .take()
            .expect("slot decoders are only taken while recording");
        let rows = dec.rows_needed();
        let lp = dec.lp_needed(rows);
        let all = dec.all_needed(rows);
        let rec = self.record_slot_steps(g, &dec, rows, 1, lp, all);
        self.slot_decoders[d.0] = Some(dec);
        self.timestamps = 0;
        let marks = std::mem::take(&mut self.marks);
        let rec = rec?;
        for _ in 0..reps.max(1) {
            self.decoder(d)
                .ctl
                .write_host(0, bytemuck::bytes_of(&0u32))?;
            rec.submit()?;
        }
        Ok(super::profile::with_regions(&marks, &rec.timings()?))
    }

    pub(super) fn decoder_mut(&mut self, d: SlotDecoderId) -> &mut SlotDecoder {
        self.slot_decoders[d.0]
            .as_mut()
            .expect("slot decoders are only taken while recording")
    }

    pub(super) fn decoder(&self, d: SlotDecoderId) -> &SlotDecoder {
        self.slot_decoders[d.0]
            .as_ref()
            .expect("slot decoders are only taken while recording")
    }

    /// Starts (or restarts) `slot`: its next step feeds `s.token` at `s.pos`.
    pub fn slot_start(
        &mut self,
        d: SlotDecoderId,
        slot: usize,
        s: &SlotStart<'_>,
    ) -> Result<(), ModelError> {
        self.flush()?;
        self.not_inflight(d)?;
        let dec = self.decoder(d);
        if slot >= dec.slots {
            return Err(cfg_err("slot", format!("slot {slot} of {}", dec.slots)));
        }
        if s.token as usize >= dec.vocab {
            return Err(ModelError::TokenOutOfRange {
                id: s.token,
                vocab: dec.vocab,
            });
        }
        if s.pos >= dec.capacity {
            return Err(ModelError::ContextFull {
                pos: s.pos,
                capacity: dec.capacity,
            });
        }
        s.sampling.validate(dec.vocab)?;
        let p = s.sampling;
        if p.logit_bias.len() > dec.cfg_.max_bias {
            return Err(cfg_err(
                "logit_bias",
                format!(
                    "{} entries; at most {} per request",
                    p.logit_bias.len(),
                    dec.cfg_.max_bias
                ),
            ));
        }
        let penalties =
            p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
        if penalties && !dec.cfg_.counts {
            return Err(cfg_err(
                "penalties",
                "this decoder keeps no token counts".into(),
            ));
        }
        if s.logprobs.is_some() && !dec.cfg_.logprobs {
            return Err(cfg_err(
                "logprobs",
                "this decoder was recorded without logprobs".into(),
            ));
        }
        if let Some(n) = s.logprobs
            && n > dec.cfg_.max_top
        {
            return Err(cfg_err(
                "top_logprobs",
                format!("{n} > {} supported", dec.cfg_.max_top),
            ));
        }
        let row = SampleSettings {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            repetition_penalty: p.repetition_penalty,
            presence_penalty: p.presence_penalty,
            frequency_penalty: p.frequency_penalty,
            seed: p.seed,
            seq_id: s.seq_id,
            step: s.step,
            n_bias: p.logit_bias.len(),
            use_counts: penalties,
            masked: false,
        }
        .row();
        let rb = std::mem::size_of::<SampleRow>();
        dec.cfg
            .write_host((slot * rb) as u64, bytemuck::bytes_of(&row))?;
        let bias: Vec<u32> = p
            .logit_bias
            .iter()
            .flat_map(|&(id, b)| [id, b.to_bits()])
            .collect();
        dec.bias.write_host(
            (8 * slot * dec.cfg_.max_bias) as u64,
            bytemuck::cast_slice(&bias),
        )?;
        let want = s.logprobs.map_or(u32::MAX, |n| n as u32);
        dec.want
            .write_host(4 * slot as u64, bytemuck::bytes_of(&want))?;
        self.buf(dec.ids)
            .write_host(4 * slot as u64, bytemuck::bytes_of(&s.token))?;
        self.buf(dec.pos)
            .write_host(4 * slot as u64, bytemuck::bytes_of(&(s.pos as u32)))?;
        let all = !row.prep_only(dec.vocab);
        self.decoder_mut(d).live[slot] = true;
        self.decoder_mut(d).wants_lp[slot] = s.logprobs.is_some();
        self.decoder_mut(d).wants_all[slot] = all;
        let dec = self.decoder(d);
        if dec.cfg_.counts && penalties {
            let zeros;
            let counts = match s.counts {
                Some(c) if c.len() == dec.vocab => c,
                Some(c) => {
                    return Err(cfg_err(
                        "counts",
                        format!("{} counts for a vocabulary of {}", c.len(), dec.vocab),
                    ));
                }
                None => {
                    zeros = vec![0u32; dec.vocab];
                    &zeros
                }
            };
            self.dev.upload(
                &dec.counts,
                (4 * slot * dec.vocab) as u64,
                bytemuck::cast_slice(counts),
            )?;
        }
        Ok(())
    }

    /// Structured outputs: the tokens `slot` may draw at its next step, one bit per token
    /// (`SampleShape::mask_words` words), or `None` for every token. Set before each submit of
    /// one step while the slot is constrained.
    pub fn slot_mask(
        &mut self,
        d: SlotDecoderId,
        slot: usize,
        mask: Option<&[u32]>,
    ) -> Result<(), ModelError> {
        self.flush()?;
        let dec = self.decoder(d);
        if slot >= dec.slots {
            return Err(cfg_err("slot", format!("slot {slot} of {}", dec.slots)));
        }
        let words = SampleShape::mask_words(dec.vocab);
        if let Some(m) = mask {
            if m.len() != words {
                return Err(cfg_err(
                    "mask",
                    format!("{} words for a vocabulary of {}", m.len(), dec.vocab),
                ));
            }
            dec.mask
                .write_host((4 * slot * words) as u64, bytemuck::cast_slice(m))?;
        }
        let at = slot * std::mem::size_of::<SampleRow>() + std::mem::offset_of!(SampleRow, masked);
        dec.cfg
            .write_host(at as u64, bytemuck::bytes_of(&(mask.is_some() as u32)))?;
        Ok(())
    }

    /// Stops `slot` (it stays idle until started again).
    pub fn slot_stop(&mut self, d: SlotDecoderId, slot: usize) -> Result<(), ModelError> {
        self.flush()?;
        self.not_inflight(d)?;
        let dec = self.decoder(d);
        if slot >= dec.slots {
            return Err(cfg_err("slot", format!("slot {slot} of {}", dec.slots)));
        }
        let rb = std::mem::size_of::<SampleRow>();
        dec.cfg.write_host(
            (slot * rb) as u64,
            bytemuck::bytes_of(&SampleRow::default()),
        )?;
        dec.want
            .write_host(4 * slot as u64, bytemuck::bytes_of(&u32::MAX))?;
        self.buf(dec.pos)
            .write_host(4 * slot as u64, bytemuck::bytes_of(&IDLE))?;
        self.decoder_mut(d).live[slot] = false;
        self.decoder_mut(d).wants_lp[slot] = false;
        self.decoder_mut(d).wants_all[slot] = false;
        Ok(())
    }

    /// The step count a submit of `want` steps runs now (the largest recorded count <= want for
    /// the rows the live slots need).
    pub fn slot_steps_available(&self, d: SlotDecoderId, want: usize) -> usize {
        let dec = self.decoder(d);
        dec.pick(dec.rows_needed(), want).1
    }

    /// Runs up to `steps` decode steps for every live slot in one submit (the largest recorded
    /// count, see [`VulkanBackend::slot_steps_available`]) and returns their tokens. A slot whose
    /// position reaches the capacity retires on the device (its later entries are idle).
    pub fn slots_run(&mut self, d: SlotDecoderId, steps: usize) -> Result<SlotSteps, ModelError> {
        self.flush()?;
        self.not_inflight(d)?;
        let dec = self.decoder(d);
        let (rows, k) = dec.pick(dec.rows_needed(), steps);
        dec.ctl.write_host(0, bytemuck::bytes_of(&0u32))?;
        let lp = dec.lp_needed(rows);
        dec.rec(rows, k, lp, dec.all_needed(rows))?.submit()?;
        if self.dev.validation() == Validation::On {
            self.dev.check_validation()?;
        }
        self.read_steps(d, rows, k, lp)
    }

    /// The tokens (and logprobs) of a finished submit of `k` steps over `rows` rows.
    pub(super) fn read_steps(
        &self,
        d: SlotDecoderId,
        rows: usize,
        k: usize,
        lp: bool,
    ) -> Result<SlotSteps, ModelError> {
        let dec = self.decoder(d);
        // The ring holds [k, rows]; the result is [k, slots] with idle entries past `rows`.
        let mut ring = vec![0u32; k * rows];
        dec.ring.read_host(0, bytemuck::cast_slice_mut(&mut ring))?;
        let mut ids = vec![IDLE; k * dec.slots];
        for step in 0..k {
            ids[step * dec.slots..step * dec.slots + rows]
                .copy_from_slice(&ring[step * rows..(step + 1) * rows]);
        }
        let mut want = vec![0u32; dec.slots];
        dec.want.read_host(0, bytemuck::cast_slice_mut(&mut want))?;
        let n = k * dec.slots;
        let mut logprobs = vec![None; n];
        if lp && want[..rows].iter().any(|&w| w != u32::MAX) {
            let words = dec.lp_shape().record_words();
            let mut recs = vec![0u32; k * rows * words];
            dec.lp_ring
                .read_host(0, bytemuck::cast_slice_mut(&mut recs))?;
            for step in 0..k {
                for slot in 0..rows {
                    let i = step * dec.slots + slot;
                    if want[slot] == u32::MAX || ids[i] == IDLE {
                        continue;
                    }
                    let rec = &recs[(step * rows + slot) * words..][..words];
                    let count = (rec[1] as usize).min(dec.cfg_.max_top);
                    logprobs[i] = Some(TokenLogprobs {
                        logprob: f32::from_bits(rec[0]),
                        top: (0..count)
                            .map(|t| (rec[2 + 2 * t], f32::from_bits(rec[3 + 2 * t])))
                            .collect(),
                    });
                }
            }
        }
        Ok(SlotSteps {
            steps: k,
            slots: dec.slots,
            ids,
            logprobs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::row_counts;

    #[test]
    fn row_counts_leave_at_most_a_third_of_the_rows_idle_past_32() {
        assert_eq!(row_counts(1), vec![1]);
        assert_eq!(row_counts(4), vec![1, 2, 4]);
        assert_eq!(row_counts(20), vec![1, 2, 4, 8, 16, 20]);
        assert_eq!(row_counts(64), vec![1, 2, 4, 8, 16, 32, 48, 64]);
        assert_eq!(row_counts(100), vec![1, 2, 4, 8, 16, 32, 48, 64, 96, 100]);
        for slots in 1..300 {
            let c = row_counts(slots);
            assert_eq!(*c.last().unwrap(), slots);
            assert!(c.windows(2).all(|w| w[0] < w[1]), "{c:?}");
            for live in 33..=slots {
                let r = c.iter().copied().find(|&r| r >= live).unwrap();
                // At most a third of the rows run are idle.
                assert!(2 * r <= 3 * live, "{live} live run {r} rows");
            }
        }
    }
}
