//! The batched GPU [`Generator`]: every active request is a slot of one Vulkan slot decoder, so
//! one submit advances all of them several tokens (GPU sampling, logprobs and the advance on the
//! device; see `vkllm_models::backend::vulkan::slots`). Prompts are prefilled into their slot
//! one at a time between submits; the first token is sampled after the prompt's forward, on the
//! device unless a grammar or logprobs need the logits on the host (the same sampler either way).
//! Gives the same tokens as [`crate::SimpleGenerator`] (tested in vkllm-models' gpu_slots).
//!
//! Dense models keep a slot-major KV cache; hybrid (Gated DeltaNet) and MoE models a
//! [`HybridState`] (KV + recurrent states per slot). A recurrent state cannot be rewound, so a
//! hybrid slot reuses its history when the new prompt extends all of it, else from one of its
//! recurrent marks ([`RecurrentMarks`]): copies of the state at the end of each prompt and at
//! the point where a prompt leaves a prefix that another slot or stored conversation holds (a
//! shared system prompt, an edited turn), so the next prompt diverging there starts from it.
//!
//! Conversations may also be kept past their slots ([`SlotGenerator::with_prefix_store`], `serve
//! --prefix-cache-mb`; see `prefix_store.rs`): a hybrid's as its furthest mark.

use vkllm_models::hybrid::{HybridModel, HybridState, RecurrentMarks};
use vkllm_models::{
    Backend, KvCache, KvSharing, KvTypes, Logits, Model, SlotDecoderConfig, SlotDecoderId,
    SlotStart, VulkanBackend,
};

use crate::error::EngineError;
use crate::generator::{
    DEFAULT_MARKS_PER_SLOT, Generator, MAX_TOP_LOGPROBS, SEQ_ID, SlotId, SlotParams, TokenOut,
    branch_point, common_prefix, pick_constrained, tail_point, validate_params,
};
use crate::grammar::Constraint;
use crate::prefix_store::{PrefixStore, StoreRows};

mod dense_prefix;
mod store;

pub use dense_prefix::KV_GROW_ROWS;

struct Slot {
    /// Tokens whose keys and values are in the slot's cache region, from position 0.
    history: Vec<u32>,
    /// The furthest position (exclusive) written since position 0 was last computed (what a
    /// sliding-window ring still holds: `KvCache::reusable`).
    written: usize,
    /// The sampled token the next step feeds (not in the cache yet), while active.
    next: Option<u32>,
    last_used: u64,
    /// Prompt tokens the last start here took from the cache.
    reused: usize,
    /// A prompt being prefilled in pieces (`begin` .. `prefill_some`).
    pending: Option<PendingPrompt>,
    /// Structured outputs: the active request's grammar position. While any live slot has
    /// one, a submit runs one step (the next mask depends on the token just drawn).
    constraint: Option<Constraint>,
    /// The constraint moved on since its mask was last uploaded.
    mask_due: bool,
    /// On-demand KV memory: rows from the slot's position up to here are bound.
    bound_to: usize,
}

struct PendingPrompt {
    prompt: Vec<u32>,
    /// Prompt tokens in the cache so far.
    done: usize,
    params: SlotParams,
    /// Hybrid models: a position inside the prompt to mark on the way (where it leaves a
    /// prefix another conversation holds).
    mark_at: Option<usize>,
}

/// The model and its per-slot state.
enum Net {
    Dense {
        model: Model,
        kv: KvCache,
    },
    Hybrid {
        model: HybridModel,
        st: HybridState,
        /// Each slot's recurrent states at marked positions (`None`: no room for them).
        marks: Option<RecurrentMarks>,
    },
}

