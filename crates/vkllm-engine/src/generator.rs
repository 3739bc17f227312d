//! The [`Generator`] trait: a fixed set of generation slots that a scheduler fills with
//! requests and advances one decode round at a time, and [`SimpleGenerator`], its reference
//! implementation (one KV cache per slot, each slot decoded by its own `n = 1` forward and
//! sampled on the CPU).

use std::sync::Arc;

use vkllm_cpu::sampler::{SamplingParams, apply_mask, log_softmax, sample, top_logprobs};
use vkllm_models::hybrid::RecurrentMarks;
use vkllm_models::{AnyModel, AnyState, Backend, KvSharing, KvType, Logits};

use crate::error::EngineError;
use crate::grammar::{Constraint, Grammar};

/// Index of a generation slot, `0..max_slots()`.
pub type SlotId = usize;

/// Most alternatives a token's `top` list may ask for.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// The sequence id every slot samples with: the draw of a request depends on its seed and step
/// only, never on the slot it happens to occupy, so a seed reproduces its text.
pub const SEQ_ID: u64 = 0;

/// How one slot samples.
#[derive(Clone, Debug, Default)]
pub struct SlotParams {
    pub sampling: SamplingParams,
    /// top-n logprobs (0..=20) per token; None = no logprobs
    pub logprobs: Option<usize>,
    /// Structured outputs: the grammar the generated tokens must match (each slot runs its
    /// own [`Constraint`] from it).
    pub grammar: Option<Arc<Grammar>>,
}

/// One generated token.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenOut {
    pub id: u32,
    /// Natural log of the token's probability under the model (raw logits, before penalties,
    /// bias and temperature), when logprobs were asked for.
    pub logprob: Option<f32>,
    /// The most likely tokens at this step as `(id, logprob)`, best first.
    pub top: Vec<(u32, f32)>,
}

/// A set of generation slots over one model.
pub trait Generator: Send {
    fn max_slots(&self) -> usize;
    fn context(&self) -> usize; // positions per slot
    fn vocab(&self) -> usize;
    /// Prefill `prompt` into a free slot (may reuse a cached prefix of an idle slot's history),
    /// sample the first token. Errors: no free slot, prompt too long (typed EngineError).
    fn start(&mut self, prompt: &[u32], p: &SlotParams) -> Result<(SlotId, TokenOut), EngineError>;
    /// One decode round over every active slot: each gets >= 1 new token (an implementation may
    /// return several per slot; the caller discards tokens past a stop). Feeding the last token
    /// back in is the generator's job.
    fn step(&mut self) -> Result<Vec<(SlotId, Vec<TokenOut>)>, EngineError>;
    /// Chunked prefill, step 1: takes a free slot for `prompt` with `start`'s checks and
    /// choice, computing nothing yet; [`Generator::prefill_some`] then runs the prompt a piece
    /// at a time (decode steps of the other slots may run in between). `Ok(None)`: this
    /// generator prefills whole prompts only (`start`).
    fn begin(&mut self, prompt: &[u32], p: &SlotParams) -> Result<Option<SlotId>, EngineError> {
        let _ = (prompt, p);
        Ok(None)
    }
    /// Chunked prefill, step 2: computes up to `budget` more prompt tokens of a slot from
    /// [`Generator::begin`]; once the whole prompt is in, samples and returns the first token
    /// (the slot is then active, as after `start`). `release` abandons it.
    fn prefill_some(
        &mut self,
        slot: SlotId,
        budget: usize,
    ) -> Result<Option<TokenOut>, EngineError> {
        let _ = budget;
        Err(EngineError::NotPrefilling { slot })
    }
    /// Prompt tokens of a slot from [`Generator::begin`] not computed yet; `None`: not known
    /// (the runner then gives that prompt a whole turn's prefill budget).
    fn prefill_left(&self, slot: SlotId) -> Option<usize> {
        let _ = slot;
        None
    }
    /// The slot stops being active (finished/cancelled); its KV may be kept for prefix reuse.
    fn release(&mut self, slot: SlotId);
    /// Prompt tokens the last start in `slot` took from its cache instead of computing them
    /// (reported to clients as cached prompt tokens).
    fn reused(&self, slot: SlotId) -> usize {
        let _ = slot;
        0
    }

