//! Snapshots of a sequence's state at a token boundary: the KV rows written so far and the
//! recurrent states (conv history + delta-rule matrix), copied on the device into tensors of
//! their own ([`Snapshot`]) or onto the host ([`HostSnapshot`]), and restored into any state of
//! the same model (another slot of the same state or another state, or the same slot after it
//! moved on). Restoring gives back the
//! exact bits, so a continuation from a restored state equals the uninterrupted one: the base of
//! a prefix cache and of speculative decoding.
//!
//! Only positions `0..pos` of each KV cache are copied; rows past `pos` in the restored state
//! keep whatever they held (attention never reads past the current position, and the next
//! forward writes them).

use crate::backend::{Backend, KvType, Tensor};
use crate::error::ModelError;
use crate::hybrid::forward::{HybridModel, HybridState, LayerState};

/// A state's contents at position `pos`, in tensors of the backend.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Tokens the state had seen (its next position).
    pub pos: usize,
    /// The KV element type of the state it came from (restored only into one of the same).
    pub dtype: KvType,
    /// Per layer, the copied tensors and how many values each holds.
    layers: Vec<[(Tensor, usize); 2]>,
}

/// A state's contents at position `pos`, on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct HostSnapshot {
    pub pos: usize,
    /// Per layer: keys and values (`pos * kv_dim` each), or conv history and delta state.
    pub layers: Vec<[Vec<f32>; 2]>,
}

/// One copied part of a slot's state: the tensor, the offset of the slot's values, how many,
/// and their type (KV rows in the state's dtype, recurrent states f32).
type Part = (Tensor, usize, usize, KvType);

impl HybridModel {
    /// The parts of `slot` of `st` a snapshot at `pos` copies.
    fn parts(&self, st: &HybridState, slot: usize, pos: usize) -> Vec<[Part; 2]> {
        let w = self.cfg.kv_dim();
        let (conv_len, delta_len) = self.recurrent_lens();
        st.layers
            .iter()
            .map(|l| match *l {
                LayerState::Attention { k, v } => {
                    let off = slot * st.stride * w;
                    [(k, off, pos * w, st.dtype), (v, off, pos * w, st.v_dtype)]
                }
                LayerState::DeltaNet { conv, delta } => [
                    (conv, slot * conv_len, conv_len, KvType::F32),
                    (delta, slot * delta_len, delta_len, KvType::F32),
                ],
            })
            .collect()
    }