/// `slots` sequences of `ctx` positions on one Vulkan device, decoded together.
pub struct SlotGenerator {
    b: VulkanBackend,
    net: Net,
    ctx: usize,
    vocab: usize,
    dec: SlotDecoderId,
    slots: Vec<Slot>,
    steps_per_submit: usize,
    clock: u64,
    /// Conversations kept past their slots (dense models; `None`: off).
    store: Option<PrefixStore>,
    /// Hybrid models: tokens before a prompt's end where it is marked when nothing else marks
    /// it (0: never).
    tail_mark: usize,
    /// Rows given in place (paged KV blocks) between slots and the prefix store, in all.
    kv_rows_shared: u64,
    /// Shared KV pages a start made its slot's own before writing them (copy-on-write).
    kv_pages_copied: u64,
    /// On-demand KV memory: rows a slot's memory grows by at a time.
    kv_grow: usize,
    /// Idle slots whose KV memory was given back for others (their conversations forgotten).
    kv_slots_reclaimed: u64,
}

impl SlotGenerator {
    /// Records the slot decoder (`steps_per_submit` decode steps per submit at most).
    pub fn new(
        b: VulkanBackend,
        model: Model,
        slots: usize,
        ctx: usize,
        kv: impl Into<KvTypes>,
        steps_per_submit: usize,
    ) -> Result<Self, EngineError> {
        Self::new_sharing(b, model, slots, ctx, kv, steps_per_submit, KvSharing::Copy)
    }

    /// [`SlotGenerator::new`] giving one slot's prefix to another as `sharing` says
    /// ([`KvSharing::InPlace`]: whole KV blocks shared in place where the device can).
    pub fn new_sharing(
        mut b: VulkanBackend,
        model: Model,
        slots: usize,
        ctx: usize,
        kv: impl Into<KvTypes>,
        steps_per_submit: usize,
        sharing: KvSharing,
    ) -> Result<Self, EngineError> {
        let slots = slots.max(1);
        let kv = model.new_kv_slots_sharing(&mut b, ctx.max(2), slots, kv, sharing)?;
        let dec = b.slot_decoder(&model, &kv, decoder_config(steps_per_submit))?;
        let net = Net::Dense { model, kv };
        Ok(Self::with(b, net, dec, slots, steps_per_submit))
    }

    /// [`SlotGenerator::new`] for a hybrid (Gated DeltaNet) or MoE model (`kv`: the attention
    /// layers' cache type; recurrent states are f32), with [`DEFAULT_MARKS_PER_SLOT`] marks.
    pub fn new_hybrid(
        b: VulkanBackend,
        model: HybridModel,
        slots: usize,
        ctx: usize,
        kv: impl Into<KvTypes>,
        steps_per_submit: usize,
    ) -> Result<Self, EngineError> {
        let marks = DEFAULT_MARKS_PER_SLOT;
        Self::new_hybrid_marks(b, model, slots, ctx, kv, steps_per_submit, marks)
    }

    /// [`SlotGenerator::new_hybrid`] keeping `marks_per_slot` recurrent marks per slot (each
    /// as large as a slot's recurrent state; 0: none, prefix reuse keeps to whole-history
    /// continuations).
    pub fn new_hybrid_marks(
        mut b: VulkanBackend,
        model: HybridModel,
        slots: usize,
        ctx: usize,
        kv: impl Into<KvTypes>,
        steps_per_submit: usize,
        marks_per_slot: usize,
    ) -> Result<Self, EngineError> {
        let slots = slots.max(1);
        let st = model.new_state_kv(&mut b, ctx.max(2), slots, kv)?;
        let dec = b.hybrid_slot_decoder(&model, &st, decoder_config(steps_per_submit))?;
        // Without memory for the marks, fewer; without any, prefix reuse keeps to
        // whole-history continuations.
        let marks = match marks_per_slot {
            0 => None,
            n => model
                .new_marks_per_slot(&mut b, &st, n)
                .or_else(|_| model.new_marks(&mut b, &st))
                .ok(),
        };
        let net = Net::Hybrid { model, st, marks };
        Ok(Self::with(b, net, dec, slots, steps_per_submit))
    }

