//! Recurrent marks: per slot, copies of every Gated DeltaNet layer's recurrent state (conv
//! history and delta-rule matrix) taken at token boundaries: the end of a prompt, and where a
//! prompt leaves a prefix another conversation shares (a system prompt). Restored into
//! the same slot, the slot continues from the marked position: its KV rows before it are still
//! in place (later tokens only write later rows), so a prompt that shares the marked prompt's
//! tokens prefills only the rest, even when the answer after it was re-rendered differently
//! (a chat resent with its reply, thinking stripped). Preallocated once: marking or restoring
//! is a device copy of the recurrent state, no allocation.

use crate::backend::{Backend, Tensor};
use crate::error::ModelError;
use crate::hybrid::forward::{HybridModel, HybridState, LayerState};

/// One recurrent tensor's range in a slot's state and in a mark: (state tensor, its offset,
/// mark tensor, its offset, length).
type MarkPart = (Tensor, usize, Tensor, usize, usize);

/// Marks for every slot of one [`HybridState`]: up to `per_slot` per slot, each at its own
/// position (the end of a prompt, or where two prompts diverge), replaced least recently used.
#[derive(Clone, Debug)]
pub struct RecurrentMarks {
    /// Per DeltaNet layer: copies of the conv and delta states, mark-major (slot, then its
    /// marks) in the state's per-slot lengths.
    layers: Vec<[Tensor; 2]>,
    per_slot: usize,
    /// Per mark (`slot * per_slot + k`): the position marked, if any.
    pos: Vec<Option<usize>>,
    /// Per mark: when it was taken or last restored (`clock`).
    used: Vec<u64>,
    clock: u64,
}

impl RecurrentMarks {
    /// Marks each slot holds at most.
    pub fn per_slot(&self) -> usize {
        self.per_slot
    }

    /// `slot`'s marks as (index, position).
    fn of(&self, slot: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let n = self.per_slot;
        let range = (slot * n).min(self.pos.len())..((slot + 1) * n).min(self.pos.len());
        range.filter_map(|i| self.pos[i].map(|p| (i, p)))
    }

    /// The furthest position `slot` has a mark at.
    pub fn pos(&self, slot: usize) -> Option<usize> {
        self.of(slot).map(|(_, p)| p).max()
    }

    /// The furthest position `slot` has a mark at, at or before `limit`.
    pub fn best(&self, slot: usize, limit: usize) -> Option<usize> {
        self.of(slot).map(|(_, p)| p).filter(|&p| p <= limit).max()
    }

    /// Whether `slot` has a mark at `pos`.
    pub fn has(&self, slot: usize, pos: usize) -> bool {
        self.of(slot).any(|(_, p)| p == pos)
    }

    /// Drops `slot`'s marks (its KV rows are about to be rewritten from position 0).
    pub fn forget(&mut self, slot: usize) {
        self.forget_after(slot, 0);
    }

    /// Drops `slot`'s marks past `pos` (its KV rows from `pos` on are about to be rewritten).
    pub fn forget_after(&mut self, slot: usize, pos: usize) {
        let n = self.per_slot;
        let end = ((slot + 1) * n).min(self.pos.len());
        for p in &mut self.pos[(slot * n).min(end)..end] {
            if p.is_some_and(|p| p > pos) {
                *p = None;
            }
        }
    }

    /// The mark index of `slot` at `pos`.
    fn find(&self, slot: usize, pos: usize) -> Result<usize, ModelError> {
        self.of(slot)
            .find(|&(_, p)| p == pos)
            .map(|(i, _)| i)
            .ok_or_else(|| ModelError::Config {
                field: "mark".into(),
                msg: format!("slot {slot} has no mark at position {pos}"),
            })
    }

    /// Where a new mark of `slot` at `pos` goes: the mark already there, a free one, else the
    /// least recently used.
    fn take(&mut self, slot: usize, pos: usize) -> usize {
        let n = self.per_slot;
        let i = (slot * n..(slot + 1) * n)
            .find(|&i| self.pos[i] == Some(pos))
            .or_else(|| (slot * n..(slot + 1) * n).find(|&i| self.pos[i].is_none()))
            .or_else(|| (slot * n..(slot + 1) * n).min_by_key(|&i| self.used[i]))
            .unwrap_or(slot * n);
        self.pos[i] = Some(pos);
        self.touch(i);
        i
    }

    fn touch(&mut self, i: usize) {
        self.clock += 1;
        self.used[i] = self.clock;
    }
}

