//! Conversations kept past their slots (dense models on the batched GPU decoder): when a free
//! slot is taken by a prompt that does not continue what the slot holds, its rows are first
//! copied into a store entry; a later prompt that starts with a stored conversation copies those
//! rows back instead of recomputing them. An entry has the shape of one slot of the generator's
//! cache (so one `KvCache::copy_prefix` each way), the store as many entries as its byte budget
//! holds, evicted least recently used. Rows are copied, not shared in place (no block table yet).

use std::cmp::Reverse;

use vkllm_models::KvCache;

use crate::generator::common_prefix;

/// Histories shorter than this are not worth an entry (tokens).
pub(crate) const STORE_MIN: usize = 16;

pub(crate) struct PrefixStore {
    /// One slot per entry, the generator cache's shape.
    pub(crate) kv: KvCache,
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
    pub(crate) fn new(kv: KvCache, bytes: u64) -> Self {
        let entries = (0..kv.slots).map(|_| Entry::default()).collect();
        PrefixStore { kv, entries, bytes }
    }

    /// Device bytes the entries take.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry whose rows give `prompt` more reusable tokens than `floor`, the most of any:
    /// (entry, tokens, its `written`). `cache` is the generator's cache (same shape).
    pub(crate) fn best(
        &self,
        cache: &KvCache,
        prompt: &[u32],
        floor: usize,
    ) -> Option<(usize, usize, usize)> {
        let last = prompt.len().saturating_sub(1);
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.history.is_empty())
            .map(|(i, e)| {
                let common = common_prefix(&e.history, prompt).min(last);
                (i, cache.reusable(e.written, common), e.written)
            })
            .filter(|&(_, r, _)| r > floor)
            .max_by_key(|&(i, r, _)| (r, Reverse(i)))
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