    fn with(
        b: VulkanBackend,
        net: Net,
        dec: SlotDecoderId,
        slots: usize,
        steps_per_submit: usize,
    ) -> Self {
        let (ctx, vocab) = match &net {
            Net::Dense { model, kv } => (kv.capacity, model.cfg.vocab_size),
            Net::Hybrid { model, st, .. } => (st.capacity, model.cfg.vocab_size),
        };
        SlotGenerator {
            b,
            net,
            ctx,
            vocab,
            dec,
            slots: (0..slots)
                .map(|_| Slot {
                    history: Vec::new(),
                    written: 0,
                    next: None,
                    last_used: 0,
                    reused: 0,
                    pending: None,
                    constraint: None,
                    mask_due: false,
                    bound_to: 0,
                })
                .collect(),
            steps_per_submit: steps_per_submit.max(1),
            clock: 0,
            store: None,
            tail_mark: crate::generator::TAIL_MARK,
            kv_rows_shared: 0,
            kv_pages_copied: 0,
            kv_grow: KV_GROW_ROWS,
            kv_slots_reclaimed: 0,
        }
    }

    /// Positions per KV block shared in place (0 where prefixes are copied).
    pub fn kv_block(&self) -> usize {
        match &self.net {
            Net::Dense { kv, .. } => kv.block,
            Net::Hybrid { .. } => 0,
        }
    }

    /// How prefixes pass between slots (dense models; hybrids copy).
    pub fn kv_sharing(&self) -> KvSharing {
        match &self.net {
            Net::Dense { kv, .. } => kv.sharing(),
            Net::Hybrid { .. } => KvSharing::Copy,
        }
    }

    /// Shared KV pages that starts made their slot's own before writing (copy-on-write).
    pub fn kv_pages_copied(&self) -> u64 {
        self.kv_pages_copied
    }

    /// Paged-KV ops that re-mapped pages so far (`VulkanBackend::kv_page_ops`: each waits for
    /// the GPU to be idle).
    pub fn kv_page_ops(&self) -> u64 {
        self.b.kv_page_ops()
    }

    /// Idle slots whose KV memory was given back for other requests (on demand).
    pub fn kv_slots_reclaimed(&self) -> u64 {
        self.kv_slots_reclaimed
    }

    /// On-demand KV memory ([`KvSharing::OnDemand`]): at most `bytes` of KV blocks bound
    /// beyond what the device holds now (`None`: device memory is the cap), each slot growing
    /// by `grow` rows at a time ([`KV_GROW_ROWS`] by default). Does nothing for other caches.
    pub fn with_kv_memory(mut self, bytes: Option<u64>, grow: usize) -> Self {
        if matches!(&self.net, Net::Dense { kv, .. } if kv.on_demand) {
            self.b.set_kv_page_budget(bytes);
            self.kv_grow = grow.max(1);
        }
        self
    }

    /// The tokens `slot`'s state holds, from position 0 (its prefix for reuse).
    pub fn history(&self, slot: SlotId) -> &[u32] {
        self.slots.get(slot).map_or(&[], |s| s.history.as_slice())
    }

    /// Forgets what an inactive `slot` holds: its next start prefills from position 0.
    pub fn forget(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.get_mut(slot)
            && s.next.is_none()
        {
            s.history.clear();
            s.written = 0;
        }
    }