impl HybridModel {
    /// One mark per slot of `st` (as much memory as its recurrent states).
    pub fn new_marks<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
    ) -> Result<RecurrentMarks, ModelError> {
        self.new_marks_per_slot(b, st, 1)
    }

    /// `per_slot` (at least 1) marks per slot of `st`.
    pub fn new_marks_per_slot<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        per_slot: usize,
    ) -> Result<RecurrentMarks, ModelError> {
        let per_slot = per_slot.max(1);
        let n = st
            .slots
            .checked_mul(per_slot)
            .ok_or_else(|| ModelError::Config {
                field: "marks".into(),
                msg: format!("{per_slot} marks for each of {} slots", st.slots),
            })?;
        let (conv_len, delta_len) = self.recurrent_lens();
        let mut layers = Vec::new();
        for l in &st.layers {
            if let LayerState::DeltaNet { .. } = l {
                layers.push([
                    b.alloc_f32((n * conv_len).max(1))?,
                    b.alloc_f32((n * delta_len).max(1))?,
                ]);
            }
        }
        Ok(RecurrentMarks {
            layers,
            per_slot,
            pos: vec![None; n],
            used: vec![0; n],
            clock: 0,
        })
    }

    /// The recurrent parts of `slot` of `st` and of mark `mark` of `marks`: (state tensor,
    /// its offset, mark tensor, its offset, length).
    fn mark_parts(
        &self,
        st: &HybridState,
        marks: &RecurrentMarks,
        slot: usize,
        mark: usize,
    ) -> Result<Vec<MarkPart>, ModelError> {
        if slot >= st.slots
            || marks.pos.len() != st.slots * marks.per_slot
            || mark / marks.per_slot != slot
        {
            return Err(ModelError::Config {
                field: "mark".into(),
                msg: format!(
                    "mark {mark} of slot {slot} in a {}-slot state with {} marks",
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
            parts.push((conv, slot * conv_len, *mc, mark * conv_len, conv_len));
            parts.push((delta, slot * delta_len, *md, mark * delta_len, delta_len));
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
        let pos = st.next.get(slot).map_or(0, |n| n.get());
        // Checked before a mark is claimed.
        self.mark_parts(st, marks, slot, slot * marks.per_slot)?;
        let k = marks.take(slot, pos);
        for (state, off, mark, mark_off, len) in self.mark_parts(st, marks, slot, k)? {
            if len > 0 {
                b.copy(state, off, mark, mark_off, len)?;
            }
        }
        Ok(())
    }

    /// Starts slot `to` from slot `from`'s mark at `pos`: `from`'s KV rows before it (attention
    /// layers, in the state's type) and its marked recurrent states are copied into `to`, whose
    /// marks become that one alone. `from` may be running: its rows before the mark never
    /// change.
    pub fn restore_mark_from<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        from: usize,
        pos: usize,
        to: usize,
        marks: &mut RecurrentMarks,
    ) -> Result<(), ModelError> {
        if from == to {
            return self.restore_mark(b, st, to, pos, marks);
        }
        let k = marks.find(from, pos)?;
        marks.touch(k);
        let src = self.mark_parts(st, marks, from, k)?;
        self.mark_parts(st, marks, to, to * marks.per_slot)?;
        marks.forget(to);
        let k_to = marks.take(to, pos);
        let dst = self.mark_parts(st, marks, to, k_to)?;
        for ((_, _, mark, mark_off, len), (state, off_to, mark_to, mark_off_to, _)) in
            src.into_iter().zip(dst)
        {
            if len > 0 {
                b.copy(mark, mark_off, state, off_to, len)?;
                b.copy(mark, mark_off, mark_to, mark_off_to, len)?;
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
        st.next[to].set(pos);
        Ok(())
    }

    /// Copies slot `from`'s mark at `pos` of (`st`, `marks`) with its KV rows before it into
    /// slot `to` of (`dst`, `dst_marks`), a state of this model with the same capacity and
    /// cache types (a prefix store's), whose marks become that one alone; with `resume`, `to`'s
    /// recurrent state is set to the mark too and it continues from there.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_mark<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        marks: &mut RecurrentMarks,
        from: usize,
        pos: usize,
        dst: &HybridState,
        dst_marks: &mut RecurrentMarks,
        to: usize,
        resume: bool,
    ) -> Result<(), ModelError> {
        let shape_err = |msg: String| ModelError::Config {
            field: "mark copy".into(),
            msg,
        };
        if dst.layers.len() != st.layers.len()
            || dst.capacity != st.capacity
            || (dst.dtype, dst.v_dtype, dst.rot) != (st.dtype, st.v_dtype, st.rot)
        {
            return Err(shape_err(
                "states of one model with the same capacity and cache types needed".into(),
            ));
        }
        let k = marks.find(from, pos)?;
        marks.touch(k);
        let src = self.mark_parts(st, marks, from, k)?;
        self.mark_parts(dst, dst_marks, to, to * dst_marks.per_slot)?;
        dst_marks.forget(to);
        let k_to = dst_marks.take(to, pos);
        let to_parts = self.mark_parts(dst, dst_marks, to, k_to)?;
        for ((_, _, mark, mark_off, len), (state, off_to, mark_to, mark_off_to, _)) in
            src.into_iter().zip(to_parts)
        {
            if len > 0 {
                if resume {
                    b.copy(mark, mark_off, state, off_to, len)?;
                }
                b.copy(mark, mark_off, mark_to, mark_off_to, len)?;
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
        if resume {
            dst.next[to].set(pos);
        }
        Ok(())
    }

    /// Device bytes one slot of `st` takes with `marks` marks: the attention layers' KV rows
    /// and the Gated DeltaNet layers' recurrent states (the state and each mark).
    pub fn slot_bytes(&self, st: &HybridState, marks: usize) -> u64 {
        let (conv_len, delta_len) = self.recurrent_lens();
        let values = (st.stride * self.cfg.kv_dim()) as u64;
        st.layers
            .iter()
            .map(|l| match l {
                LayerState::Attention { .. } => st.dtype.bytes(values) + st.v_dtype.bytes(values),
                LayerState::DeltaNet { .. } => {
                    (1 + marks as u64) * 4 * (conv_len + delta_len) as u64
                }
            })
            .sum()
    }

    /// Puts `slot`'s mark at `pos` back: the slot continues from there; its marks past `pos`
    /// are dropped (the rows after it are about to be rewritten). Valid while the slot's KV
    /// rows before `pos` were not rewritten (see [`RecurrentMarks::forget_after`]).
    pub fn restore_mark<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        slot: usize,
        pos: usize,
        marks: &mut RecurrentMarks,
    ) -> Result<(), ModelError> {
        let k = marks.find(slot, pos)?;
        marks.touch(k);
        for (state, off, mark, mark_off, len) in self.mark_parts(st, marks, slot, k)? {
            if len > 0 {
                b.copy(mark, mark_off, state, off, len)?;
            }
        }
        marks.forget_after(slot, pos);
        st.next[slot].set(pos);
        Ok(())
    }
}
