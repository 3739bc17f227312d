//! Recurrent marks: per slot, a copy of every Gated DeltaNet layer's recurrent state (conv
//! history and delta-rule matrix) taken at a token boundary, the end of a prompt. Restored into
//! the same slot, the slot continues from the marked position: its KV rows before it are still
//! in place (later tokens only write later rows), so a prompt that shares the marked prompt's
//! tokens prefills only the rest, even when the answer after it was re-rendered differently
//! (a chat resent with its reply, thinking stripped). Preallocated once: marking or restoring
//! is a device copy of the recurrent state, no allocation.

use crate::backend::{Backend, Tensor};
use crate::error::ModelError;
use crate::hybrid::forward::{HybridModel, HybridState, LayerState};

/// Marks for every slot of one [`HybridState`].
#[derive(Clone, Debug)]
pub struct RecurrentMarks {
    /// Per DeltaNet layer: copies of the conv and delta states, slot-major like the state's.
    layers: Vec<[Tensor; 2]>,
    /// Per slot: the position marked, if any.
    pos: Vec<Option<usize>>,
}

impl RecurrentMarks {
    /// The position `slot`'s mark holds.
    pub fn pos(&self, slot: usize) -> Option<usize> {
        self.pos.get(slot).copied().flatten()
    }

    /// Drops `slot`'s mark (its KV rows before the mark are about to be rewritten).
    pub fn forget(&mut self, slot: usize) {
        if let Some(p) = self.pos.get_mut(slot) {
            *p = None;
        }
    }
}