    /// Device bytes kept for conversations past their slots (the prefix store; 0: none).
    fn prefix_cache_bytes(&self) -> u64 {
        0
    }

    /// KV rows given in place (shared blocks, no copy) between slots and the prefix store so
    /// far (0 where prefixes are copied).
    fn kv_rows_shared(&self) -> u64 {
        0
    }

    /// Paged KV memory: device bytes its pages hold now, and idle slots whose memory was given
    /// back for other requests so far (on demand); zeros where the cache is not paged.
    fn kv_paged_memory(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// Checks the parts of `p` a generator depends on.
pub fn validate_params(p: &SlotParams, vocab: usize) -> Result<(), EngineError> {
    p.sampling.validate(vocab)?;
    if let Some(n) = p.logprobs
        && n > MAX_TOP_LOGPROBS
    {
        return Err(EngineError::InvalidRequest {
            what: "top_logprobs",
            value: n.to_string(),
            expected: "at most 20",
        });
    }
    Ok(())
}

/// The token `sample` picks from `logits` (only among the tokens `mask` allows, when given),
/// with logprobs when asked (of the model's own distribution, as without a mask).
pub fn pick(
    logits: &[f32],
    p: &SlotParams,
    counts: &[u32],
    step: u64,
    mask: Option<&[u32]>,
) -> TokenOut {
    let id = match mask {
        None => sample(logits, &p.sampling, counts, SEQ_ID, step),
        Some(m) => {
            let mut l = logits.to_vec();
            apply_mask(&mut l, m);
            sample(&l, &p.sampling, counts, SEQ_ID, step)
        }
    };
    match p.logprobs {
        None => TokenOut {
            id,
            logprob: None,
            top: Vec::new(),
        },
        Some(n) => TokenOut {
            id,
            logprob: log_softmax(logits).get(id as usize).copied(),
            top: top_logprobs(logits, n.min(MAX_TOP_LOGPROBS)),
        },
    }
}

/// [`pick`] under `constraint`'s mask, which then takes the token.
pub(crate) fn pick_constrained(
    logits: &[f32],
    p: &SlotParams,
    counts: &[u32],
    step: u64,
    constraint: Option<&mut Constraint>,
) -> Result<TokenOut, EngineError> {
    match constraint {
        None => Ok(pick(logits, p, counts, step, None)),
        Some(c) => {
            let mask = c.mask();
            let tok = pick(logits, p, counts, step, Some(&mask));
            c.commit(tok.id)?;
            Ok(tok)
        }
    }
}

/// Whether `s` uses token counts (any penalty away from its neutral value).
fn penalised(s: &SamplingParams) -> bool {
    s.repetition_penalty != 1.0 || s.presence_penalty != 0.0 || s.frequency_penalty != 0.0
}

/// The state of a slot while it generates.
struct Active {
    params: SlotParams,
    /// The request's grammar position (structured outputs).
    constraint: Option<Constraint>,
    /// Generated-token counts for penalties; empty when the request has none.
    counts: Vec<u32>,
    /// Tokens sampled so far (the sampler's step counter).
    step: u64,
    /// The last sampled token, not yet in the cache.
    next: u32,
}

struct Slot {
    /// The slot's KV cache (and recurrent state, for hybrid and MoE models).
    kv: AnyState,
    /// Tokens whose keys and values are in `kv`, from position 0.
    history: Vec<u32>,
    /// The furthest position (exclusive) written since position 0 was last computed (what a
    /// sliding-window ring still holds: [`AnyState::reusable`]).
    written: usize,
    active: Option<Active>,
    /// When the slot was last released (for least-recently-used reuse).
    last_used: u64,
    /// Prompt tokens the last start took from the cache.
    reused: usize,
    /// Hybrid models: the recurrent state at marked positions (the end of the last prompts,
    /// where a prompt left a shared prefix; `None` for dense models, or without memory).
    marks: Option<RecurrentMarks>,
}

/// The reference [`Generator`]: `slots` KV caches (with recurrent states, for hybrid and MoE
/// models) of `ctx` positions each; every slot is decoded by its own forward of one token and
/// sampled with `vkllm_cpu::sampler::sample`. Works on any backend and every family. A slot whose cache is full is left out of [`Generator::step`]'s result
/// (the caller finishes it with `Length`).
pub struct SimpleGenerator<B: Backend> {
    backend: B,
    model: AnyModel,
    slots: Vec<Slot>,
    ctx: usize,
    clock: u64,
    /// Rows given in place between slots so far ([`KvSharing::InPlace`]).
    kv_rows_shared: u64,
    /// Shared KV pages a slot made its own (copied) before writing there, so far.
    kv_pages_copied: u64,
}

impl<B: Backend> SimpleGenerator<B> {
    /// `slots` generation slots of `ctx` positions each (at least one of each).
    pub fn new(
        backend: B,
        model: impl Into<AnyModel>,
        slots: usize,
        ctx: usize,
    ) -> Result<Self, EngineError> {
        Self::new_sharing(backend, model, slots, ctx, KvSharing::Copy)
    }

    /// [`SimpleGenerator::new`] whose slots give prefixes to each other as `sharing` says:
    /// [`KvSharing::InPlace`] shares whole KV blocks in place where the backend has paged KV
    /// tensors (dense models; hybrid models and backends without pages copy).
    /// [`KvSharing::OnDemand`] is taken as in-place here (every slot's memory is held).
    pub fn new_sharing(
        mut backend: B,
        model: impl Into<AnyModel>,
        slots: usize,
        ctx: usize,
        sharing: KvSharing,
    ) -> Result<Self, EngineError> {
        let model = model.into();
        let ctx = ctx.max(1);
        let sharing = match sharing {
            KvSharing::OnDemand => KvSharing::InPlace,
            s => s,
        };
        let slots = (0..slots.max(1))
            .map(|_| {
                let kv = model.new_state_sharing(&mut backend, ctx, KvType::F32, sharing)?;
                let marks = model.new_marks(&mut backend, &kv, DEFAULT_MARKS_PER_SLOT);
                Ok(Slot {
                    kv,
                    history: Vec::new(),
                    written: 0,
                    active: None,
                    last_used: 0,
                    reused: 0,
                    marks,
                })
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        Ok(SimpleGenerator {
            backend,
            model,
            slots,
            ctx,
            clock: 0,
            kv_rows_shared: 0,
            kv_pages_copied: 0,
        })
    }

    /// The backend (its memory figures: `CpuBackend::kv_paged_values`).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Shared KV pages a slot made its own (copy-on-write) before writing there, so far.
    pub fn kv_pages_copied(&self) -> u64 {
        self.kv_pages_copied
    }

    /// How slots give prefixes to each other (the first slot's cache: they are alike).
    pub fn kv_sharing(&self) -> KvSharing {
        match &self.slots[0].kv {
            AnyState::Kv(kv) => kv.sharing(),
            _ => KvSharing::Copy,
        }
    }

    /// The model.
    pub fn model(&self) -> &AnyModel {
        &self.model
    }

    /// The tokens cached in `slot` (its prefix for reuse).
    pub fn history(&self, slot: SlotId) -> &[u32] {
        self.slots.get(slot).map_or(&[], |s| s.history.as_slice())
    }

    /// Dense models: when another slot (busy ones too: rows before a slot's position never
    /// change) holds a longer reusable prefix of `prompt` than slot `id`'s `own`, copies it into
    /// `id`; returns the prefix `id` then holds and, when copied, the source's furthest write.
    fn copy_longer_prefix(
        &mut self,
        id: SlotId,
        prompt: &[u32],
        own: usize,
    ) -> Result<(usize, Option<usize>), EngineError> {
        let AnyModel::Dense(_) = &self.model else {
            return Ok((own, None));
        };
        let best = best_source(self.slots.len(), id, own, |t| {
            let s = &self.slots[t];
            let common = common_prefix(&s.history, prompt).min(prompt.len() - 1);
            s.kv.reusable(s.written, s.history.len(), common)
        });
        let Some((t, r)) = best else {
            return Ok((own, None));
        };
        let (AnyState::Kv(src), AnyState::Kv(dst)) = (&self.slots[t].kv, &self.slots[id].kv) else {
            return Ok((own, None));
        };
        let written = self.slots[t].written;
        let shared = src.copy_prefix(&mut self.backend, 0, dst, 0, r, written)?;
        self.kv_rows_shared += shared as u64;
        Ok((r, Some(written)))
    }

    /// The free slot to use for `prompt`: the longest reusable prefix, then the least recently
    /// used. Returns the slot and how many prompt tokens it already holds.
    fn choose(&self, prompt: &[u32]) -> Option<(SlotId, usize)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.active.is_none())
            .map(|(i, s)| {
                let common = common_prefix(&s.history, prompt);
                // The last prompt token is always recomputed: its logits are needed. A hybrid
                // slot may also restart from the end of its last prompt (its mark).
                let reuse = s.kv.reusable_marked(
                    s.marks.as_ref(),
                    s.written,
                    s.history.len(),
                    common,
                    prompt.len(),
                );
                (i, reuse, s.last_used)
            })
            .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
            .map(|(i, reuse, _)| (i, reuse))
    }
}

impl<B: Backend + Send> Generator for SimpleGenerator<B> {
    fn reused(&self, slot: SlotId) -> usize {
        self.slots.get(slot).map_or(0, |s| s.reused)
    }

    fn kv_rows_shared(&self) -> u64 {
        self.kv_rows_shared
    }

    fn kv_paged_memory(&self) -> (u64, u64) {
        (self.backend.kv_paged_bytes(), 0)
    }

    fn max_slots(&self) -> usize {
        self.slots.len()
    }

    fn context(&self) -> usize {
        self.ctx
    }

    fn vocab(&self) -> usize {
        self.model.cfg().vocab_size
    }

    fn start(&mut self, prompt: &[u32], p: &SlotParams) -> Result<(SlotId, TokenOut), EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if prompt.len() > self.ctx {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                ctx: self.ctx,
            });
        }
        let vocab = self.model.cfg().vocab_size;
        validate_params(p, vocab)?;
        let (id, reuse) = self.choose(prompt).ok_or(EngineError::NoFreeSlot {
            slots: self.slots.len(),
        })?;
        let (reuse, copied_written) = self.copy_longer_prefix(id, prompt, reuse)?;
        // Hybrid models: marked on the way where the prompt leaves the longest prefix a slot
        // holds, so the next prompt behind it (a shared system prompt) starts there, else a
        // little before its end ([`tail_point`]).
        let shared = self
            .slots
            .iter()
            .map(|s| common_prefix(&s.history, prompt))
            .max()
            .unwrap_or(0);
        let branch = branch_point(shared, reuse, prompt.len())
            .or_else(|| tail_point(reuse, prompt.len(), TAIL_MARK));
        let slot = &mut self.slots[id];
        // A recurrent state is reset unless it continues its whole history or restarts from
        // its mark.
        self.model
            .resume(&mut self.backend, &slot.kv, slot.marks.as_mut(), reuse)?;
        if let AnyState::Kv(kv) = &slot.kv {
            // Blocks shared with other slots become this slot's own before it writes there.
            self.kv_pages_copied += kv.own_from(&mut self.backend, 0, reuse)? as u64;
        }
        slot.history.truncate(reuse);
        if let Some(w) = copied_written {
            // The rows came from another slot: its history prefix, its ring as far as written.
            slot.history = prompt[..reuse].to_vec();
            slot.written = w;
        } else if reuse == 0 {
            slot.written = 0;
        }
        slot.written = slot.written.max(prompt.len());
        slot.reused = reuse;
        let logits = self.model.forward_marking(
            &mut self.backend,
            &slot.kv,
            slot.marks.as_mut(),
            &prompt[reuse..],
            reuse,
            branch,
        )?;
        slot.history.extend_from_slice(&prompt[reuse..]);
        self.model
            .mark(&mut self.backend, &slot.kv, slot.marks.as_mut())?;
        let mut counts = if penalised(&p.sampling) {
            vec![0u32; vocab]
        } else {
            Vec::new()
        };
        let mut constraint = p.grammar.as_ref().map(|g| g.start());
        let tok = pick_constrained(&logits, p, &counts, 0, constraint.as_mut())?;
        if let Some(c) = counts.get_mut(tok.id as usize) {
            *c += 1;
        }
        slot.active = Some(Active {
            constraint,
            params: p.clone(),
            counts,
            step: 1,
            next: tok.id,
        });
        Ok((id, tok))
    }

    fn step(&mut self) -> Result<Vec<(SlotId, Vec<TokenOut>)>, EngineError> {
        let mut out = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            let pos = slot.history.len();
            if pos >= slot.kv.capacity() {
                continue;
            }
            slot.written = slot.written.max(pos + 1);
            let logits =
                self.model
                    .forward(&mut self.backend, &slot.kv, &[a.next], pos, Logits::Last)?;
            slot.history.push(a.next);
            let tok =
                pick_constrained(&logits, &a.params, &a.counts, a.step, a.constraint.as_mut())?;
            if let Some(c) = a.counts.get_mut(tok.id as usize) {
                *c += 1;
            }
            a.step += 1;
            a.next = tok.id;
            out.push((i, vec![tok]));
        }
        Ok(out)
    }

    fn release(&mut self, slot: SlotId) {
        self.clock += 1;
        if let Some(s) = self.slots.get_mut(slot) {
            s.active = None;
            s.last_used = self.clock;
        }
    }
}

