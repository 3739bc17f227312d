//! Conversations kept past their slots (the batched GPU decoder): when a free slot is taken by a
//! prompt that does not continue what the slot holds, its rows are first copied into the store;
//! a later prompt that shares a prefix with a stored conversation copies those rows back instead
//! of recomputing them. Dense models store rows in a pool of [`BLOCK`]-row blocks, an entry
//! taking as many as its conversation needs (the least recently used entries make room); hybrid
//! entries have the shape of one slot (`HybridModel::copy_mark`: the slot's recurrent mark, the
//! state at the end of its last prompt, with the KV rows before it), as many as the byte budget
//! holds. Rows are copied, not shared in place (no block table yet).

use std::cmp::Reverse;

use vkllm_models::hybrid::{HybridState, RecurrentMarks};
use vkllm_models::{Backend, KvCache, KvPagePlan, ModelError};

/// Histories shorter than this are not worth an entry (tokens).
pub(crate) const STORE_MIN: usize = 16;

/// An entry all of whose tokens but at most this many another history holds is stale: a
/// conversation's earlier turn, its answer re-tokenized (or re-rendered) a little differently
/// in the next prompt.
pub(crate) const STALE_TAIL: usize = 64;

/// Whether `newer` holds all of `entry` but at most [`STALE_TAIL`] tokens at its end (and at
/// least half of it, so that a short entry is not covered by any history at all).
pub(crate) fn covers_most(newer: &[u32], entry: &[u32]) -> bool {
    let common = crate::generator::common_prefix(newer, entry);
    common + STALE_TAIL >= entry.len() && 2 * common >= entry.len()
}

/// Rows per block of a dense store (a multiple of `KV_ROW_ALIGN`, so a block is one slot of the
/// pool's cache).
pub const BLOCK: usize = vkllm_models::KV_ROW_ALIGN;

/// Where the entries' rows live.
pub(crate) enum StoreRows {
    /// Dense models: a pool of blocks (the slots of a cache of `BLOCK` positions, no rings),
    /// `free` the unused ones in ascending order (taken lowest first, so an entry's blocks are
    /// mostly consecutive and copy as runs).
    Dense { pool: KvCache, free: Vec<usize> },
    /// A hybrid entry holds a mark (its history is exactly the marked tokens).
    Hybrid {
        st: HybridState,
        marks: RecurrentMarks,
    },
}

pub(crate) struct PrefixStore {
    pub(crate) rows: StoreRows,
    entries: Vec<Entry>,
    bytes: u64,
}

/// A stored conversation: `history` (empty: a free entry) from position 0, `written` as the
/// slot it came from had written (what its sliding-window rings hold, `KvCache::reusable`);
/// a dense entry's rows are in `blocks` (block `j` holds rows `j * BLOCK ..` of every layer).
#[derive(Default)]
struct Entry {
    history: Vec<u32>,
    written: usize,
    last_used: u64,
    blocks: Vec<usize>,
}

impl PrefixStore {
    pub(crate) fn new(rows: StoreRows, bytes: u64) -> Self {
        // A dense store's entries come and go with its blocks.
        let n = match &rows {
            StoreRows::Dense { .. } => 0,
            StoreRows::Hybrid { st, .. } => st.slots,
        };
        let entries = (0..n).map(|_| Entry::default()).collect();
        PrefixStore {
            rows,
            entries,
            bytes,
        }
    }

    /// Device bytes the entries take.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Entries a hybrid store holds; a dense store's blocks.
    pub(crate) fn len(&self) -> usize {
        match &self.rows {
            StoreRows::Dense { pool, .. } => pool.slots,
            StoreRows::Hybrid { .. } => self.entries.len(),
        }
    }

