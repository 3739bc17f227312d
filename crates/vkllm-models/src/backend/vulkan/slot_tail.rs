//! The recording helpers of the slot decoder's steps: one capture into a [`Recording`], and a
//! step's tail after the forward (sampling, logprobs, the device-side advance).

use vkllm_kernels::decode_advance::{DecodeAdvance, DecodeAdvanceShape};
use vkllm_kernels::logprobs::{Logprobs, LogprobsShape};
use vkllm_kernels::sample::{Sample, SampleShape};
use vkllm_vk::Recording;

use super::VulkanBackend;
use super::slots::SlotDecoder;
use crate::backend::{Backend, Tensor};
use crate::error::ModelError;

impl VulkanBackend {
    /// Records what `f` records into one [`Recording`], positions bounded by `capacity`.
    pub(super) fn capture_steps(
        &mut self,
        capacity: usize,
        f: impl FnOnce(&mut Self) -> Result<(), ModelError>,
    ) -> Result<Recording, ModelError> {
        self.capture_ctx = Some(capacity);
        let res = f(self);
        self.capture_ctx = None;
        if let Err(e) = res {
            self.rec = None;
            return Err(e);
        }
        match self.rec.take() {
            Some(r) => Ok(r.finish()?),
            None => Err(ModelError::EmptyInput),
        }
    }

    /// A step's tail after the forward: sampling from `logits`, logprobs when `with_lp`, the
    /// advance to the next step.
    pub(super) fn record_sample_tail(
        &mut self,
        logits: Tensor,
        d: &SlotDecoder,
        rows: usize,
        with_lp: bool,
        all_passes: bool,
    ) -> Result<(), ModelError> {
        let lp = LogprobsShape {
            rows,
            ..d.lp_shape()
        };
        self.mark("sample");
        self.record(|me, r| {
            let (lg, ids, pos) = (me.all(logits), me.all(d.ids), me.all(d.pos));
            let sample = Sample {
                logits: lg,
                counts: d.counts.all(),
                bias: d.bias.all(),
                cfg: d.cfg.all(),
                scratch: d.scratch.all(),
                out: d.sampled.all(),
                ctr: d.sample_ctr.all(),
                mask: d.mask.all(),
            };
            let shape = SampleShape {
                vocab: d.vocab,
                rows,
                max_bias: d.cfg_.max_bias,
                counts: d.cfg_.counts,
                mask: true,
            };
            if all_passes {
                for k in sample.dispatch(&shape)? {
                    r.dispatch(k)?;
                }
            } else {
                r.dispatch(sample.dispatch_prep(&shape)?)?;
            }
            if with_lp {
                r.dispatch(
                    Logprobs {
                        logits: lg,
                        chosen: d.sampled.all(),
                        want: d.want.all(),
                        ctl: d.ctl.all(),
                        out: d.lp_ring.all(),
                    }
                    .dispatch(&lp)?,
                )?;
            }
            r.dispatch(
                DecodeAdvance {
                    sampled: d.sampled.all(),
                    ids,
                    pos,
                    cfg: d.cfg.all(),
                    counts: d.counts.all(),
                    ring: d.ring.all(),
                    ctl: d.ctl.all(),
                }
                .dispatch(&DecodeAdvanceShape {
                    rows,
                    vocab: d.vocab,
                    capacity: d.capacity,
                    ring_steps: d.cfg_.max_steps,
                    counts: d.cfg_.counts,
                })?,
            )?;
            Ok(())
        })
    }
}
