//! The worker side of the runner: the generator, the running requests, and the text side of
//! each token (detokenization, stops, limits).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use vkllm_tokenizer::{StopMatcher, Tokenizer};

use super::{Event, Inbox, Pending, RequestId, RunnerConfig, RunnerHandle, Shared, Sink};
use crate::error::EngineError;
use crate::generator::{Generator, SlotId, TokenOut};
use crate::session::{FinishReason, Usage};

/// Streaming detokenizer over a shared tokenizer (the same window rule as
/// `vkllm_tokenizer::IncrementalDecoder`, without borrowing the tokenizer).
#[derive(Default)]
struct Detok {
    ids: Vec<u32>,
    read: usize,
}

impl Detok {
    fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<Option<String>, EngineError> {
        self.ids.push(id);
        let prefix = tok.decode(&self.ids[..self.read], true)?;
        let all = tok.decode(&self.ids, true)?;
        if all.len() > prefix.len() && all.starts_with(&prefix) && !all.ends_with('\u{FFFD}') {
            let delta = all[prefix.len()..].to_string();
            self.ids.drain(..self.read);
            self.read = self.ids.len();
            return Ok(Some(delta));
        }
        Ok(None)
    }

    fn flush(&mut self, tok: &Tokenizer) -> Result<String, EngineError> {
        let prefix = tok.decode(&self.ids[..self.read], true)?;
        let all = tok.decode(&self.ids, true)?;
        self.ids.clear();
        self.read = 0;
        Ok(match all.strip_prefix(&prefix) {
            Some(d) => d.to_string(),
            None => all,
        })
    }
}

/// A request holding a slot.
struct Running {
    id: RequestId,
    slot: SlotId,
    sink: Sink,
    detok: Detok,
    stops: StopMatcher,
    prompt_len: usize,
    /// Prompt tokens taken from the slot's cache.
    reused: usize,
    generated: usize,
    max_tokens: usize,
    submitted: Instant,
    deadline: Option<Instant>,
    prefill: Duration,
    /// The stop string that matched.
    stop_hit: Option<usize>,
    first_at: Instant,
    last_at: Instant,
}

impl Running {
    fn usage(&self, reason: FinishReason) -> Usage {
        let decode = self.last_at.duration_since(self.first_at).as_secs_f64();
        Usage {
            prompt_tokens: self.prompt_len,
            reused_tokens: self.reused,
            generated_tokens: self.generated,
            finish: reason,
            time_to_first_token: self.first_at.duration_since(self.submitted),
            prefill_tokens_per_s: (self.prompt_len - self.reused.min(self.prompt_len)) as f64
                / self.prefill.as_secs_f64().max(1e-9),
            decode_tokens_per_s: if self.generated > 1 {
                (self.generated - 1) as f64 / decode.max(1e-9)
            } else {
                0.0
            },
        }
    }
}

/// The worker side: the generator and the running requests.
pub(super) struct Core {
    generator: Box<dyn Generator>,
    shared: Arc<Shared>,
    running: Vec<Running>,
    /// The request whose prompt is being prefilled in pieces, if any.
    prefilling: Option<Prefilling>,
    /// A prompt found no KV memory (on demand) while this many requests ran: it waits at the
    /// head of the queue until fewer run.
    kv_wait: Option<usize>,
}

/// A request between `Generator::begin` and its first token.
struct Prefilling {
    p: Pending,
    slot: SlotId,
    /// Time spent computing its pieces.
    spent: Duration,
}

fn empty_usage(prompt_tokens: usize, submitted: Instant, reason: FinishReason) -> Usage {
    Usage {
        prompt_tokens,
        reused_tokens: 0,
        generated_tokens: 0,
        finish: reason,
        time_to_first_token: submitted.elapsed(),
        prefill_tokens_per_s: 0.0,
        decode_tokens_per_s: 0.0,
    }
}

