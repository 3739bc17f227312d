//! Dense models: where a starting slot's prefix comes from (its own rows, another slot's, a
//! stored conversation's), and KV memory on demand (`KvSharing::OnDemand`): a slot's blocks are
//! bound as its positions need them, and when the page budget is spent the least recently used
//! idle slots give theirs back (their cached conversations are forgotten).

use vkllm_models::{KvSharing, ModelError};

use super::{Net, SlotGenerator};
use crate::error::EngineError;
use crate::generator::{best_source, common_prefix};
use crate::prefix_store::{StoreRows, copy_blocks};

/// Rows a slot's KV memory grows by at a time on demand (whole blocks; fewer binds, each of
/// which waits for the GPU to be idle).
pub const KV_GROW_ROWS: usize = 256;

/// Where a dense slot's prefix comes from.
#[derive(Clone, Copy)]
enum Source {
    /// Stored entry `e`: its first `r` rows, written by forwards up to `written`.
    Store { e: usize, r: usize, written: usize },
    /// Slot `t`'s first `r` rows.
    Slot { t: usize, r: usize },
    /// The slot's own rows.
    Own,
}

impl SlotGenerator {
    /// Gives dense slot `slot` the longest reusable prefix of `prompt` (its own `reuse` rows,
    /// another slot's, busy ones included, or `stored`'s), with KV memory for the rows the
    /// prompt writes when the cache binds it on demand; returns the rows reused and, when they
    /// came from elsewhere, how far their source's forwards wrote.
    pub(super) fn take_dense_prefix(
        &mut self,
        slot: usize,
        reuse: usize,
        prompt: &[u32],
        stored: Option<(usize, usize, usize)>,
    ) -> Result<(usize, Option<usize>), EngineError> {
        let Net::Dense { kv, .. } = &self.net else {
            return Ok((reuse, None));
        };
        let best = best_source(self.slots.len(), slot, reuse, |t| {
            let sl = &self.slots[t];
            let common = common_prefix(&sl.history, prompt).min(prompt.len() - 1);
            kv.reusable(sl.written, common)
        });
        // The stored conversation when it gives more than any slot.
        let floor = best.map_or(reuse, |(_, r)| r.max(reuse));
        let dense_store = matches!(
            self.store.as_ref().map(|s| &s.rows),
            Some(StoreRows::Dense { .. })
        );
        let source = match (stored.filter(|&(_, r, _)| r > floor), best) {
            (Some((e, r, written)), _) if dense_store => Source::Store { e, r, written },
            (_, Some((t, r))) => Source::Slot { t, r },
            _ => Source::Own,
        };
        if kv.sharing() == KvSharing::OnDemand {
            self.reserve_start(slot, reuse, prompt.len(), source)?;
        }
        let Net::Dense { kv, .. } = &self.net else {
            return Ok((reuse, None));
        };
        let (reuse, copied) = match source {
            Source::Store { e, r, written } => {
                let Some(st) = self.store.as_mut() else {
                    return Ok((reuse, None));
                };
                let StoreRows::Dense { pool, .. } = &st.rows else {
                    return Ok((reuse, None));
                };
                let kept = kv.rows_kept(r, written);
                let blocks = st.blocks(e);
                let shared = copy_blocks(&mut self.b, kv, slot, pool, blocks, &kept, false)?;
                self.kv_rows_shared += shared as u64;
                self.clock += 1;
                st.touch(e, self.clock);
                (r, Some(written))
            }
            Source::Slot { t, r } => {
                let written = self.slots[t].written;
                let shared = kv.copy_prefix(&mut self.b, t, kv, slot, r, written)?;
                self.kv_rows_shared += shared as u64;
                (r, Some(written))
            }
            Source::Own => (reuse, None),
        };
        // Paged layers: the blocks the prompt writes are the slot's own (copy-on-write).
        let pages = kv.own_from(&mut self.b, slot, reuse)?;
        self.kv_pages_copied += pages as u64;
        Ok((reuse, copied))
    }