/// Recurrent marks a hybrid sequence keeps by default: the end of its last prompts and the
/// points where its prompts left a shared prefix (each mark is one sequence's recurrent state in
/// size).
pub const DEFAULT_MARKS_PER_SLOT: usize = 4;

/// Where a hybrid prompt of `len` tokens, prefilled from `reuse`, is marked on the way: the end
/// of the longest prefix `shared` it has in common with a cached history, when a mark there
/// saves a later prompt at least [`STORE_MIN`] tokens and is not the prompt's own end.
///
/// [`STORE_MIN`]: crate::prefix_store::STORE_MIN
pub(crate) fn branch_point(shared: usize, reuse: usize, len: usize) -> Option<usize> {
    (shared >= reuse + crate::prefix_store::STORE_MIN && shared + 1 < len).then_some(shared)
}

/// Tokens before a hybrid prompt's end where it is also marked when nothing else marks it on
/// the way (the default of [`SlotGenerator::with_tail_mark`](crate::SlotGenerator::with_tail_mark)):
/// a next prompt that re-tokenizes the last few tokens differently (text resent on a completions
/// API) starts there instead of from 0. The prompt is then prefilled in two pieces, the last one
/// this long.
pub const TAIL_MARK: usize = 16;

/// Where a hybrid prompt of `len` tokens, prefilled from `reuse`, is marked before its end when
/// no shared prefix asks for a mark ([`branch_point`]): `tail` tokens before its end, when that
/// saves at least [`STORE_MIN`] tokens (`tail` 0: never).
///
/// [`STORE_MIN`]: crate::prefix_store::STORE_MIN
pub(crate) fn tail_point(reuse: usize, len: usize, tail: usize) -> Option<usize> {
    let p = len.checked_sub(tail).filter(|_| tail > 0)?;
    (p >= reuse + crate::prefix_store::STORE_MIN).then_some(p)
}

/// The length of the common prefix of `a` and `b`.
pub(crate) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The slot other than `taken` (of `n` slots) whose cache serves a prompt best: `(slot,
/// tokens)` with the most tokens `reusable(slot)` says it could give, the lowest slot on ties;
/// `None` when no other slot gives more than `own`.
pub(crate) fn best_source(
    n: usize,
    taken: usize,
    own: usize,
    reusable: impl Fn(usize) -> usize,
) -> Option<(usize, usize)> {
    (0..n)
        .filter(|&t| t != taken)
        .map(|t| (t, reusable(t)))
        .max_by_key(|&(t, r)| (r, std::cmp::Reverse(t)))
        .filter(|&(_, r)| r > own)
}
