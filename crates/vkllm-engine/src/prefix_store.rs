//! Conversations kept past their slots (the batched GPU decoder): when a free slot is taken by a
//! prompt that does not continue what the slot holds, its rows are first copied into a store
//! entry; a later prompt that starts with a stored conversation copies those rows back instead of
//! recomputing them. An entry has the shape of one slot of the generator's cache (so one
//! `KvCache::copy_prefix` each way; for hybrid models the slot's recurrent mark, the state at the
//! end of its last prompt, with the KV rows before it: `HybridModel::copy_mark`), the store as
//! many entries as its byte budget holds, evicted least recently used. Rows are copied, not
//! shared in place (no block table yet).

use std::cmp::Reverse;

use vkllm_models::KvCache;
use vkllm_models::hybrid::{HybridState, RecurrentMarks};

/// Histories shorter than this are not worth an entry (tokens).
pub(crate) const STORE_MIN: usize = 16;

/// Where the entries' rows live: one slot per entry, the generator state's shape.
pub(crate) enum StoreRows {
    Dense(KvCache),
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
/// slot it came from had written (what its sliding-window rings hold, `KvCache::reusable`).
#[derive(Default)]
struct Entry {
    history: Vec<u32>,
    written: usize,
    last_used: u64,
}

impl PrefixStore {
    pub(crate) fn new(rows: StoreRows, bytes: u64) -> Self {
        let n = match &rows {
            StoreRows::Dense(kv) => kv.slots,
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

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
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

    /// The entry `history` should go into: one holding an earlier turn of it (the new one
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

    /// Entry `i` now holds `history` (its rows were just copied in).
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