    /// Copies slot 0 of `st` (at its current position) into new tensors on the backend.
    pub fn snapshot<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
    ) -> Result<Snapshot, ModelError> {
        self.snapshot_slot(b, st, 0)
    }

    /// Copies `slot` of `st` (at its position `st.next[slot]`) into new tensors.
    pub fn snapshot_slot<B: Backend>(
        &self,
        b: &mut B,
        st: &HybridState,
        slot: usize,
    ) -> Result<Snapshot, ModelError> {
        self.check_slot_of(st, slot)?;
        let pos = st.next[slot].get();
        let mut layers = Vec::with_capacity(st.layers.len());
        for part in self.parts(st, slot, pos) {
            let mut copy = [(Tensor::from_index(0), 0); 2];
            for (dst, (src, off, len, dtype)) in copy.iter_mut().zip(part) {
                let t = b.alloc_kv(len.max(2), dtype)?;
                if len > 0 {
                    b.copy_kv(src, off, t, 0, len, dtype)?;
                }
                *dst = (t, len);
            }
            layers.push(copy);
        }
        Ok(Snapshot {
            pos,
            dtype: st.dtype,
            layers,
        })
    }

    /// Makes slot 0 of `st` hold `snap`'s contents and continue from `snap.pos`.
    pub fn restore<B: Backend>(
        &self,
        b: &mut B,
        snap: &Snapshot,
        st: &HybridState,
    ) -> Result<(), ModelError> {
        self.restore_slot(b, snap, st, 0)
    }

    /// Makes `slot` of `st` hold `snap`'s contents and continue from `snap.pos`. `st` may be
    /// the state the snapshot came from or any other state of this model with room for
    /// `snap.pos` tokens, and `slot` any of its slots.
    pub fn restore_slot<B: Backend>(
        &self,
        b: &mut B,
        snap: &Snapshot,
        st: &HybridState,
        slot: usize,
    ) -> Result<(), ModelError> {
        self.check_slot_of(st, slot)?;
        self.check_fits(snap.pos, snap.layers.len(), st)?;
        if snap.dtype != st.dtype {
            return Err(ModelError::Config {
                field: "snapshot".into(),
                msg: format!(
                    "a snapshot of an {} KV cache restored into an {} one",
                    snap.dtype.name(),
                    st.dtype.name()
                ),
            });
        }
        let parts = self.parts(st, slot, snap.pos);
        for (i, (part, copy)) in parts.iter().zip(&snap.layers).enumerate() {
            for (&(_, _, want, _), &(_, len)) in part.iter().zip(copy) {
                if want != len {
                    return Err(ModelError::Config {
                        field: "snapshot".into(),
                        msg: format!("layer {i}: {len} values, this model's state holds {want}"),
                    });
                }
            }
        }
        for (part, copy) in parts.into_iter().zip(&snap.layers) {
            for ((dst, off, _, dtype), &(src, len)) in part.into_iter().zip(copy) {
                if len > 0 {
                    b.copy_kv(src, 0, dst, off, len, dtype)?;
                }
            }
        }
        st.next[slot].set(snap.pos);
        Ok(())
    }

    fn check_slot_of(&self, st: &HybridState, slot: usize) -> Result<(), ModelError> {
        if slot >= st.slots {
            return Err(ModelError::Config {
                field: "slot".into(),
                msg: format!("slot {slot} of a {}-slot state", st.slots),
            });
        }
        Ok(())
    }

    /// Reads a snapshot back to the host.
    pub fn snapshot_to_host<B: Backend>(
        &self,
        b: &mut B,
        snap: &Snapshot,
    ) -> Result<HostSnapshot, ModelError> {
        if snap.dtype != KvType::F32 {
            return Err(ModelError::Unsupported(format!(
                "host snapshots of an {} KV cache (f32 only)",
                snap.dtype.name()
            )));
        }
        let mut layers = Vec::with_capacity(snap.layers.len());
        for copy in &snap.layers {
            let mut host: [Vec<f32>; 2] = Default::default();
            for (h, &(t, len)) in host.iter_mut().zip(copy) {
                *h = vec![0f32; len];
                b.read_f32(t, 0, h)?;
            }
            layers.push(host);
        }
        Ok(HostSnapshot {
            pos: snap.pos,
            layers,
        })
    }

    /// Uploads a host snapshot (to restore it with [`HybridModel::restore`]).
    pub fn snapshot_from_host<B: Backend>(
        &self,
        b: &mut B,
        host: &HostSnapshot,
    ) -> Result<Snapshot, ModelError> {
        let mut layers = Vec::with_capacity(host.layers.len());
        for h in &host.layers {
            let mut copy = [(Tensor::from_index(0), 0); 2];
            for (dst, data) in copy.iter_mut().zip(h) {
                let t = if data.is_empty() {
                    b.alloc_f32(1)?
                } else {
                    b.upload_f32(data)?
                };
                *dst = (t, data.len());
            }
            layers.push(copy);
        }
        Ok(Snapshot {
            pos: host.pos,
            dtype: KvType::F32,
            layers,
        })
    }

    fn check_fits(&self, pos: usize, n_layers: usize, st: &HybridState) -> Result<(), ModelError> {
        if n_layers != st.layers.len() {
            return Err(ModelError::Config {
                field: "snapshot".into(),
                msg: format!(
                    "snapshot of {n_layers} layers restored into a state of {}",
                    st.layers.len()
                ),
            });
        }
        if pos > st.capacity {
            return Err(ModelError::ContextFull {
                pos,
                capacity: st.capacity,
            });
        }
        Ok(())
    }
}
