//! [`InferenceRunner`]: requests in, events out, over any [`Generator`].
//!
//! A request (token ids or raw text, sampling, a token limit, stop strings, a time limit) is
//! submitted with a sink, a callback that receives its [`Event`]s: `Accepted`, then `Delta`s of
//! text (and the tokens behind them), then one `Finished` with the reason and usage — or an
//! `Error`. Requests wait in a bounded queue until a generation slot is free and join the
//! running batch between two decode steps. The runner does the text side: incremental
//! detokenization, stop strings, end-of-generation tokens, token and context limits, timings.
//!
//! Two ways to drive it: [`InferenceRunner::inline`], where the host calls
//! [`InferenceRunner::tick`] (each call does at most one prefill or one decode step), and
//! [`InferenceRunner::threaded`], which runs the same loop on its own worker thread. Either way
//! [`RunnerHandle`]s submit, cancel and read statistics from any thread.

mod warm_up;
mod worker;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vkllm_tokenizer::{EncodeOptions, Tokenizer};

use crate::error::EngineError;
use crate::generator::{Generator, SlotParams, TokenOut, validate_params};
use crate::session::{FinishReason, Usage};
pub use warm_up::{WarmUpReport, warm_up, warm_up_lengths};
use worker::Core;

/// A request's number, unique within one runner.
pub type RequestId = u64;

/// Receives a request's events (on the runner's thread: it must not block, nor call back into
/// the runner). Returning `false` says the receiver is gone: the request is cancelled.
pub type Sink = Box<dyn FnMut(Event) -> bool + Send>;

/// What to generate from.
#[derive(Clone, Debug)]
pub enum Prompt {
    /// Token ids, used as they are.
    Tokens(Vec<u32>),
    /// Text, encoded as `vkllm run --raw` encodes it (`EncodeOptions::text()`: special tokens
    /// written in the text are matched, BOS/EOS added as the model's tokenizer config asks).
    Text(String),
}

/// One generation request.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Prompt,
    pub params: SlotParams,
    /// Most tokens to generate (at least 1); the context may end the request sooner (`Length`).
    pub max_tokens: usize,
    /// Stop strings: generation ends before the first occurrence, which is not emitted.
    pub stop: Vec<String>,
    /// Time limit from submission; `None` takes the runner's default.
    pub timeout: Option<Duration>,
}

impl Request {
    /// A request for `max_tokens` greedy tokens after `prompt`, no stop strings.
    pub fn new(prompt: Prompt, max_tokens: usize) -> Self {
        Request {
            prompt,
            params: SlotParams::default(),
            max_tokens,
            stop: Vec::new(),
            timeout: None,
        }
    }
}

/// What a sink receives.
#[derive(Debug)]
pub enum Event {
    /// The request is queued; always the first event.
    Accepted { id: RequestId, prompt_tokens: usize },
    /// New text (possibly empty while a character or a possible stop string is incomplete) and
    /// the generated tokens it came from. End-of-generation tokens are not included.
    Delta { text: String, tokens: Vec<TokenOut> },
    /// The last event of a request that ran; `stop` is the index (in [`Request::stop`]) of the
    /// stop string that ended it, when one did.
    Finished {
        reason: FinishReason,
        usage: Usage,
        stop: Option<usize>,
    },
    /// The last event of a request that failed after it was accepted.
    Error(EngineError),
}

/// Runner settings.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// Most requests waiting for a slot; `submit` beyond it fails with `QueueFull`.
    pub queue_capacity: usize,
    /// Default time limit of a request (from submission to its last token).
    pub timeout: Option<Duration>,
    /// Chunked prefill: a new prompt is computed at most this many tokens per scheduler turn,
    /// and the running requests take a decode step between pieces, so a long prompt does not
    /// stall them for its whole prefill (generators that prefill whole prompts only ignore it).
    /// 0: whole prompts, the running requests waiting. Default [`DEFAULT_PREFILL_CHUNK`].
    pub prefill_chunk: usize,
    /// With chunked prefill, a turn's `prefill_chunk` tokens are shared: when a prompt's last
    /// piece leaves some, the next queued prompts take them, so several short prompts join
    /// between two decode steps instead of one per step. `false`: one prompt's piece per turn
    /// (the reference).
    pub pack_prompts: bool,
    /// What a piece counts against that budget at least, in tokens: a piece of a few tokens
    /// still reads all the weights once, so the running requests wait about one chunk's time
    /// per turn however short the prompts (default [`MIN_PIECE_TOKENS`]).
    pub min_piece_tokens: usize,
}

/// A few-token prefill piece costs about as much as this many tokens of a whole chunk
/// (Llama-3.1-8B Q4_K_M on the H200: 16 tokens 8.1 ms, 512 tokens 58 ms, i.e. ~70 tokens'
/// worth), so a 512-token turn starts at most 8 short prompts.
pub const MIN_PIECE_TOKENS: usize = 64;