    /// On demand, before a prompt of `len` tokens starts in `slot`: its blocks past what it
    /// keeps are given back, then memory is bound for the rows the prompt writes (from the
    /// last whole block a shared source gives, or the slot's own `reuse`), and the block
    /// holding `reuse` is made the slot's own (copy-on-write), reclaiming idle slots (never
    /// the source) when the budget is spent. Nothing of the source moves before this succeeds.
    fn reserve_start(
        &mut self,
        slot: usize,
        reuse: usize,
        len: usize,
        source: Source,
    ) -> Result<(), EngineError> {
        let Net::Dense { kv, .. } = &self.net else {
            return Ok(());
        };
        let block = kv.block.max(1);
        // A store pool paged like the cache gives its whole blocks in place; others copy.
        let pool_alike = matches!(
            self.store.as_ref().map(|s| &s.rows),
            Some(StoreRows::Dense { pool, .. })
                if pool.block == kv.block && pool.sharing() != KvSharing::Copy
        );
        let (keep, from, protect) = match source {
            Source::Store { r, .. } if pool_alike => (0, r / block * block, None),
            Source::Store { .. } => (0, 0, None),
            Source::Slot { t, r } => (0, r / block * block, Some(t)),
            Source::Own => (reuse, reuse, None),
        };
        kv.release_rows(&mut self.b, slot, keep)?;
        self.slots[slot].bound_to = 0;
        let target = self.grow_target(len);
        self.with_room(slot, protect, |g| {
            let Net::Dense { kv, .. } = &g.net else {
                return Ok(());
            };
            kv.bind_rows(&mut g.b, slot, from, target)?;
            if matches!(source, Source::Own) {
                g.kv_pages_copied += kv.own_from(&mut g.b, slot, reuse)? as u64;
            }
            Ok(())
        })?;
        self.slots[slot].bound_to = target;
        Ok(())
    }

    /// On demand, before a submit of `steps` decode steps: every live slot has memory for the
    /// rows those steps write. A slot for which none is left even after every idle slot gave
    /// its back is stopped and returned (its request ends as if its context were full).
    pub(super) fn reserve_steps(&mut self, steps: usize) -> Result<Vec<usize>, EngineError> {
        let on_demand = matches!(&self.net, Net::Dense { kv, .. } if kv.on_demand);
        let mut stopped = Vec::new();
        if !on_demand {
            return Ok(stopped);
        }
        for s in 0..self.slots.len() {
            let sl = &self.slots[s];
            let need = sl.history.len() + steps;
            if sl.next.is_none() || need <= sl.bound_to {
                continue;
            }
            let from = sl.bound_to.min(sl.history.len());
            let target = self.grow_target(need);
            let r = self.with_room(s, None, |g| {
                let Net::Dense { kv, .. } = &g.net else {
                    return Ok(());
                };
                kv.bind_rows(&mut g.b, s, from, target).map(drop)?;
                Ok(())
            });
            match r {
                Ok(()) => self.slots[s].bound_to = target,
                Err(EngineError::Model(ModelError::KvPagesFull { .. })) => {
                    eprintln!(
                        "vkllm: KV memory is full: the request in slot {s} ends at {} tokens",
                        self.slots[s].history.len()
                    );
                    stopped.push(s);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(stopped)
    }

    /// Rows to bind for a need of `rows`: whole [`KV_GROW_ROWS`] steps, at most the context.
    fn grow_target(&self, rows: usize) -> usize {
        rows.next_multiple_of(self.kv_grow.max(1))
            .min(self.ctx.max(rows))
    }

    /// Runs `f` (which binds nothing when it fails for want of pages), giving back the KV
    /// memory of the least recently used idle slot (not `slot`, not `protect`) and retrying
    /// while it fails with [`ModelError::KvPagesFull`] and an idle slot holds memory.
    fn with_room(
        &mut self,
        slot: usize,
        protect: Option<usize>,
        mut f: impl FnMut(&mut Self) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        loop {
            match f(self) {
                Err(EngineError::Model(ModelError::KvPagesFull { .. }))
                    if self.reclaim(slot, protect)? => {}
                r => return r,
            }
        }
    }

    /// Gives back the KV memory of the least recently used idle slot but `slot` and `protect`
    /// that holds a conversation; false when there is none.
    fn reclaim(&mut self, slot: usize, protect: Option<usize>) -> Result<bool, EngineError> {
        let victim = (0..self.slots.len())
            .filter(|&t| t != slot && Some(t) != protect)
            .filter(|&t| {
                let s = &self.slots[t];
                s.next.is_none() && s.pending.is_none() && (s.bound_to > 0 || s.written > 0)
            })
            .min_by_key(|&t| self.slots[t].last_used);
        let (Some(t), Net::Dense { kv, .. }) = (victim, &self.net) else {
            return Ok(false);
        };
        kv.release_rows(&mut self.b, t, 0)?;
        let s = &mut self.slots[t];
        s.history.clear();
        s.written = 0;
        s.bound_to = 0;
        self.kv_slots_reclaimed += 1;
        Ok(true)
    }
}
