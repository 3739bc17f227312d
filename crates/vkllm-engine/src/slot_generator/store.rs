//! The slot generator's prefix store (`serve --prefix-cache-mb`): sizing it, and a free
//! slot's conversation copied into it before the slot is overwritten (`prefix_store.rs` keeps
//! the entries; `claim` reads them back).

use vkllm_models::{KvCache, KvSharing, KvTypes};

use super::{Net, SlotGenerator};
use crate::error::EngineError;
use crate::generator::SlotId;
use crate::prefix_store::{
    BLOCK, PrefixStore, STORE_MIN, StoreRows, blocks_for, copy_blocks, covers_most,
};

impl SlotGenerator {
    /// Keeps conversations past their slots in up to `budget` bytes of device memory: a dense
    /// model's in `budget / `[`SlotGenerator::prefix_block_bytes`] blocks of [`BLOCK`]
    /// positions, each conversation taking its rows' blocks; a hybrid's as entries of one
    /// slot's rows with its recurrent mark ([`SlotGenerator::prefix_entry_bytes`]), `budget /
    /// that` of them. Fails with the cache's out-of-memory error when the device cannot hold
    /// them.
    pub fn with_prefix_store(mut self, budget: u64) -> Result<Self, EngineError> {
        let per = match &self.net {
            Net::Dense { .. } => self.prefix_block_bytes(),
            Net::Hybrid { .. } => self.prefix_entry_bytes(),
        };
        let entries = budget.checked_div(per).unwrap_or(0) as usize;
        if entries == 0 {
            return Ok(self);
        }
        let rows = match &self.net {
            Net::Dense { model, kv } => {
                let types = KvTypes {
                    k: kv.dtype,
                    v: kv.v_dtype,
                };
                let none = vec![None; kv.layers.len()];
                let kv_dim = model.cfg.kv_dim();
                // Paged like the slots' cache where its blocks divide BLOCK: conversations go
                // in and out in place.
                let shape = (kv_dim, BLOCK, 1, entries);
                // The pool is resident: its budget is its own, not the on-demand slots'.
                let sharing = match kv.sharing() {
                    KvSharing::OnDemand => KvSharing::InPlace,
                    s => s,
                };
                let mut pool = KvCache::alloc_sharing(&mut self.b, &none, shape, types, sharing)?;
                pool.rot = kv.rot;
                StoreRows::Dense {
                    pool,
                    free: (0..entries).collect(),
                }
            }
            Net::Hybrid { model, st, .. } => {
                let types = KvTypes {
                    k: st.dtype,
                    v: st.v_dtype,
                };
                let sst = model.new_state_kv(&mut self.b, st.capacity, entries, types)?;
                let marks = model.new_marks(&mut self.b, &sst)?;
                StoreRows::Hybrid { st: sst, marks }
            }
        };
        self.store = Some(PrefixStore::new(rows, per * entries as u64));
        Ok(self)
    }

    /// Device bytes of one block of a dense prefix store ([`BLOCK`] positions of every layer's
    /// keys and values; 0 for hybrid models, whose entries are whole slots).
    pub fn prefix_block_bytes(&self) -> u64 {
        match &self.net {
            Net::Dense { model, kv } => {
                let types = KvTypes {
                    k: kv.dtype,
                    v: kv.v_dtype,
                };
                let none = vec![None; kv.layers.len()];
                KvCache::bytes_for(&none, model.cfg.kv_dim(), BLOCK, 1, 1, types)
            }
            Net::Hybrid { .. } => 0,
        }
    }

    /// Device bytes a stored conversation of the whole context takes: one slot of the cache (a
    /// hybrid's with its recurrent state and mark; 0 when the model has no room for marks). A
    /// dense store keeps shorter conversations in fewer bytes (blocks of [`BLOCK`] positions).
    pub fn prefix_entry_bytes(&self) -> u64 {
        match &self.net {
            Net::Dense { model, kv } => kv.slot_bytes(model.cfg.kv_dim()),
            Net::Hybrid {
                model,
                st,
                marks: Some(_),
            } => model.slot_bytes(st, 1),
            Net::Hybrid { marks: None, .. } => 0,
        }
    }