    /// `start`'s checks and slot choice: a free slot for `prompt` (the longest reusable cached
    /// prefix first, see below), set up to prefill the rest of it from `prefill_some`.
    fn claim(&mut self, prompt: &[u32], p: &SlotParams) -> Result<SlotId, EngineError> {
        validate_params(p, self.vocab())?;
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let ctx = self.ctx;
        if prompt.len() >= ctx {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                ctx,
            });
        }
        // A free slot: the longest reusable cached prefix, then the fewest rows a decode step
        // runs with it live (every row up to the highest live slot, in recorded powers of two:
        // a lone request in a high slot ran several times slower than in slot 0,
        // docs/benchmarks.md), then the least recently used (its cache is the least likely reused).
        let highest_live = self.slots.iter().rposition(|s| s.next.is_some());
        let rows_with = |s: usize| (highest_live.map_or(s, |h| h.max(s)) + 1).next_power_of_two();
        let reusable = |s: usize| {
            let sl = &self.slots[s];
            let common = common_prefix(&sl.history, prompt);
            match &self.net {
                Net::Dense { kv, .. } => kv.reusable(sl.written, common.min(prompt.len() - 1)),
                // The recurrent state holds exactly `history`: reusable when the prompt extends
                // all of it, else from the slot's mark when the prompt extends the marked part.
                Net::Hybrid { marks, .. } => {
                    let marked = marks
                        .as_ref()
                        .and_then(|m| m.best(s, common.min(prompt.len() - 1)))
                        .unwrap_or(0);
                    if common == sl.history.len() && common < prompt.len() {
                        common.max(marked)
                    } else {
                        marked
                    }
                }
            }
        };
        let slot = (0..self.slots.len())
            .filter(|&s| self.slots[s].next.is_none() && self.slots[s].pending.is_none())
            .max_by_key(|&s| {
                let sl = &self.slots[s];
                (
                    reusable(s),
                    std::cmp::Reverse(rows_with(s)),
                    u64::MAX - sl.last_used,
                    std::cmp::Reverse(s),
                )
            })
            .ok_or(EngineError::NoFreeSlot {
                slots: self.slots.len(),
            })?;
        let mut reuse = reusable(slot);
        // The stored conversation that gives the prompt the most, found before the slot's own
        // conversation is stored (which must not take that entry's place): a dense entry as far
        // as its rows are reusable, a hybrid one (a mark) when the prompt goes on past it.
        let last = prompt.len() - 1;
        let stored = match (&self.net, &self.store) {
            (Net::Dense { kv, .. }, Some(st)) => st.best(
                |h, written| kv.reusable(written, common_prefix(h, prompt).min(last)),
                reuse,
            ),
            (Net::Hybrid { .. }, Some(st)) => st.best(
                |h, _| {
                    if h.len() <= last && prompt.starts_with(h) {
                        h.len()
                    } else {
                        0
                    }
                },
                reuse,
            ),
            _ => None,
        };
        self.store_slot(slot, reuse, stored.map(|(e, _, _)| e))?;
        // Dense models: the longest reusable prefix in any slot, busy ones included (a slot's
        // rows before its position never change while it runs), is copied into the chosen slot
        // when it beats the slot's own: concurrent requests behind one system prompt compute
        // it once (`dense_prefix.rs`).
        let mut copied_written = None;
        // Hybrid models: another slot's mark (a running one too) when it covers more.
        let mut mark_source = None;
        if let Net::Hybrid { marks: Some(m), .. } = &self.net {
            mark_source = (0..self.slots.len())
                .filter(|&t| t != slot)
                .filter_map(|t| {
                    let common = common_prefix(&self.slots[t].history, prompt);
                    m.best(t, common.min(prompt.len() - 1))
                        .filter(|&p| p > reuse)
                        .map(|p| (t, p))
                })
                .max_by_key(|&(t, p)| (p, std::cmp::Reverse(t)));
            if let Some((_, p)) = mark_source {
                reuse = p;
            }
        }
        // Hybrid models: a stored mark when it covers more still.
        let mut stored_mark = None;
        if let (Net::Hybrid { .. }, Some((e, r, _))) = (&self.net, stored)
            && r > reuse
        {
            stored_mark = Some((e, r));
            mark_source = None;
            reuse = r;
        }
        if let Net::Dense { .. } = &self.net {
            (reuse, copied_written) = self.take_dense_prefix(slot, reuse, prompt, stored)?;
        }
        let sl = &mut self.slots[slot];
        if let Some(w) = copied_written {
            // The ring rows came from the other slot: as far as it wrote.
            sl.written = w;
        } else if reuse == 0 {
            sl.written = 0;
        }
        sl.written = sl.written.max(prompt.len());
        if let Net::Hybrid { model, st, marks } = &mut self.net {
            let whole = self.slots[slot].history.len();
            let from_store = match (stored_mark, self.store.as_mut(), marks.as_mut()) {
                (Some((e, r)), Some(store), Some(m)) => match &mut store.rows {
                    StoreRows::Hybrid { st: sst, marks: sm } => {
                        model.copy_mark(&mut self.b, sst, sm, e, r, st, m, slot, true)?;
                        self.clock += 1;
                        store.touch(e, self.clock);
                        true
                    }
                    StoreRows::Dense { .. } => false,
                },
                _ => false,
            };
            if from_store {
                // The slot now holds the stored mark (rows, state and mark).
            } else if let (Some((t, p)), Some(m)) = (mark_source, marks.as_mut()) {
                model.restore_mark_from(&mut self.b, st, t, p, slot, m)?;
            } else if reuse == 0 {
                model.reset_slot(&mut self.b, st, slot)?;
                // The prefill rewrites the slot's rows from 0: its mark no longer holds.
                if let Some(m) = marks.as_mut() {
                    m.forget(slot);
                }
            } else if reuse == whole && common_prefix(&self.slots[slot].history, prompt) == whole {
                st.next[slot].set(reuse);
            } else if let Some(m) = marks.as_mut() {
                model.restore_mark(&mut self.b, st, slot, reuse, m)?;
            }
        }
        let mark_at = self.branch_point(slot, prompt, reuse);
        let s = &mut self.slots[slot];
        s.history = prompt[..reuse].to_vec();
        s.reused = reuse;
        s.pending = Some(PendingPrompt {
            prompt: prompt.to_vec(),
            done: reuse,
            params: p.clone(),
            mark_at,
        });
        Ok(slot)
    }
}