    /// Conversations stored now.
    pub(crate) fn stored(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| !e.history.is_empty())
            .count()
    }

    /// The blocks of dense entry `i` (empty for hybrid entries).
    pub(crate) fn blocks(&self, i: usize) -> &[usize] {
        self.entries.get(i).map_or(&[], |e| &e.blocks[..])
    }

    /// A dense entry for `history` with `need` blocks taken from the pool: the entry of an
    /// earlier turn of it (superseded: `history` covers most of it, [`covers_most`]) or a new
    /// one, making room by dropping entries, never `except`: first those a slot holds anyway
    /// (`held`: a conversation read back into a slot and running there), then the least
    /// recently used. `None` (nothing dropped) when even then the blocks would not suffice,
    /// or on a hybrid store.
    pub(crate) fn take_blocks(
        &mut self,
        history: &[u32],
        need: usize,
        except: Option<usize>,
        held: impl Fn(&[u32]) -> bool,
    ) -> Option<usize> {
        let StoreRows::Dense { pool, free } = &mut self.rows else {
            return None;
        };
        let pinned: usize = except
            .and_then(|i| self.entries.get(i))
            .map_or(0, |e| e.blocks.len());
        if need == 0 || need > pool.slots - pinned {
            return None;
        }
        let release = |e: &mut Entry, free: &mut Vec<usize>| {
            free.append(&mut e.blocks);
            e.history.clear();
        };
        let earlier = self.entries.iter().enumerate().position(|(i, e)| {
            Some(i) != except && !e.history.is_empty() && covers_most(history, &e.history)
        });
        if let Some(i) = earlier {
            release(&mut self.entries[i], free);
        }
        while free.len() < need {
            let lru = self
                .entries
                .iter()
                .enumerate()
                .filter(|&(i, e)| Some(i) != except && !e.history.is_empty())
                .min_by_key(|&(i, e)| (!held(&e.history), e.last_used, i))
                .map(|(i, _)| i)?;
            release(&mut self.entries[lru], free);
        }
        free.sort_unstable();
        let blocks: Vec<usize> = free.drain(..need).collect();
        let i = match earlier {
            Some(i) => i,
            None => match self.entries.iter().position(|e| e.history.is_empty()) {
                Some(i) => i,
                None => {
                    self.entries.push(Entry::default());
                    self.entries.len() - 1
                }
            },
        };
        self.entries[i].blocks = blocks;
        Some(i)
    }

    /// The entry that gives a prompt more reusable tokens than `floor`, the most of any:
    /// (entry, tokens, its `written`); `reusable(history, written)` says what an entry gives.
    pub(crate) fn best(
        &self,
        reusable: impl Fn(&[u32], usize) -> usize,
        floor: usize,
    ) -> Option<(usize, usize, usize)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.history.is_empty())
            .map(|(i, e)| (i, reusable(&e.history, e.written), e.written))
            .filter(|&(_, r, _)| r > floor)
            .max_by_key(|&(i, r, _)| (r, Reverse(i)))
    }

    /// The longest prefix of `prompt` an entry's history shares.
    pub(crate) fn longest_common(&self, prompt: &[u32]) -> usize {
        self.entries
            .iter()
            .map(|e| crate::generator::common_prefix(&e.history, prompt))
            .max()
            .unwrap_or(0)
    }

    /// Whether an entry holds exactly `history` (a hybrid mark is usable only where it is).
    pub(crate) fn holds(&self, history: &[u32]) -> bool {
        self.entries.iter().any(|e| e.history == history)
    }

    /// Whether an entry holds `history` already (or a continuation of it).
    pub(crate) fn covers(&self, history: &[u32]) -> bool {
        self.entries.iter().any(|e| e.history.starts_with(history))
    }

    /// The hybrid entry `history` should go into: one holding an earlier turn of it (the new one
    /// supersedes it), else a free one, else the least recently used; never `except` (`None`
    /// when that leaves nothing).
    pub(crate) fn victim(&self, history: &[u32], except: Option<usize>) -> Option<usize> {
        let open = || {
            self.entries
                .iter()
                .enumerate()
                .filter(move |&(i, _)| Some(i) != except)
        };
        let earlier = open()
            .find(|(_, e)| !e.history.is_empty() && history.starts_with(&e.history))
            .map(|(i, _)| i);
        let free = || open().find(|(_, e)| e.history.is_empty()).map(|(i, _)| i);
        let lru = || {
            open()
                .min_by_key(|&(i, e)| (e.last_used, i))
                .map(|(i, _)| i)
        };
        earlier.or_else(free).or_else(lru)
    }

    /// Entry `i` now holds `history` (its rows were just copied in; a dense entry's into
    /// the blocks [`PrefixStore::take_blocks`] gave it).
    pub(crate) fn set(&mut self, i: usize, history: &[u32], written: usize, clock: u64) {
        if let Some(e) = self.entries.get_mut(i) {
            e.history = history.to_vec();
            e.written = written;
            e.last_used = clock;
        }
    }

    /// Entry `i` was just read.
    pub(crate) fn touch(&mut self, i: usize, clock: u64) {
        if let Some(e) = self.entries.get_mut(i) {
            e.last_used = clock;
        }
    }
}

