//! A slot decoder step in two submits (structured outputs): the forward goes first, the host
//! writes the constrained slots' token masks while it runs, then the sampler tail (sampling,
//! logprobs, advance) is submitted and waited for. The masks depend only on tokens already
//! read, so computing them no longer leaves the GPU idle between steps.

use vkllm_vk::Validation;

use super::VulkanBackend;
use super::slot_graph::SlotGraph;
use super::slots::{SlotDecoder, SlotDecoderId, SlotSteps, cfg_err};
use crate::error::ModelError;

impl VulkanBackend {
    /// Records the split step over `rows` rows: the forward, and the sampler tail for each
    /// logprobs choice in `lps` and both sampler-pass choices.
    pub(super) fn record_split_step(
        &mut self,
        g: &dyn SlotGraph,
        d: &mut SlotDecoder,
        rows: usize,
        lps: &[bool],
    ) -> Result<(), ModelError> {
        let (ids, pos) = (d.ids, d.pos);
        let fwd = self.capture_steps(g.capacity(), |me| g.decode_rows(me, ids, pos, rows))?;
        d.fwd.push((rows, fwd));
        for &lp in lps {
            for all in [false, true] {
                let dd: &SlotDecoder = d;
                let smp = self.capture_steps(g.capacity(), |me| {
                    me.record_sample_tail(g.logits(), dd, rows, lp, all)
                })?;
                d.smp.push(((rows, lp, all), smp));
            }
        }
        Ok(())
    }

    /// An error while a split step of `d` is in flight (only masks may be written then).
    pub(super) fn not_inflight(&self, d: SlotDecoderId) -> Result<(), ModelError> {
        match self.decoder(d).inflight {
            Some(_) => Err(cfg_err(
                "split step",
                "a forward is in flight: call slots_finish first".into(),
            )),
            None => Ok(()),
        }
    }

    /// Submits one decode step's forward over the live slots without waiting; write masks with
    /// [`VulkanBackend::slot_mask`], then [`VulkanBackend::slots_finish`] samples. Needs a
    /// decoder recorded with `split_step`.
    pub fn slots_forward(&mut self, d: SlotDecoderId) -> Result<(), ModelError> {
        self.flush()?;
        self.not_inflight(d)?;
        let dec = self.decoder(d);
        let rows = dec.pick(dec.rows_needed(), 1).0;
        let Some((_, fwd)) = dec.fwd.iter().find(|(r, _)| *r == rows) else {
            return Err(cfg_err(
                "split step",
                "the slot decoder was recorded without split_step".into(),
            ));
        };
        dec.ctl.write_host(0, bytemuck::bytes_of(&0u32))?;
        fwd.submit_nowait()?;
        self.decoder_mut(d).inflight = Some(rows);
        Ok(())
    }

    /// Samples the step whose forward [`VulkanBackend::slots_forward`] submitted, waits and
    /// returns its tokens (one step).
    pub fn slots_finish(&mut self, d: SlotDecoderId) -> Result<SlotSteps, ModelError> {
        self.flush()?;
        let Some(rows) = self.decoder_mut(d).inflight.take() else {
            return Err(cfg_err("split step", "no forward in flight".into()));
        };
        let dec = self.decoder(d);
        let (lp, all) = (dec.lp_needed(rows), dec.all_needed(rows));
        let fwd = dec.fwd.iter().find(|(r, _)| *r == rows).map(|x| &x.1);
        let smp = dec
            .smp
            .iter()
            .find(|(k, _)| *k == (rows, lp, all))
            .map(|x| &x.1);
        let (Some(fwd), Some(smp)) = (fwd, smp) else {
            return Err(cfg_err(
                "split step",
                format!("no recording for {rows} rows"),
            ));
        };
        // The sampler waits for the forward on the queue (recordings begin with a full
        // barrier); both fences are waited so either may be submitted again.
        let sampled = smp.submit();
        fwd.wait()?;
        sampled?;
        if self.dev.validation() == Validation::On {
            self.dev.check_validation()?;
        }
        self.read_steps(d, rows, 1, lp)
    }
}