impl SlotGenerator {
    /// Hybrid models: a prompt that nothing else marks on the way is marked `tokens` before its
    /// end (default [`TAIL_MARK`](crate::generator::TAIL_MARK); 0: never), so that a next prompt
    /// re-tokenizing this one's last tokens differently starts there. The prompt is prefilled
    /// in two pieces, the second `tokens` long: a shorter tail costs less (small batches run
    /// the per-token expert launches) but covers fewer re-tokenized tokens.
    pub fn with_tail_mark(mut self, tokens: usize) -> Self {
        self.tail_mark = tokens;
        self
    }

    /// Hybrid models: where `prompt`, about to be prefilled into `slot` from `reuse`, leaves
    /// the longest prefix it shares with any slot's history or stored conversation, when a mark
    /// there saves a later prompt at least [`STORE_MIN`] tokens (the third conversation behind
    /// one system prompt starts from it; dense models copy rows from any position instead);
    /// else [`SlotGenerator::with_tail_mark`] tokens before its end, for a next prompt whose text
    /// re-tokenizes this one's last tokens differently.
    fn branch_point(&self, slot: SlotId, prompt: &[u32], reuse: usize) -> Option<usize> {
        let Net::Hybrid { marks: Some(m), .. } = &self.net else {
            return None;
        };
        let shared = self
            .slots
            .iter()
            .map(|s| common_prefix(&s.history, prompt))
            .chain(self.store.as_ref().map(|st| st.longest_common(prompt)))
            .max()
            .unwrap_or(0);
        branch_point(shared, reuse, prompt.len())
            .or_else(|| tail_point(reuse, prompt.len(), self.tail_mark))
            .filter(|&p| !m.has(slot, p))
    }

    /// Computes the masks of the live constrained slots whose constraint moved on, one thread
    /// per slot (a mask over a 150k-token vocabulary can take a millisecond), and uploads them.
    fn upload_due_masks(&mut self) -> Result<(), EngineError> {
        let mut todo: Vec<(SlotId, &mut Constraint)> = self
            .slots
            .iter_mut()
            .enumerate()
            .filter(|(_, sl)| sl.mask_due && sl.next.is_some())
            .filter_map(|(s, sl)| sl.constraint.as_mut().map(|c| (s, c)))
            .collect();
        let masks: Vec<(SlotId, Vec<u32>)> = match todo.len() {
            0 => Vec::new(),
            1 => todo.iter_mut().map(|(s, c)| (*s, c.mask())).collect(),
            _ => std::thread::scope(|sc| {
                let hs: Vec<_> = todo
                    .into_iter()
                    .map(|(s, c)| sc.spawn(move || (s, c.mask())))
                    .collect();
                hs.into_iter()
                    .map(|h| {
                        h.join().map_err(|_| EngineError::Grammar {
                            reason: "the token mask computation panicked".into(),
                        })
                    })
                    .collect::<Result<_, _>>()
            })?,
        };
        for (s, m) in masks {
            self.b.slot_mask(self.dec, s, Some(&m))?;
            self.slots[s].mask_due = false;
        }
        Ok(())
    }
}