    /// Conversations of the whole context the prefix store holds at least (0: no store); a
    /// dense store holds more of shorter ones ([`SlotGenerator::prefix_store_rows`]).
    pub fn prefix_store_entries(&self) -> usize {
        match (&self.net, &self.store) {
            (_, None) => 0,
            (Net::Dense { kv, .. }, Some(st)) => {
                st.len() / blocks_for(kv, kv.capacity, kv.capacity).max(1)
            }
            (Net::Hybrid { .. }, Some(st)) => st.len(),
        }
    }

    /// Conversations the prefix store holds now (0 without one).
    pub fn prefix_store_conversations(&self) -> usize {
        self.store.as_ref().map_or(0, PrefixStore::stored)
    }

    /// Positions a dense prefix store holds in all (its blocks; 0 without one or for hybrid
    /// models, whose entries are whole slots).
    pub fn prefix_store_rows(&self) -> usize {
        match (&self.net, &self.store) {
            (Net::Dense { .. }, Some(st)) => st.len() * BLOCK,
            _ => 0,
        }
    }

    /// Before a free `slot` is overwritten past its first `keep` positions: its conversation
    /// goes into the store (not into entry `reading`, about to be copied into the slot) unless
    /// the store or another slot holds it already, or it is short.
    pub(super) fn store_slot(
        &mut self,
        slot: SlotId,
        keep: usize,
        reading: Option<usize>,
    ) -> Result<(), EngineError> {
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        let sl = &self.slots[slot];
        // What the slot would lose: a dense slot its whole history, a hybrid one its mark (the
        // tokens before it, exactly: a mark is usable only where it is).
        let (hist, written) = match &self.net {
            Net::Dense { .. } => (&sl.history[..], sl.written),
            Net::Hybrid { marks: Some(m), .. } => match m.pos(slot) {
                Some(p) if p <= sl.history.len() => (&sl.history[..p], p),
                _ => return Ok(()),
            },
            Net::Hybrid { marks: None, .. } => return Ok(()),
        };
        let held_elsewhere = match &self.net {
            Net::Dense { .. } => {
                store.covers(hist)
                    || (0..self.slots.len())
                        .any(|t| t != slot && self.slots[t].history.starts_with(hist))
            }
            Net::Hybrid { marks, .. } => {
                store.holds(hist)
                    || (0..self.slots.len()).any(|t| {
                        t != slot
                            && marks.as_ref().is_some_and(|m| m.has(t, hist.len()))
                            && self.slots[t].history.starts_with(hist)
                    })
            }
        };
        // A dense slot goes on holding its first `keep` rows: a history it mostly keeps (the
        // same conversation's next turn) would be a stale entry at once, and a whole copy.
        let kept_most = matches!(self.net, Net::Dense { .. })
            && covers_most(&hist[..keep.min(hist.len())], hist);
        if hist.len() < STORE_MIN || keep >= hist.len() || kept_most || held_elsewhere {
            return Ok(());
        }
        let e = match &self.net {
            Net::Dense { kv, .. } => {
                let need = blocks_for(kv, hist.len(), written);
                let slots = &self.slots;
                let held = |h: &[u32]| {
                    (0..slots.len()).any(|t| t != slot && covers_most(&slots[t].history, h))
                };
                store.take_blocks(hist, need, reading, held)
            }
            Net::Hybrid { .. } => store.victim(hist, reading),
        };
        let Some(e) = e else {
            return Ok(());
        };
        let blocks = store.blocks(e).to_vec();
        match (&mut self.net, &mut store.rows) {
            (Net::Dense { kv, .. }, StoreRows::Dense { pool, .. }) => {
                let kept = kv.rows_kept(hist.len(), written);
                let shared = copy_blocks(&mut self.b, kv, slot, pool, &blocks, &kept, true)?;
                self.kv_rows_shared += shared as u64;
            }
            (
                Net::Hybrid {
                    model,
                    st,
                    marks: Some(m),
                },
                StoreRows::Hybrid { st: sst, marks: sm },
            ) => {
                model.copy_mark(&mut self.b, st, m, slot, hist.len(), sst, sm, e, false)?;
            }
            _ => return Ok(()),
        }
        self.clock += 1;
        store.set(e, hist, written, self.clock);
        Ok(())
    }
}
