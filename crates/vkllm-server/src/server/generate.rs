//! The bridge from HTTP handlers to the runner: `n` requests submitted with sinks that forward
//! their events into a tokio channel (the runner's thread calls the sink; an unbounded send
//! never blocks), and a guard that cancels whatever has not finished when the handler or its
//! response stream is dropped (a client that went away).

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use vkllm_engine::{
    Event, FinishReason, Prompt, Request, RequestId, RunnerHandle, SlotParams, TokenOut,
};

use super::AppState;
use super::error::{Api, ApiError, Kind};
use super::output::{self, OutputParser, ParserSpec, Piece, Reply};

/// What to generate, for every choice.
#[derive(Clone, Debug)]
pub struct GenSpec {
    pub prompt: Vec<u32>,
    pub params: SlotParams,
    pub max_tokens: usize,
    pub stop: Vec<String>,
    pub n: usize,
    /// The seed of choice 0 (choice i uses seed + i); `None` draws one per choice.
    pub seed: Option<u64>,
    /// The response id, for log lines.
    pub tag: String,
}

/// One choice's event.
pub enum ChoiceEvent {
    Delta {
        text: String,
        tokens: Vec<TokenOut>,
    },
    Finished {
        reason: FinishReason,
        stop: Option<usize>,
    },
    Failed(ApiError),
}

/// Running choices.
pub struct Generation {
    rx: UnboundedReceiver<(usize, Event)>,
    guard: CancelGuard,
    /// Choices the handler stopped itself (their last events are dropped).
    stopped: Vec<bool>,
    api: Api,
    pub prompt_tokens: usize,
    /// Prompt tokens taken from a slot's cache (the most of any finished choice).
    pub cached_tokens: usize,
}

/// Cancels the requests not yet finished when dropped.
struct CancelGuard {
    runner: RunnerHandle,
    ids: Vec<(RequestId, bool)>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        for &(id, done) in &self.ids {
            if !done {
                self.runner.cancel(id);
            }
        }
    }
}

/// Starts the `n` choices of `spec`; a failed submission cancels those already queued.
pub fn launch(state: &Arc<AppState>, api: Api, spec: GenSpec) -> Result<Generation, ApiError> {
    let (tx, rx) = unbounded_channel();
    let mut guard = CancelGuard {
        runner: state.runner.clone(),
        ids: Vec::with_capacity(spec.n),
    };
    let base_seed = spec.seed.unwrap_or_else(rand::random);
    for i in 0..spec.n {
        let mut params = spec.params.clone();
        params.sampling.seed = base_seed.wrapping_add(i as u64);
        let req = Request {
            prompt: Prompt::Tokens(spec.prompt.clone()),
            params,
            max_tokens: spec.max_tokens,
            stop: spec.stop.clone(),
            timeout: None,
        };
        let tx = tx.clone();
        let metrics = state.clone();
        let tag = spec.tag.clone();
        let submitted = Instant::now();
        let mut last: Option<Instant> = None;
        let sink = Box::new(move |e: Event| {
            match &e {
                Event::Delta { tokens, .. } if !tokens.is_empty() => {
                    let now = Instant::now();
                    if let Some(prev) = last {
                        let gap = now.duration_since(prev).as_secs_f64() / tokens.len() as f64;
                        metrics.metrics.token_gap(gap, tokens.len());
                    }
                    last = Some(now);
                }
                Event::Finished { reason, usage, .. } => {
                    let secs = submitted.elapsed().as_secs_f64();
                    metrics.metrics.finished(usage, *reason, secs);
                    metrics.log(&[
                        ("event", &"finished"),
                        ("id", &tag),
                        ("choice", &i),
                        ("reason", &format!("{reason:?}")),
                        ("prompt_tokens", &usage.prompt_tokens),
                        ("cached_tokens", &usage.reused_tokens),
                        ("generated_tokens", &usage.generated_tokens),
                        (
                            "ttft_ms",
                            &format!("{:.1}", usage.time_to_first_token.as_secs_f64() * 1e3),
                        ),
                        ("prefill_tps", &format!("{:.1}", usage.prefill_tokens_per_s)),
                        ("decode_tps", &format!("{:.1}", usage.decode_tokens_per_s)),
                        ("total_ms", &format!("{:.1}", secs * 1e3)),
                    ]);
                }
                _ => {}
            }
            tx.send((i, e)).is_ok()
        });
        match state.runner.submit(req, sink) {
            Ok(id) => guard.ids.push((id, false)),
            Err(e) => return Err(ApiError::engine(api, &e)),
        }
    }
    Ok(Generation {
        rx,
        guard,
        stopped: vec![false; spec.n],
        api,
        prompt_tokens: spec.prompt.len(),
        cached_tokens: 0,
    })
}