fn decoder_config(steps_per_submit: usize) -> SlotDecoderConfig {
    SlotDecoderConfig {
        max_bias: 300,
        max_top: MAX_TOP_LOGPROBS,
        logprobs: true,
        counts: true,
        max_steps: steps_per_submit.max(1),
        split_step: true,
    }
}

impl Generator for SlotGenerator {
    fn reused(&self, slot: SlotId) -> usize {
        self.slots.get(slot).map_or(0, |s| s.reused)
    }

    fn prefix_cache_bytes(&self) -> u64 {
        self.store.as_ref().map_or(0, PrefixStore::bytes)
    }

    fn kv_rows_shared(&self) -> u64 {
        self.kv_rows_shared
    }

    fn kv_paged_memory(&self) -> (u64, u64) {
        (self.b.kv_paged_bytes(), self.kv_slots_reclaimed)
    }

    fn max_slots(&self) -> usize {
        self.slots.len()
    }

    fn context(&self) -> usize {
        self.ctx
    }

    fn vocab(&self) -> usize {
        self.vocab
    }

    fn start(&mut self, prompt: &[u32], p: &SlotParams) -> Result<(SlotId, TokenOut), EngineError> {
        let slot = self.claim(prompt, p)?;
        loop {
            if let Some(first) = self.prefill_some(slot, usize::MAX)? {
                return Ok((slot, first));
            }
        }
    }

    fn begin(&mut self, prompt: &[u32], p: &SlotParams) -> Result<Option<SlotId>, EngineError> {
        self.claim(prompt, p).map(Some)
    }

    fn prefill_left(&self, slot: SlotId) -> Option<usize> {
        let pend = self.slots.get(slot)?.pending.as_ref()?;
        Some(pend.prompt.len() - pend.done)
    }

    fn prefill_some(
        &mut self,
        slot: SlotId,
        budget: usize,
    ) -> Result<Option<TokenOut>, EngineError> {
        let Some(mut pend) = self.slots.get_mut(slot).and_then(|s| s.pending.take()) else {
            return Err(EngineError::NotPrefilling { slot });
        };
        let mut end = pend
            .prompt
            .len()
            .min(pend.done.saturating_add(budget.max(1)));
        if let Some(m) = pend.mark_at.filter(|&m| m > pend.done) {
            end = end.min(m);
        }
        let piece = &pend.prompt[pend.done..end];
        let logits = match &self.net {
            Net::Dense { model, kv } => {
                model.forward_slot(&mut self.b, kv, slot, piece, pend.done, Logits::Last)?
            }
            Net::Hybrid { model, st, .. } => {
                model.forward_slot(&mut self.b, st, slot, piece, pend.done, Logits::Last)?
            }
        };
        let sl = &mut self.slots[slot];
        sl.history.extend_from_slice(piece);
        pend.done = end;
        if end < pend.prompt.len() {
            if pend.mark_at == Some(end)
                && let Net::Hybrid {
                    model,
                    st,
                    marks: Some(m),
                } = &mut self.net
            {
                model.mark_slot(&mut self.b, st, slot, m)?;
            }
            sl.pending = Some(pend);
            return Ok(None);
        }
        // Hybrid slots mark their recurrent state at the end of each prompt (a device copy).
        if let Net::Hybrid {
            model,
            st,
            marks: Some(m),
        } = &mut self.net
        {
            model.mark_slot(&mut self.b, st, slot, m)?;
        }
        let p = &pend.params;
        let mut constraint = p.grammar.as_ref().map(|g| g.start());
        // The first token: drawn on the device from the logits the forward left there when
        // nothing needs them on the host (no grammar, no logprobs), else here: the same draw.
        let on_device = if constraint.is_none() && p.logprobs.is_none() {
            let t = match &self.net {
                Net::Dense { model, .. } => model.logits_tensor(),
                Net::Hybrid { model, .. } => model.logits_tensor(),
            };
            self.b
                .sample_token(t, self.vocab, &p.sampling, &[], SEQ_ID, 0)?
        } else {
            None
        };
        let first = match on_device {
            Some(id) => TokenOut {
                id,
                logprob: None,
                top: Vec::new(),
            },
            None => pick_constrained(&logits, p, &[], 0, constraint.as_mut())?,
        };
        let mut counts = vec![0u32; self.vocab];
        counts[first.id as usize] += 1;
        self.b.slot_start(
            self.dec,
            slot,
            &SlotStart {
                token: first.id,
                pos: end,
                sampling: &p.sampling,
                seq_id: SEQ_ID,
                step: 1,
                counts: Some(&counts),
                logprobs: p.logprobs,
            },
        )?;
        self.clock += 1;
        let s = &mut self.slots[slot];
        s.next = Some(first.id);
        s.last_used = self.clock;
        // The first mask is computed while the next step's forward runs.
        s.mask_due = constraint.is_some();
        s.constraint = constraint;
        Ok(Some(first))
    }

