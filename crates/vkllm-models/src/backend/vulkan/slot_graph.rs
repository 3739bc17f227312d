//! What a slot decoder replays: a model together with its per-slot state (the dense model and
//! its slot-major KV cache, or a hybrid model and its slot-major KV + recurrent state), seen
//! through one trait so the recording, sampling, logprobs and device-side advance of
//! `slots.rs` are shared by every architecture.

use super::VulkanBackend;
use crate::backend::Tensor;
use crate::error::ModelError;
use crate::forward::{KvCache, Model};
use crate::hybrid::{HybridModel, HybridState};

/// A model and the per-slot state a batched decode step runs over.
pub trait SlotGraph {
    /// Sequences the state holds.
    fn slots(&self) -> usize;
    /// Positions per sequence.
    fn capacity(&self) -> usize;
    fn vocab(&self) -> usize;
    /// Where a decode step leaves its `[rows, vocab]` logits.
    fn logits(&self) -> Tensor;
    /// Issues one decode step over the leading `rows` slots: row `i` is slot `i`, token id
    /// `ids[i]`, position `pos[i]` (>= capacity: idle, its state untouched).
    fn decode_rows(
        &self,
        b: &mut VulkanBackend,
        ids: Tensor,
        pos: Tensor,
        rows: usize,
    ) -> Result<(), ModelError>;
}

impl SlotGraph for (&Model, &KvCache) {
    fn slots(&self) -> usize {
        self.1.slots
    }
    fn capacity(&self) -> usize {
        self.1.capacity
    }
    fn vocab(&self) -> usize {
        self.0.cfg.vocab_size
    }
    fn logits(&self) -> Tensor {
        self.0.logits_tensor()
    }
    fn decode_rows(
        &self,
        b: &mut VulkanBackend,
        ids: Tensor,
        pos: Tensor,
        rows: usize,
    ) -> Result<(), ModelError> {
        self.0.decode_slots_graph(b, self.1, ids, pos, rows)
    }
}

impl SlotGraph for (&HybridModel, &HybridState) {
    fn slots(&self) -> usize {
        self.1.slots
    }
    fn capacity(&self) -> usize {
        self.1.capacity
    }
    fn vocab(&self) -> usize {
        self.0.cfg.vocab_size
    }
    fn logits(&self) -> Tensor {
        self.0.logits_tensor()
    }
    fn decode_rows(
        &self,
        b: &mut VulkanBackend,
        ids: Tensor,
        pos: Tensor,
        rows: usize,
    ) -> Result<(), ModelError> {
        self.0.decode_slots_graph(b, self.1, ids, pos, rows)
    }
}