impl Core {
    pub(super) fn new(
        generator: Box<dyn Generator>,
        tokenizer: Arc<Tokenizer>,
        config: RunnerConfig,
    ) -> (RunnerHandle, Core) {
        let shared = Arc::new(Shared {
            inbox: Mutex::new(Inbox {
                queue: VecDeque::new(),
                cancel: Vec::new(),
                next_id: 1,
                shutdown: false,
            }),
            wake: Condvar::new(),
            tokenizer,
            config,
            slots: generator.max_slots(),
            context: generator.context(),
            prefix_cache_bytes: generator.prefix_cache_bytes(),
            vocab: generator.vocab(),
            active: AtomicUsize::new(0),
            kv_used: AtomicUsize::new(0),
            kv_rows_shared: AtomicU64::new(0),
            kv_paged_bytes: AtomicU64::new(0),
            kv_slots_reclaimed: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            steps: AtomicU64::new(0),
        });
        let handle = RunnerHandle {
            shared: shared.clone(),
        };
        let core = Core {
            generator,
            shared,
            running: Vec::new(),
            prefilling: None,
            kv_wait: None,
        };
        (handle, core)
    }

    /// The worker loop (threaded mode).
    pub(super) fn run(&mut self) {
        loop {
            if self.tick() {
                continue;
            }
            let s = self.shared.clone();
            let mut inbox = s.lock();
            if inbox.shutdown {
                drop(inbox);
                self.cancel_all();
                return;
            }
            if inbox.queue.is_empty()
                && inbox.cancel.is_empty()
                && self.running.is_empty()
                && self.prefilling.is_none()
            {
                inbox = s
                    .wake
                    .wait_timeout(inbox, Duration::from_secs(1))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            drop(inbox);
        }
    }

    pub(super) fn tick(&mut self) -> bool {
        let (cancels, shutdown) = {
            let mut inbox = self.shared.lock();
            (std::mem::take(&mut inbox.cancel), inbox.shutdown)
        };
        if shutdown {
            let busy = !self.running.is_empty()
                || self.prefilling.is_some()
                || !self.shared.lock().queue.is_empty();
            self.cancel_all();
            return busy;
        }
        let mut did = !cancels.is_empty();
        for id in cancels {
            self.end_queued(|p| p.id == id, FinishReason::Cancelled);
            if self.prefilling.as_ref().is_some_and(|f| f.p.id == id) {
                self.abandon_prefill(FinishReason::Cancelled);
            }
            if let Some(i) = self.running.iter().position(|r| r.id == id) {
                self.finish(i, FinishReason::Cancelled);
            }
        }
        let now = Instant::now();
        did |= self.end_queued(
            |p| p.deadline.is_some_and(|d| d <= now),
            FinishReason::Timeout,
        );
        while let Some(i) = self
            .running
            .iter()
            .position(|r| r.deadline.is_some_and(|d| d <= now))
        {
            self.finish(i, FinishReason::Timeout);
            did = true;
        }
        if self
            .prefilling
            .as_ref()
            .is_some_and(|f| f.p.deadline.is_some_and(|d| d <= now))
        {
            self.abandon_prefill(FinishReason::Timeout);
            did = true;
        }
        // Prompt pieces of up to `prefill_chunk` tokens in all (with `pack_prompts`: a prompt
        // that ends with some left hands them to the next queued one), then a decode step of
        // the running requests.
        let chunk = self.shared.config.prefill_chunk;
        let mut budget = chunk;
        loop {
            if self.prefilling.is_none() {
                let Some(p) = self.next_queued() else {
                    break;
                };
                did = true;
                if chunk == 0 {
                    self.prefill(p);
                    self.publish();
                    return true;
                }
                match self.generator.begin(&p.prompt, &p.req.params) {
                    Ok(Some(slot)) => {
                        self.prefilling = Some(Prefilling {
                            p,
                            slot,
                            spent: Duration::ZERO,
                        })
                    }
                    Ok(None) => {
                        self.prefill(p);
                        self.publish();
                        return true;
                    }
                    Err(e) => {
                        let Some(mut p) = self.wait_for_kv(p, &e) else {
                            break;
                        };
                        (p.sink)(Event::Error(e));
                        self.shared.ended.fetch_add(1, Ordering::Relaxed);
                        if !self.shared.config.pack_prompts {
                            break;
                        }
                        continue;
                    }
                }
            }
            let Some(slot) = self.prefilling.as_ref().map(|f| f.slot) else {
                break;
            };
            let left = self.generator.prefill_left(slot);
            self.prefill_piece(budget);
            did = true;
            // Tokens the piece computed (all of the budget when the generator cannot say).
            let used = match (left, self.prefilling.as_ref()) {
                (Some(before), None) => before,
                (Some(before), Some(_)) => {
                    before.saturating_sub(self.generator.prefill_left(slot).unwrap_or(0))
                }
                (None, _) => budget,
            };
            let least = self.shared.config.min_piece_tokens.max(1);
            budget = budget.saturating_sub(used.max(least));
            if budget == 0 || !self.shared.config.pack_prompts {
                break;
            }
        }
        if !self.running.is_empty() {
            self.step();
            did = true;
        }
        self.publish();
        did
    }

    /// The next queued request when a slot is free and no prompt is being prefilled, counted
    /// as running from here (under the queue's lock: a request is never invisible to `stats`
    /// during its prefill).
    fn next_queued(&mut self) -> Option<Pending> {
        if self.running.len() >= self.generator.max_slots() || self.prefilling.is_some() {
            return None;
        }
        match self.kv_wait {
            Some(n) if self.running.len() >= n && !self.running.is_empty() => return None,
            _ => self.kv_wait = None,
        }
        let mut inbox = self.shared.lock();
        let p = inbox.queue.pop_front();
        if p.is_some() {
            self.shared
                .active
                .store(self.running.len() + 1, Ordering::Relaxed);
        }
        p
    }

    /// Computes the next piece of the prompt being prefilled; with its last piece the request
    /// gets its first token and joins the running ones.
    fn prefill_piece(&mut self, chunk: usize) {
        let Some(mut f) = self.prefilling.take() else {
            return;
        };
        let t0 = Instant::now();
        match self.generator.prefill_some(f.slot, chunk) {
            Err(e) => {
                self.generator.release(f.slot);
                (f.p.sink)(Event::Error(e));
                self.shared.ended.fetch_add(1, Ordering::Relaxed);
            }
            Ok(None) => {
                f.spent += t0.elapsed();
                self.prefilling = Some(f);
            }
            Ok(Some(tok)) => {
                let now = Instant::now();
                f.spent += now.duration_since(t0);
                self.admit(f.p, f.slot, tok, f.spent, now);
            }
        }
    }

    /// Ends the request being prefilled (cancelled or out of time) and frees its slot.
    fn abandon_prefill(&mut self, reason: FinishReason) {
        if let Some(mut f) = self.prefilling.take() {
            self.generator.release(f.slot);
            let usage = empty_usage(f.p.prompt.len(), f.p.submitted, reason);
            (f.p.sink)(Event::Finished {
                reason,
                usage,
                stop: None,
            });
            self.shared.ended.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn publish(&self) {
        let s = &self.shared;
        let prefilling = self.prefilling.as_ref().map_or(0, |f| f.p.prompt.len());
        s.active.store(
            self.running.len() + usize::from(prefilling > 0),
            Ordering::Relaxed,
        );
        let kv: usize = self
            .running
            .iter()
            .map(|r| r.prompt_len + r.generated)
            .sum::<usize>()
            + prefilling;
        s.kv_used.store(kv, Ordering::Relaxed);
        s.kv_rows_shared
            .store(self.generator.kv_rows_shared(), Ordering::Relaxed);
        let (bytes, reclaimed) = self.generator.kv_paged_memory();
        s.kv_paged_bytes.store(bytes, Ordering::Relaxed);
        s.kv_slots_reclaimed.store(reclaimed, Ordering::Relaxed);
    }

    /// Removes the queued requests `pred` selects and finishes them with `reason`.
    fn end_queued(&mut self, pred: impl Fn(&Pending) -> bool, reason: FinishReason) -> bool {
        let ended: Vec<Pending> = {
            let mut inbox = self.shared.lock();
            let (gone, kept): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut inbox.queue)
                .into_iter()
                .partition(|p| pred(p));
            inbox.queue = kept.into();
            gone
        };
        let any = !ended.is_empty();
        for mut p in ended {
            let usage = empty_usage(p.prompt.len(), p.submitted, reason);
            (p.sink)(Event::Finished {
                reason,
                usage,
                stop: None,
            });
            self.shared.ended.fetch_add(1, Ordering::Relaxed);
        }
        any
    }

    /// A prompt that found no KV memory while other requests run goes back to the head of the
    /// queue until one of them ends (their memory frees; `None`); other errors are its own.
    fn wait_for_kv(&mut self, p: Pending, e: &EngineError) -> Option<Pending> {
        let kv_full = matches!(
            e,
            EngineError::Model(vkllm_models::ModelError::KvPagesFull { .. })
        );
        if !kv_full || self.running.is_empty() {
            return Some(p);
        }
        self.kv_wait = Some(self.running.len());
        self.shared.lock().queue.push_front(p);
        None
    }

    fn prefill(&mut self, p: Pending) {
        let t0 = Instant::now();
        match self.generator.start(&p.prompt, &p.req.params) {
            Err(e) => {
                if let Some(mut p) = self.wait_for_kv(p, &e) {
                    (p.sink)(Event::Error(e));
                    self.shared.ended.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok((slot, tok)) => {
                let now = Instant::now();
                self.admit(p, slot, tok, now.duration_since(t0), now);
            }
        }
    }

    /// A request whose prompt is in `slot` joins the running ones with its first token.
    fn admit(&mut self, p: Pending, slot: SlotId, tok: TokenOut, prefill: Duration, now: Instant) {
        self.running.push(Running {
            id: p.id,
            slot,
            sink: p.sink,
            detok: Detok::default(),
            stops: StopMatcher::new(p.req.stop.iter().map(String::as_str)),
            prompt_len: p.prompt.len(),
            reused: self.generator.reused(slot),
            generated: 0,
            max_tokens: p.req.max_tokens,
            submitted: p.submitted,
            deadline: p.deadline,
            prefill,
            stop_hit: None,
            first_at: now,
            last_at: now,
        });
        let i = self.running.len() - 1;
        self.deliver(i, vec![tok]);
    }

    fn step(&mut self) {
        self.shared.steps.fetch_add(1, Ordering::Relaxed);
        match self.generator.step() {
            Err(e) => {
                let message = e.to_string();
                while let Some(mut r) = self.running.pop() {
                    self.generator.release(r.slot);
                    (r.sink)(Event::Error(EngineError::StepFailed {
                        message: message.clone(),
                    }));
                    self.shared.ended.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(out) => {
                let now = Instant::now();
                let mut served = Vec::with_capacity(out.len());
                for (slot, toks) in out {
                    // Look the slot up each time: finishing removes entries.
                    let Some(i) = self.running.iter().position(|r| r.slot == slot) else {
                        continue;
                    };
                    served.push(slot);
                    self.running[i].last_at = now;
                    self.deliver(i, toks);
                }
                // A running slot the generator left out has a full context.
                while let Some(i) = self.running.iter().position(|r| !served.contains(&r.slot)) {
                    self.finish(i, FinishReason::Length);
                }
            }
        }
    }

    /// Hands a slot's new tokens to its request: text, stops, limits.
    fn deliver(&mut self, i: usize, toks: Vec<TokenOut>) {
        let tok = self.shared.tokenizer.clone();
        let ctx = self.shared.context;
        let r = &mut self.running[i];
        match absorb(r, &tok, ctx, toks) {
            Err(e) => {
                let mut r = self.running.remove(i);
                self.generator.release(r.slot);
                (r.sink)(Event::Error(e));
                self.shared.ended.fetch_add(1, Ordering::Relaxed);
            }
            Ok((text, tokens, finish)) => {
                let alive = if text.is_empty() && tokens.is_empty() {
                    true
                } else {
                    (r.sink)(Event::Delta { text, tokens })
                };
                if !alive {
                    self.finish(i, FinishReason::Cancelled);
                } else if let Some(f) = finish {
                    self.finish(i, f);
                }
            }
        }
    }

    /// Ends running request `i`: frees its slot and sends `Finished` (after the text still
    /// held back, for a time limit).
    fn finish(&mut self, i: usize, reason: FinishReason) {
        let mut r = self.running.remove(i);
        self.generator.release(r.slot);
        let mut reason = reason;
        if reason == FinishReason::Timeout {
            let tok = self.shared.tokenizer.clone();
            if let Ok((text, stopped)) = flush_tail(&mut r, &tok)
                && !text.is_empty()
            {
                if stopped {
                    reason = FinishReason::Stop;
                }
                (r.sink)(Event::Delta {
                    text,
                    tokens: Vec::new(),
                });
            }
        }
        let usage = r.usage(reason);
        let stop = r.stop_hit.filter(|_| reason == FinishReason::Stop);
        (r.sink)(Event::Finished {
            reason,
            usage,
            stop,
        });
        self.shared.ended.fetch_add(1, Ordering::Relaxed);
    }

    /// Cancels everything queued or running.
    pub(super) fn cancel_all(&mut self) {
        self.end_queued(|_| true, FinishReason::Cancelled);
        self.abandon_prefill(FinishReason::Cancelled);
        while !self.running.is_empty() {
            self.finish(self.running.len() - 1, FinishReason::Cancelled);
        }
        self.publish();
    }
}

/// Takes a step's tokens for `r`: counts them, decodes them, applies end-of-generation, stop
/// strings, `max_tokens` and the context. Returns the text to show, the tokens kept (none past
/// the end) and the finish reason, if the request ended.
fn absorb(
    r: &mut Running,
    tok: &Tokenizer,
    ctx: usize,
    toks: Vec<TokenOut>,
) -> Result<(String, Vec<TokenOut>, Option<FinishReason>), EngineError> {
    let mut text = String::new();
    let mut kept = Vec::with_capacity(toks.len());
    let mut finish = None;
    for t in toks {
        if tok.is_eog(t.id) {
            finish = Some(FinishReason::EndOfGeneration);
            break;
        }
        r.generated += 1;
        let id = t.id;
        kept.push(t);
        if let Some(piece) = r.detok.push(tok, id)? {
            let step = r.stops.push(&piece);
            text.push_str(&step.text);
            if step.stopped.is_some() {
                r.stop_hit = step.stopped;
                finish = Some(FinishReason::Stop);
                break;
            }
        }
        // Prompt plus generated tokens may fill the context, not more.
        if r.generated >= r.max_tokens || r.prompt_len + r.generated >= ctx {
            finish = Some(FinishReason::Length);
            break;
        }
    }
    if let Some(f) = finish
        && f != FinishReason::Stop
    {
        let (tail, stopped) = flush_tail(r, tok)?;
        text.push_str(&tail);
        if stopped {
            finish = Some(FinishReason::Stop);
        }
    }
    Ok((text, kept, finish))
}

/// The text the decoder and the stop matcher still hold, at the end of a request; `true` when
/// it completes a stop string (the text then ends before it).
fn flush_tail(r: &mut Running, tok: &Tokenizer) -> Result<(String, bool), EngineError> {
    let tail = r.detok.flush(tok)?;
    let step = r.stops.push(&tail);
    let mut text = step.text;
    if step.stopped.is_some() {
        r.stop_hit = step.stopped;
        return Ok((text, true));
    }
    text.push_str(&r.stops.finish());
    Ok((text, false))
}