impl HybridModel {
    /// Marks for `st`'s slots (as much memory as its recurrent states).
    pub fn new_marks<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
    ) -> Result<RecurrentMarks, ModelError> {
        let (conv_len, delta_len) = self.recurrent_lens();
        let mut layers = Vec::new();
        for l in &st.layers {
            if let LayerState::DeltaNet { .. } = l {
                layers.push([
                    b.alloc_f32((st.slots * conv_len).max(1))?,
                    b.alloc_f32((st.slots * delta_len).max(1))?,
                ]);
            }
        }
        Ok(RecurrentMarks {
            layers,
            pos: vec![None; st.slots],
        })
    }

    /// The (state, mark) tensor pairs of `slot` with their offset and length.
    fn mark_parts(
        &self,
        st: &HybridState,
        marks: &RecurrentMarks,
        slot: usize,
    ) -> Result<Vec<(Tensor, Tensor, usize, usize)>, ModelError> {
        if slot >= st.slots || marks.pos.len() != st.slots {
            return Err(ModelError::Config {
                field: "mark".into(),
                msg: format!(
                    "slot {slot} of a {}-slot state with marks for {}",
                    st.slots,
                    marks.pos.len()
                ),
            });
        }
        let (conv_len, delta_len) = self.recurrent_lens();
        let delta_layers = st.layers.iter().filter_map(|l| match *l {
            LayerState::DeltaNet { conv, delta } => Some((conv, delta)),
            LayerState::Attention { .. } => None,
        });
        let mut parts = Vec::new();
        for ((conv, delta), [mc, md]) in delta_layers.zip(&marks.layers) {
            parts.push((conv, *mc, slot * conv_len, conv_len));
            parts.push((delta, *md, slot * delta_len, delta_len));
        }
        Ok(parts)
    }

    /// Marks `slot` of `st` at its current position (`st.next[slot]`).
    pub fn mark_slot<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        slot: usize,
        marks: &mut RecurrentMarks,
    ) -> Result<(), ModelError> {
        for (state, mark, off, len) in self.mark_parts(st, marks, slot)? {
            if len > 0 {
                b.copy(state, off, mark, off, len)?;
            }
        }
        marks.pos[slot] = Some(st.next[slot].get());
        Ok(())
    }

    /// Starts slot `to` from slot `from`'s mark: `from`'s KV rows before the marked position
    /// (attention layers, in the state's type) and its marked recurrent states are copied into
    /// `to`, whose mark becomes the same; returns the position `to` continues from. `from` may
    /// be running: its rows before the mark never change.
    pub fn restore_mark_from<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        from: usize,
        to: usize,
        marks: &mut RecurrentMarks,
    ) -> Result<usize, ModelError> {
        if from == to {
            return self.restore_mark(b, st, to, marks);
        }
        let Some(pos) = marks.pos(from) else {
            return Err(ModelError::Config {
                field: "mark".into(),
                msg: format!("slot {from} has no mark"),
            });
        };
        let src = self.mark_parts(st, marks, from)?;
        let dst = self.mark_parts(st, marks, to)?;
        for ((_, mark, off_from, len), (state, mark_to, off_to, _)) in src.into_iter().zip(dst) {
            if len > 0 {
                b.copy(mark, off_from, state, off_to, len)?;
                b.copy(mark, off_from, mark_to, off_to, len)?;
            }
        }
        let w = self.cfg.kv_dim();
        for l in &st.layers {
            if let LayerState::Attention { k, v } = *l
                && pos > 0
            {
                let (a, z) = (from * st.stride * w, to * st.stride * w);
                b.copy_kv(k, a, k, z, pos * w, st.dtype)?;
                b.copy_kv(v, a, v, z, pos * w, st.v_dtype)?;
            }
        }
        marks.pos[to] = Some(pos);
        st.next[to].set(pos);
        Ok(pos)
    }

    /// Copies slot `from`'s mark of (`st`, `marks`) with its KV rows before the marked position
    /// into slot `to` of (`dst`, `dst_marks`), a state of this model with the same capacity and
    /// cache types (a prefix store's), whose mark becomes the same; with `resume`, `to`'s
    /// recurrent state is set to the mark too and it continues from there. Returns the position.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_mark<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        marks: &RecurrentMarks,
        from: usize,
        dst: &HybridState,
        dst_marks: &mut RecurrentMarks,
        to: usize,
        resume: bool,
    ) -> Result<usize, ModelError> {
        let shape_err = |msg: String| ModelError::Config {
            field: "mark copy".into(),
            msg,
        };
        let Some(pos) = marks.pos(from) else {
            return Err(shape_err(format!("slot {from} has no mark")));
        };
        if dst.layers.len() != st.layers.len()
            || dst.capacity != st.capacity
            || (dst.dtype, dst.v_dtype, dst.rot_k) != (st.dtype, st.v_dtype, st.rot_k)
        {
            return Err(shape_err(
                "states of one model with the same capacity and cache types needed".into(),
            ));
        }
        let src = self.mark_parts(st, marks, from)?;
        let to_parts = self.mark_parts(dst, dst_marks, to)?;
        for ((_, mark, off_from, len), (state, mark_to, off_to, _)) in src.into_iter().zip(to_parts)
        {
            if len > 0 {
                if resume {
                    b.copy(mark, off_from, state, off_to, len)?;
                }
                b.copy(mark, off_from, mark_to, off_to, len)?;
            }
        }
        let w = self.cfg.kv_dim();
        for (l, d) in st.layers.iter().zip(&dst.layers) {
            if let (LayerState::Attention { k, v }, LayerState::Attention { k: dk, v: dv }) =
                (*l, *d)
                && pos > 0
            {
                let (a, z) = (from * st.stride * w, to * dst.stride * w);
                b.copy_kv(k, a, dk, z, pos * w, st.dtype)?;
                b.copy_kv(v, a, dv, z, pos * w, st.v_dtype)?;
            }
        }
        dst_marks.pos[to] = Some(pos);
        if resume {
            dst.next[to].set(pos);
        }
        Ok(pos)
    }

    /// Device bytes one slot of `st` takes with its mark: the attention layers' KV rows and the
    /// Gated DeltaNet layers' recurrent states, twice (state and mark).
    pub fn slot_bytes(&self, st: &HybridState) -> u64 {
        let (conv_len, delta_len) = self.recurrent_lens();
        let values = (st.stride * self.cfg.kv_dim()) as u64;
        st.layers
            .iter()
            .map(|l| match l {
                LayerState::Attention { .. } => st.dtype.bytes(values) + st.v_dtype.bytes(values),
                LayerState::DeltaNet { .. } => 2 * 4 * (conv_len + delta_len) as u64,
            })
            .sum()
    }

    /// Puts `slot`'s mark back: the slot continues from the marked position, which it returns.
    /// Valid while the slot's KV rows before that position were not rewritten (see
    /// [`RecurrentMarks::forget`]).
    pub fn restore_mark<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        slot: usize,
        marks: &RecurrentMarks,
    ) -> Result<usize, ModelError> {
        let Some(pos) = marks.pos(slot) else {
            return Err(ModelError::Config {
                field: "mark".into(),
                msg: format!("slot {slot} has no mark"),
            });
        };
        for (state, mark, off, len) in self.mark_parts(st, marks, slot)? {
            if len > 0 {
                b.copy(mark, off, state, off, len)?;
            }
        }
        st.next[slot].set(pos);
        Ok(pos)
    }
}
