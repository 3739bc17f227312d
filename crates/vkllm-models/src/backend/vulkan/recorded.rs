//! The single-sequence decode step recorded once and replayed every token (the step the
//! recorded-decode tests compare with the per-dispatch path; the batched form is `slots.rs`).

use vkllm_vk::{Recording, Validation};

use super::VulkanBackend;
use crate::backend::Backend;
use crate::error::ModelError;
use crate::forward::{KvCache, Model};

/// A decode step recorded once ([`VulkanBackend::record_decode`]) and replayed every token.
pub struct RecordedDecode {
    rec: Recording,
    capacity: usize,
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