    fn step(&mut self) -> Result<Vec<(SlotId, Vec<TokenOut>)>, EngineError> {
        if self.slots.iter().all(|s| s.next.is_none()) {
            return Ok(Vec::new());
        }
        let constrained = self
            .slots
            .iter()
            .any(|s| s.next.is_some() && s.constraint.is_some());
        let steps = if constrained {
            1
        } else {
            self.steps_per_submit
        };
        for s in self.reserve_steps(steps)? {
            // No KV memory left for it: its request ends as if its context were full.
            self.slots[s].next = None;
            self.b.slot_stop(self.dec, s)?;
        }
        if self.slots.iter().all(|s| s.next.is_none()) {
            return Ok(Vec::new());
        }
        let got = if constrained {
            // One step in two submits: the forward runs while the host computes the masks of
            // the constrained slots that moved on (they depend only on tokens already drawn).
            self.b.slots_forward(self.dec)?;
            let masked = self.upload_due_masks();
            let got = self.b.slots_finish(self.dec);
            masked?;
            got?
        } else {
            self.b.slots_run(self.dec, self.steps_per_submit)?
        };
        let mut out = Vec::new();
        for (s, slot) in self.slots.iter_mut().enumerate() {
            let Some(mut fed) = slot.next else { continue };
            let mut toks = Vec::new();
            for k in 0..got.steps {
                let id = got.id(k, s);
                if id == u32::MAX {
                    break;
                }
                // The token fed in this step is now in the cache.
                slot.history.push(fed);
                fed = id;
                if let Some(c) = slot.constraint.as_mut() {
                    c.commit(id)?;
                    slot.mask_due = true;
                }
                let lp = got.logprobs[k * got.slots + s].as_ref();
                toks.push(TokenOut {
                    id,
                    logprob: lp.map(|l| l.logprob),
                    top: lp.map(|l| l.top.clone()).unwrap_or_default(),
                });
            }
            slot.next = Some(fed);
            slot.written = slot.written.max(slot.history.len());
            if !toks.is_empty() {
                out.push((s, toks));
            }
        }
        Ok(out)
    }

    fn release(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.next = None;
            // A prompt abandoned mid-prefill: what it computed stays reusable (`history`).
            s.pending = None;
            s.mask_due = false;
            if s.constraint.take().is_some() {
                let _ = self.b.slot_mask(self.dec, slot, None);
            }
            self.clock += 1;
            s.last_used = self.clock;
            // Stopping only rewrites host-visible state; an error here means the device is gone,
            // which the next start/step reports.
            let _ = self.b.slot_stop(self.dec, slot);
        }
    }
}