/// One prefill chunk of the model on devices with cooperative matrices (the size its prefill
/// runs at anyway), so pieces cost no extra passes over the weights there.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            queue_capacity: 64,
            timeout: None,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            pack_prompts: true,
            min_piece_tokens: MIN_PIECE_TOKENS,
        }
    }
}

/// A snapshot of the runner's load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerStats {
    /// Requests waiting for a slot.
    pub queued: usize,
    /// Requests generating.
    pub active: usize,
    /// Generation slots.
    pub slots: usize,
    /// Positions per slot.
    pub context: usize,
    /// KV positions held by the active requests (prompt plus generated tokens).
    pub kv_used: usize,
    /// Requests accepted since the start.
    pub accepted: u64,
    /// Requests that ended (any way) since the start.
    pub ended: u64,
    /// Decode steps run.
    pub steps: u64,
    /// Device bytes of the prefix store (conversations kept past their slots).
    pub prefix_cache_bytes: u64,
    /// KV rows given in place (shared blocks) between slots and the prefix store so far.
    pub kv_rows_shared: u64,
    /// Device bytes of paged KV memory held now.
    pub kv_paged_bytes: u64,
    /// Idle slots whose KV memory was given back for other requests (on demand) so far.
    pub kv_slots_reclaimed: u64,
}

struct Pending {
    id: RequestId,
    prompt: Vec<u32>,
    req: Request,
    sink: Sink,
    submitted: Instant,
    deadline: Option<Instant>,
}

struct Inbox {
    queue: VecDeque<Pending>,
    cancel: Vec<RequestId>,
    next_id: RequestId,
    shutdown: bool,
}