/// Copies the first rows of `slot` of `kv` (`kept[l]` of layer `l`, [`KvCache::rows_kept`])
/// into an entry's `blocks` of the pool (`into_pool`) or back; consecutive blocks copy as one
/// run per layer; paged layers share whole KV blocks in place. Returns the rows shared in
/// place (most over the layers).
#[allow(clippy::too_many_arguments)]
pub(crate) fn copy_blocks<B: Backend>(
    b: &mut B,
    kv: &KvCache,
    slot: usize,
    pool: &KvCache,
    blocks: &[usize],
    kept: &[usize],
    into_pool: bool,
) -> Result<usize, ModelError> {
    // Every layer's page ops and copies in one plan: one page op of each kind in all.
    let mut plan = KvPagePlan::default();
    let mut shared = 0;
    for (l, &n) in kept.iter().enumerate() {
        let mut in_layer = 0;
        if n > blocks.len() * BLOCK {
            return Err(ModelError::Config {
                field: "prefix store".into(),
                msg: format!("layer {l}: {n} rows in {} blocks", blocks.len()),
            });
        }
        let mut j = 0;
        while j * BLOCK < n {
            let mut run = 1;
            while j + run < blocks.len() && blocks[j + run] == blocks[j] + run {
                run += 1;
            }
            let rows = (n - j * BLOCK).min(run * BLOCK);
            in_layer += if into_pool {
                kv.copy_layer_rows_into(&mut plan, l, slot, j * BLOCK, pool, blocks[j], 0, rows)?
            } else {
                pool.copy_layer_rows_into(&mut plan, l, blocks[j], 0, kv, slot, j * BLOCK, rows)?
            };
            j += run;
        }
        shared = shared.max(in_layer);
    }
    plan.run(b)?;
    Ok(shared)
}

/// Blocks an entry of a slot's first `rows` positions needs.
pub(crate) fn blocks_for(kv: &KvCache, rows: usize, written: usize) -> usize {
    kv.rows_kept(rows, written)
        .into_iter()
        .max()
        .unwrap_or(0)
        .div_ceil(BLOCK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkllm_models::{CpuBackend, KvType};

    fn none(_: &[u32]) -> bool {
        false
    }

    fn store(blocks: usize) -> PrefixStore {
        let mut b = CpuBackend::new();
        let pool =
            KvCache::alloc(&mut b, &[None, None], 8, BLOCK, 1, blocks, KvType::F32).expect("pool");
        let free = (0..blocks).collect();
        PrefixStore::new(StoreRows::Dense { pool, free }, 0)
    }

    #[test]
    fn blocks_go_to_new_turns_then_to_the_least_recently_used() {
        let mut s = store(4);
        let (a, b) = (vec![1, 2, 3], vec![7, 8]);
        let c: Vec<u32> = (100..300).collect();
        let e = s.take_blocks(&a, 2, None, none).expect("a");
        assert_eq!(s.blocks(e), &[0, 1]);
        s.set(e, &a, 3, 1);
        let f = s.take_blocks(&b, 1, None, none).expect("b");
        assert_eq!(s.blocks(f), &[2]);
        s.set(f, &b, 2, 2);
        // More than the pool, or than what `except` leaves: nothing is dropped.
        assert_eq!(s.take_blocks(&c, 5, None, none), None);
        assert_eq!(s.take_blocks(&c, 3, Some(e), none), None);
        assert_eq!((s.blocks(e), s.blocks(f)), (&[0, 1][..], &[2][..]));
        // A later turn of a replaces a's entry (its blocks come back first).
        let a2 = [&a[..], &[4, 5]].concat();
        let g = s.take_blocks(&a2, 2, None, none).expect("a2");
        assert_eq!((g, s.blocks(g)), (e, &[0, 1][..]));
        s.set(g, &a2, 5, 3);
        // Two blocks for c, one free: b goes (a2 is protected) and its entry takes c.
        assert_eq!(s.take_blocks(&c, 2, Some(g), none), Some(f));
        assert_eq!(s.blocks(f), &[2, 3]);
        assert_eq!(s.blocks(g), &[0, 1]);
        s.set(f, &c, 200, 4);
        // c's next turn with its last token re-tokenized still supersedes c's entry; a history
        // sharing only c's first half does not.
        let half = [&c[..100], &[7; 60]].concat();
        assert!(!covers_most(&half, &c));
        let c2 = [&c[..199], &[777], &[5; 40]].concat();
        assert_eq!(s.take_blocks(&c2, 1, None, none), Some(f));
        assert_eq!(s.blocks(f), &[2]);
        s.set(f, &c2, 240, 5);
        // A conversation a slot runs goes before the least recently used one: a2 (used at 3,
        // held) makes way for d rather than c2 (used at 5, not held).
        let d = vec![11];
        let held = |h: &[u32]| h == &a2[..];
        assert_eq!(s.take_blocks(&d, 2, None, held), Some(g));
        assert_eq!((s.blocks(g), s.blocks(f)), (&[0, 1][..], &[2][..]));
    }
}