impl Generation {
    /// The next event of any choice; `None` when every choice has ended.
    pub async fn next(&mut self) -> Option<(usize, ChoiceEvent)> {
        loop {
            if self.guard.ids.iter().all(|&(_, done)| done) {
                return None;
            }
            let (i, e) = self.rx.recv().await?;
            if self.stopped.get(i).copied().unwrap_or(true) {
                continue;
            }
            let ev = match e {
                Event::Accepted { .. } => continue,
                Event::Delta { text, tokens } => ChoiceEvent::Delta { text, tokens },
                Event::Finished {
                    reason,
                    stop,
                    usage,
                } => {
                    self.guard.ids[i].1 = true;
                    self.cached_tokens = self.cached_tokens.max(usage.reused_tokens);
                    match reason {
                        FinishReason::Timeout => ChoiceEvent::Failed(ApiError::new(
                            self.api,
                            Kind::Timeout,
                            "the request ran past the server's time limit (--timeout)",
                        )),
                        FinishReason::Cancelled => ChoiceEvent::Failed(ApiError::new(
                            self.api,
                            Kind::Unavailable,
                            "the request was cancelled (the server is shutting down)",
                        )),
                        _ => ChoiceEvent::Finished { reason, stop },
                    }
                }
                Event::Error(e) => {
                    self.guard.ids[i].1 = true;
                    ChoiceEvent::Failed(ApiError::engine(self.api, &e))
                }
            };
            return Some((i, ev));
        }
    }

    /// Stops choice `i` early (its forced tool call is complete); no more events come from it.
    pub fn stop_choice(&mut self, i: usize) {
        if let Some((id, done)) = self.guard.ids.get_mut(i)
            && !*done
        {
            *done = true;
            self.stopped[i] = true;
            self.guard.runner.cancel(*id);
        }
    }
}

/// How a choice ended, in API-neutral terms.
#[derive(Clone, Debug, PartialEq)]
pub enum Finish {
    /// The model ended its turn.
    EndTurn,
    /// A stop string (the one given) ended it.
    Stop(String),
    /// The token limit or the context.
    Length,
    /// The reply holds tool calls.
    Tools,
}

/// One choice as it streams: its output parser, its tokens, its reply so far.
pub struct ChoiceState {
    parser: OutputParser,
    /// The reply so far (whole-response handlers use it; streams send pieces as they come).
    pub reply: Reply,
    /// Generated tokens (with logprobs when asked for).
    pub tokens: Vec<TokenOut>,
    pub finish: Option<Finish>,
    stops: Vec<String>,
    /// Index in `stops` of the server's own stop (a forced call's closing tag).
    tool_stop: Option<usize>,
}

impl ChoiceState {
    pub fn new(spec: &ParserSpec, stops: &[String], tool_stop: Option<usize>) -> Self {
        ChoiceState {
            parser: spec.make(),
            reply: Reply::default(),
            tokens: Vec::new(),
            finish: None,
            stops: stops.to_vec(),
            tool_stop,
        }
    }

    /// New text and tokens; returns the pieces they complete and whether the choice is
    /// complete already (a single forced call parsed: stop generating).
    pub fn delta(&mut self, text: &str, tokens: Vec<TokenOut>) -> (Vec<Piece>, bool) {
        self.tokens.extend(tokens);
        let mut pieces = self.parser.push(text);
        let done = self.parser.done();
        if done {
            pieces.extend(self.parser.finish());
            self.finish = Some(Finish::Tools);
        }
        self.reply.add(pieces.clone());
        (pieces, done)
    }

    /// The end of generation: the pieces still held, and the finish.
    pub fn end(&mut self, reason: FinishReason, stop: Option<usize>) -> Vec<Piece> {
        let mut pieces = Vec::new();
        if stop.is_some() && stop == self.tool_stop {
            // The server's own stop: the closing tag belongs to the call.
            pieces.extend(self.parser.push(output::CLOSE));
        }
        pieces.extend(self.parser.finish());
        self.reply.add(pieces.clone());
        self.finish = Some(if !self.reply.tools.is_empty() {
            Finish::Tools
        } else {
            match (reason, stop) {
                (FinishReason::Stop, Some(i)) => {
                    Finish::Stop(self.stops.get(i).cloned().unwrap_or_default())
                }
                (FinishReason::Length, _) => Finish::Length,
                _ => Finish::EndTurn,
            }
        });
        pieces
    }
}