/// What every thread shares: the queue, cancellations and counters.
struct Shared {
    inbox: Mutex<Inbox>,
    wake: Condvar,
    tokenizer: Arc<Tokenizer>,
    config: RunnerConfig,
    slots: usize,
    context: usize,
    prefix_cache_bytes: u64,
    vocab: usize,
    active: AtomicUsize,
    kv_used: AtomicUsize,
    kv_rows_shared: AtomicU64,
    kv_paged_bytes: AtomicU64,
    kv_slots_reclaimed: AtomicU64,
    accepted: AtomicU64,
    ended: AtomicU64,
    steps: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inbox> {
        // A sink that panicked poisons nothing we rely on: the data stays consistent.
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Submits, cancels and observes requests; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct RunnerHandle {
    shared: Arc<Shared>,
}

impl RunnerHandle {
    /// Queues `req`; its events go to `sink`, starting with `Accepted` (sent before this
    /// returns). Fails at once, sending nothing, when the prompt is empty, does not fit the
    /// context, has an id outside the vocabulary, the parameters are invalid, the queue is
    /// full, or the runner has shut down.
    pub fn submit(&self, req: Request, mut sink: Sink) -> Result<RequestId, EngineError> {
        let s = &self.shared;
        let prompt = match &req.prompt {
            Prompt::Tokens(t) => t.clone(),
            Prompt::Text(text) => s.tokenizer.encode(text, EncodeOptions::text())?,
        };
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if prompt.len() >= s.context {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                ctx: s.context,
            });
        }
        if let Some(&id) = prompt.iter().find(|&&id| id as usize >= s.vocab) {
            return Err(EngineError::InvalidRequest {
                what: "prompt token id",
                value: id.to_string(),
                expected: "an id inside the vocabulary",
            });
        }
        if req.max_tokens == 0 {
            return Err(EngineError::InvalidRequest {
                what: "max_tokens",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        validate_params(&req.params, s.vocab)?;
        let submitted = Instant::now();
        let deadline = req
            .timeout
            .or(s.config.timeout)
            .map(|t| submitted + t.min(Duration::from_secs(1 << 30)));
        let mut inbox = s.lock();
        if inbox.shutdown {
            return Err(EngineError::Shutdown);
        }
        if inbox.queue.len() >= s.config.queue_capacity {
            return Err(EngineError::QueueFull {
                capacity: s.config.queue_capacity,
            });
        }
        let id = inbox.next_id;
        inbox.next_id += 1;
        s.accepted.fetch_add(1, Ordering::Relaxed);
        let prompt_tokens = prompt.len();
        // Under the lock, so that Accepted comes before anything the worker sends.
        if !sink(Event::Accepted { id, prompt_tokens }) {
            s.ended.fetch_add(1, Ordering::Relaxed);
            return Ok(id);
        }
        inbox.queue.push_back(Pending {
            id,
            prompt,
            req,
            sink,
            submitted,
            deadline,
        });
        drop(inbox);
        s.wake.notify_all();
        Ok(id)
    }

    /// Asks for request `id` to end (`Finished` with `Cancelled`) before the next decode step;
    /// unknown or finished ids are ignored.
    pub fn cancel(&self, id: RequestId) {
        self.shared.lock().cancel.push(id);
        self.shared.wake.notify_all();
    }

    /// The current load.
    pub fn stats(&self) -> RunnerStats {
        let s = &self.shared;
        let queued = s.lock().queue.len();
        RunnerStats {
            queued,
            active: s.active.load(Ordering::Relaxed),
            slots: s.slots,
            context: s.context,
            kv_used: s.kv_used.load(Ordering::Relaxed),
            accepted: s.accepted.load(Ordering::Relaxed),
            ended: s.ended.load(Ordering::Relaxed),
            steps: s.steps.load(Ordering::Relaxed),
            prefix_cache_bytes: s.prefix_cache_bytes,
            kv_rows_shared: s.kv_rows_shared.load(Ordering::Relaxed),
            kv_paged_bytes: s.kv_paged_bytes.load(Ordering::Relaxed),
            kv_slots_reclaimed: s.kv_slots_reclaimed.load(Ordering::Relaxed),
        }
    }

    /// The tokenizer requests are encoded and decoded with.
    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.shared.tokenizer
    }

    /// Positions per slot: a prompt must be shorter than this.
    pub fn context(&self) -> usize {
        self.shared.context
    }

    /// The model's vocabulary size.
    pub fn vocab(&self) -> usize {
        self.shared.vocab
    }

    /// The queue's capacity.
    pub fn queue_capacity(&self) -> usize {
        self.shared.config.queue_capacity
    }
}

/// Runs requests on a [`Generator`]; see the module docs.
pub struct InferenceRunner {
    handle: RunnerHandle,
    mode: Mode,
}

enum Mode {
    Inline(Box<Core>),
    Threaded(Option<JoinHandle<()>>),
}

impl InferenceRunner {
    /// A runner the host drives with [`InferenceRunner::tick`].
    pub fn inline(
        generator: Box<dyn Generator>,
        tokenizer: Arc<Tokenizer>,
        config: RunnerConfig,
    ) -> Self {
        let (handle, core) = Core::new(generator, tokenizer, config);
        InferenceRunner {
            handle,
            mode: Mode::Inline(Box::new(core)),
        }
    }

    /// A runner with its own worker thread; dropping it (or [`InferenceRunner::shutdown`])
    /// cancels what is left and joins the thread.
    pub fn threaded(
        generator: Box<dyn Generator>,
        tokenizer: Arc<Tokenizer>,
        config: RunnerConfig,
    ) -> Self {
        let (handle, mut core) = Core::new(generator, tokenizer, config);
        let worker = std::thread::Builder::new()
            .name("vkllm-runner".into())
            .spawn(move || core.run())
            .ok();
        let runner = InferenceRunner {
            handle,
            mode: Mode::Threaded(worker),
        };
        if matches!(runner.mode, Mode::Threaded(None)) {
            // No thread could be made: refuse work rather than queue it forever.
            runner.handle.shared.lock().shutdown = true;
        }
        runner
    }

    /// A handle for submitting from other threads.
    pub fn handle(&self) -> RunnerHandle {
        self.handle.clone()
    }

    /// See [`RunnerHandle::submit`].
    pub fn submit(&self, req: Request, sink: Sink) -> Result<RequestId, EngineError> {
        self.handle.submit(req, sink)
    }

    /// See [`RunnerHandle::cancel`].
    pub fn cancel(&self, id: RequestId) {
        self.handle.cancel(id)
    }

    /// See [`RunnerHandle::stats`].
    pub fn stats(&self) -> RunnerStats {
        self.handle.stats()
    }

    /// Inline mode: handles cancellations and time limits, then does at most one prefill (a
    /// queued request joins the batch) or one decode step; returns whether there was anything
    /// to do. Threaded mode: does nothing and returns `false` (the worker ticks).
    pub fn tick(&mut self) -> bool {
        match &mut self.mode {
            Mode::Inline(core) => core.tick(),
            Mode::Threaded(_) => false,
        }
    }

    /// Inline mode: ticks until no request is queued or running.
    pub fn run_until_idle(&mut self) {
        while self.tick() {}
    }

    /// Stops accepting requests, cancels those left, and (threaded) joins the worker.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.handle.shared.lock().shutdown = true;
        self.handle.shared.wake.notify_all();
        match &mut self.mode {
            Mode::Inline(core) => core.cancel_all(),
            Mode::Threaded(worker) => {
                if let Some(w) = worker.take() {
                    // A panic in the worker has already been reported by the panic hook.
                    let _ = w.join();
                }
            }
        }
    }
}

impl Drop for InferenceRunner {
    fn drop(&mut self) {
        self.stop();
    }
}
