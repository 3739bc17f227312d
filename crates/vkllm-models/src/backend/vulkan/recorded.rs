//! The single-sequence decode step recorded once and replayed every token (the step the
//! recorded-decode tests compare with the per-dispatch path; the batched form is `slots.rs`),
//! and `Backend::capture`'s recordings (a frame-budget decoder's slices of layers).

use vkllm_vk::{Recording, Validation};

use super::VulkanBackend;
use crate::backend::{Backend, CaptureId};
use crate::error::ModelError;
use crate::forward::{KvCache, Model};

/// A decode step recorded once ([`VulkanBackend::record_decode`]) and replayed every token.
pub struct RecordedDecode {
    rec: Recording,
    capacity: usize,
}

impl RecordedDecode {
    /// Kernel launches in one step.
    pub fn dispatches(&self) -> usize {
        self.rec.dispatches()
    }
}

impl VulkanBackend {
    /// Records `model`'s decode step (n = 1) over `kv` once. Replay it with
    /// [`VulkanBackend::replay_decode`]: each token costs one submit of the same command buffer.
    pub fn record_decode(
        &mut self,
        model: &Model,
        kv: &KvCache,
    ) -> Result<RecordedDecode, ModelError> {
        self.flush()?;
        self.capture_ctx = Some(kv.capacity);
        let res = model.decode_step_graph(self, kv);
        self.capture_ctx = None;
        if let Err(e) = res {
            self.rec = None;
            return Err(e);
        }
        let rec = match self.rec.take() {
            Some(r) => r.finish()?,
            None => return Err(ModelError::EmptyInput),
        };
        Ok(RecordedDecode {
            rec,
            capacity: kv.capacity,
        })
    }

    /// Runs a recorded decode step for token `id` at position `pos` and returns its logits.
    pub fn replay_decode(
        &mut self,
        step: &RecordedDecode,
        model: &Model,
        id: u32,
        pos: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let vocab = model.cfg.vocab_size;
        if id as usize >= vocab {
            return Err(ModelError::TokenOutOfRange { id, vocab });
        }
        if pos >= step.capacity {
            return Err(ModelError::ContextFull {
                pos,
                capacity: step.capacity,
            });
        }
        let (ids, p) = model.step_inputs();
        self.write_u32(ids, &[id])?;
        self.write_u32(p, &[pos as u32])?;
        step.rec.submit()?;
        if self.dev.validation() == Validation::On {
            self.dev.check_validation()?;
        }
        let mut out = vec![0f32; vocab];
        self.read_f32(model.logits_tensor(), 0, &mut out)?;
        Ok(out)
    }
}

impl VulkanBackend {
    /// `Backend::capture`: what `f` records, as a recording of its own (the work before it is
    /// submitted first).
    pub(super) fn capture_recording(
        &mut self,
        capacity: usize,
        f: impl FnOnce(&mut Self) -> Result<(), ModelError>,
    ) -> Result<CaptureId, ModelError> {
        self.flush()?;
        let rec = self.capture_steps(capacity, f)?;
        let index = match self.captures.iter().position(Option::is_none) {
            Some(i) => {
                self.captures[i] = Some(rec);
                i
            }
            None => {
                self.captures.push(Some(rec));
                self.captures.len() - 1
            }
        };
        Ok(CaptureId {
            index,
            generation: self.scratch_gen,
        })
    }

    /// `Backend::replay_captures` (`wait`) and `replay_captures_nowait`: the work before them,
    /// then `ids` as one submission.
    pub(super) fn replay_recordings(
        &mut self,
        ids: &[CaptureId],
        wait: bool,
    ) -> Result<(), ModelError> {
        self.flush()?;
        let mut chain = Vec::with_capacity(ids.len());
        for id in ids {
            let rec = self.captures.get(id.index).and_then(Option::as_ref);
            match rec {
                Some(r) if id.generation == self.scratch_gen => chain.push(r),
                Some(_) => return Err(ModelError::CaptureStale { index: id.index }),
                None => {
                    return Err(ModelError::Config {
                        field: "capture".into(),
                        msg: format!("capture {} was released or never made", id.index),
                    });
                }
            }
        }
        if wait {
            Recording::submit_chain(&chain)?;
        } else {
            Recording::submit_chain_nowait(&chain)?;
            self.replay_pending = ids.last().map(|id| id.index);
            return Ok(());
        }
        if self.dev.validation() == Validation::On {
            self.dev.check_validation()?;
        }
        Ok(())
    }

    /// Waits for a chain `replay_captures_nowait` submitted, if one is pending.
    pub(super) fn wait_replay(&mut self) -> Result<(), ModelError> {
        if let Some(i) = self.replay_pending.take()
            && let Some(Some(r)) = self.captures.get(i)
        {
            r.wait()?;
            if self.dev.validation() == Validation::On {
                self.dev.check_validation()?;
            }
        }
        Ok(())
    }

    /// `Backend::release_captures`.
    pub(super) fn release_recordings(&mut self, ids: &[CaptureId]) {
        for id in ids {
            if let Some(slot) = self.captures.get_mut(id.index) {
                *slot = None;
            }
        }
    }
}
