//! The runner's scheduling on a scripted generator: queueing, joining the batch between steps,
//! cancellation, time limits, stops, limits and errors. The fake generator repeats its prompt
//! token by token (so the expected text of every case is known by hand).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{EOS, char_tokenizer, ids};
use vkllm_engine::{
    EngineError, Event, FinishReason, Generator, InferenceRunner, Prompt, Request, RunnerConfig,
    SlotId, SlotParams, TokenOut,
};

/// Calls the runner made, in order: `start <slot>`, `step`, `release <slot>`.
type Log = Arc<Mutex<Vec<String>>>;

struct Fake {
    slots: Vec<Option<(Vec<u32>, usize)>>,
    ctx: usize,
    log: Log,
    /// Tokens per slot per step.
    per_step: usize,
    step_delay: Duration,
    fail_step: bool,
    /// Leave out of `step` slots that produced this many tokens (a full cache).
    full_after: Option<usize>,
    /// Chunked prefill (`begin` / `prefill_some`): each slot's prompt and tokens done.
    chunked: bool,
    pending: Vec<Option<(Vec<u32>, usize)>>,
}

impl Fake {
    fn new(slots: usize, log: &Log) -> Self {
        Fake {
            slots: vec![None; slots],
            ctx: 64,
            log: log.clone(),
            per_step: 1,
            step_delay: Duration::ZERO,
            fail_step: false,
            full_after: None,
            chunked: false,
            pending: vec![None; slots],
        }
    }

    fn out(id: u32) -> TokenOut {
        TokenOut {
            id,
            logprob: None,
            top: Vec::new(),
        }
    }
}

impl Generator for Fake {
    fn max_slots(&self) -> usize {
        self.slots.len()
    }
    fn context(&self) -> usize {
        self.ctx
    }
    fn vocab(&self) -> usize {
        256
    }
    fn start(
        &mut self,
        prompt: &[u32],
        _p: &SlotParams,
    ) -> Result<(SlotId, TokenOut), EngineError> {
        let Some(i) = self.slots.iter().position(Option::is_none) else {
            return Err(EngineError::NoFreeSlot {
                slots: self.slots.len(),
            });
        };
        self.slots[i] = Some((prompt.to_vec(), 1));
        self.log.lock().unwrap().push(format!("start {i}"));
        Ok((i, Fake::out(prompt[0])))
    }
    fn step(&mut self) -> Result<Vec<(SlotId, Vec<TokenOut>)>, EngineError> {
        std::thread::sleep(self.step_delay);
        self.log.lock().unwrap().push("step".into());
        if self.fail_step {
            return Err(EngineError::EmptyPrompt);
        }
        let mut out = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            let Some((prompt, pos)) = s else { continue };
            if self.full_after.is_some_and(|n| *pos >= n) {
                continue;
            }
            let toks = (0..self.per_step)
                .map(|k| Fake::out(prompt[(*pos + k) % prompt.len()]))
                .collect();
            *pos += self.per_step;
            out.push((i, toks));
        }
        Ok(out)
    }
    fn release(&mut self, slot: SlotId) {
        self.slots[slot] = None;
        self.pending[slot] = None;
        self.log.lock().unwrap().push(format!("release {slot}"));
    }
    fn begin(&mut self, prompt: &[u32], _p: &SlotParams) -> Result<Option<SlotId>, EngineError> {
        if !self.chunked {
            return Ok(None);
        }
        let free =
            (0..self.slots.len()).find(|&i| self.slots[i].is_none() && self.pending[i].is_none());
        let Some(i) = free else {
            return Err(EngineError::NoFreeSlot {
                slots: self.slots.len(),
            });
        };
        self.pending[i] = Some((prompt.to_vec(), 0));
        self.log.lock().unwrap().push(format!("begin {i}"));
        Ok(Some(i))
    }
    fn prefill_left(&self, slot: SlotId) -> Option<usize> {
        let (prompt, done) = self.pending.get(slot)?.as_ref()?;
        Some(prompt.len() - done)
    }
    fn prefill_some(
        &mut self,
        slot: SlotId,
        budget: usize,
    ) -> Result<Option<TokenOut>, EngineError> {
        let Some((prompt, done)) = self.pending[slot].as_mut() else {
            return Err(EngineError::NotPrefilling { slot });
        };
        let end = prompt.len().min(*done + budget);
        self.log
            .lock()
            .unwrap()
            .push(format!("piece {slot} {}", end - *done));
        *done = end;
        if end < prompt.len() {
            return Ok(None);
        }
        let prompt = prompt.clone();
        self.pending[slot] = None;
        let first = Fake::out(prompt[0]);
        self.slots[slot] = Some((prompt, 1));
        Ok(Some(first))
    }
}

/// Everything one request received.
#[derive(Default, Debug)]
struct Seen {
    accepted: Option<(u64, usize)>,
    text: String,
    tokens: Vec<u32>,
    finished: Option<(FinishReason, usize)>,
    error: Option<String>,
    stop: Option<usize>,
    events: usize,
}

type Shared = Arc<Mutex<Seen>>;

fn sink_into(seen: &Shared) -> vkllm_engine::Sink {
    let seen = seen.clone();
    Box::new(move |e| {
        let mut s = seen.lock().unwrap();
        assert!(
            s.finished.is_none() && s.error.is_none(),
            "event after the end"
        );
        s.events += 1;
        match e {
            Event::Accepted { id, prompt_tokens } => {
                assert_eq!(s.events, 1, "Accepted comes first");
                s.accepted = Some((id, prompt_tokens));
            }
            Event::Delta { text, tokens } => {
                s.text += &text;
                s.tokens.extend(tokens.iter().map(|t| t.id));
            }
            Event::Finished {
                reason,
                usage,
                stop,
            } => {
                assert_eq!(usage.finish, reason);
                assert_eq!(stop.is_some(), reason == FinishReason::Stop);
                s.stop = stop;
                s.finished = Some((reason, usage.generated_tokens));
            }
            Event::Error(e) => s.error = Some(e.to_string()),
        }
        true
    })
}

fn request(text: &str, max_tokens: usize) -> Request {
    Request::new(Prompt::Tokens(ids(text)), max_tokens)
}

fn runner(fake: Fake, capacity: usize) -> InferenceRunner {
    InferenceRunner::inline(
        Box::new(fake),
        Arc::new(char_tokenizer()),
        RunnerConfig {
            queue_capacity: capacity,
            timeout: None,
            ..RunnerConfig::default()
        },
    )
}

/// An inline runner over a chunked-prefill [`Fake`] of `slots` slots logging to `log`.
fn chunked_runner(slots: usize, log: &Log, config: RunnerConfig) -> InferenceRunner {
    let mut fake = Fake::new(slots, log);
    fake.chunked = true;
    InferenceRunner::inline(Box::new(fake), Arc::new(char_tokenizer()), config)
}

fn log_of(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

#[test]
fn text_limits_eog_and_stops() {
    let log = Log::default();
    let mut r = runner(Fake::new(4, &log), 8);
    let (a, b, c, d) = Default::default();
    // Repeats "hello": 7 tokens -> "hellohe", Length.
    r.submit(request("hello", 7), sink_into(&a)).unwrap();
    // "ab</s>": two tokens then the end-of-generation token, which is not emitted.
    let mut eog = ids("ab");
    eog.push(EOS);
    r.submit(Request::new(Prompt::Tokens(eog), 50), sink_into(&b))
        .unwrap();
    // Raw text prompts are encoded by the runner; "xyz" is cut before the stop "zx".
    let mut stop = Request::new(Prompt::Text("xyz".into()), 50);
    stop.stop = vec!["zx".into(), "never".into()];
    r.submit(stop, sink_into(&c)).unwrap();
    // A stop string that never completes is released at the end.
    let mut held = request("q!", 3);
    held.stop = vec!["!q!q".into()];
    r.submit(held, sink_into(&d)).unwrap();
    r.run_until_idle();

    let a = a.lock().unwrap();
    assert_eq!(a.accepted, Some((1, 5)));
    assert_eq!(a.text, "hellohe");
    assert_eq!(a.tokens, ids("hellohe"));
    assert_eq!(a.finished, Some((FinishReason::Length, 7)));
    let b = b.lock().unwrap();
    assert_eq!(
        (b.text.as_str(), b.finished),
        ("ab", Some((FinishReason::EndOfGeneration, 2)))
    );
    assert_eq!(b.tokens, ids("ab"));
    let c = c.lock().unwrap();
    assert_eq!(c.accepted, Some((3, 3)));
    assert_eq!(c.text, "xy");
    // x y z x: the stop completes at the fourth token.
    assert_eq!(c.finished, Some((FinishReason::Stop, 4)));
    assert_eq!(c.stop, Some(0));
    let d = d.lock().unwrap();
    assert_eq!(
        (d.text.as_str(), d.finished),
        ("q!q", Some((FinishReason::Length, 3)))
    );
    // Every slot was released.
    let l = log_of(&log);
    assert_eq!(l.iter().filter(|e| e.starts_with("release")).count(), 4);
    assert_eq!(r.stats().active, 0);
    assert_eq!(r.stats().ended, 4);
}

#[test]
fn queue_is_bounded_and_requests_join_between_steps() {
    let log = Log::default();
    let mut r = runner(Fake::new(2, &log), 2);
    let seen: Vec<Shared> = (0..4).map(|_| Shared::default()).collect();
    r.submit(request("aaaa", 4), sink_into(&seen[0])).unwrap();
    r.submit(request("bbbbbb", 6), sink_into(&seen[1])).unwrap();
    // Two waiting: the third is refused, nothing is sent to it.
    let refused = Shared::default();
    match r.submit(request("c", 1), sink_into(&refused)) {
        Err(EngineError::QueueFull { capacity: 2 }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(refused.lock().unwrap().events, 0);
    assert_eq!(r.stats().queued, 2);
    assert!(r.tick()); // start 0 (a)
    assert_eq!(r.stats().queued, 1);
    r.submit(request("cc", 2), sink_into(&seen[2])).unwrap();
    assert!(r.tick()); // start 1 (b)
    assert!(r.tick()); // step: both slots busy, c waits
    assert_eq!(r.stats().active, 2);
    assert_eq!(r.stats().kv_used, (4 + 2) + (6 + 2));
    r.run_until_idle();
    // c started only when a finished and released its slot, between two steps.
    let l = log_of(&log);
    let expect_head = [
        "start 0",
        "start 1",
        "step",
        "step",
        "step",
        "release 0",
        "start 0",
    ];
    assert_eq!(&l[..expect_head.len()], expect_head);
    assert_eq!(seen[0].lock().unwrap().text, "aaaa");
    assert_eq!(seen[1].lock().unwrap().text, "bbbbbb");
    assert_eq!(seen[2].lock().unwrap().text, "cc");
    assert!(!r.tick(), "idle");
}

#[test]
fn cancel_queued_running_and_by_dropped_receiver() {
    let log = Log::default();
    let mut r = runner(Fake::new(1, &log), 4);
    let (a, b) = (Shared::default(), Shared::default());
    let ida = r.submit(request("abc", 100), sink_into(&a)).unwrap();
    let idb = r.submit(request("def", 100), sink_into(&b)).unwrap();
    r.tick(); // a starts
    r.tick(); // step
    r.cancel(idb);
    r.tick();
    assert_eq!(
        b.lock().unwrap().finished,
        Some((FinishReason::Cancelled, 0))
    );
    assert_eq!(b.lock().unwrap().text, "");
    r.cancel(ida);
    r.cancel(12345); // unknown: ignored
    r.tick();
    let ga = a.lock().unwrap().finished;
    assert!(
        matches!(ga, Some((FinishReason::Cancelled, n)) if n >= 2),
        "{ga:?}"
    );
    assert_eq!(log_of(&log).last().map(String::as_str), Some("release 0"));
    assert!(!r.tick());

    // A receiver that goes away after two deltas frees its slot in that same step.
    let count = Arc::new(Mutex::new(0));
    let c2 = count.clone();
    let sink: vkllm_engine::Sink = Box::new(move |e| {
        if matches!(e, Event::Delta { .. }) {
            *c2.lock().unwrap() += 1;
        }
        *c2.lock().unwrap() < 2
    });
    r.submit(request("xyz", 100), sink).unwrap();
    r.run_until_idle();
    let l = log_of(&log);
    assert_eq!(&l[l.len() - 3..], ["start 0", "step", "release 0"]);
    assert_eq!(r.stats().active, 0);
}

#[test]
fn time_limits_end_running_and_queued_requests() {
    let log = Log::default();
    let mut fake = Fake::new(1, &log);
    fake.step_delay = Duration::from_millis(40);
    let mut r = runner(fake, 4);
    let (a, b) = (Shared::default(), Shared::default());
    let mut ra = request("abc", 1000);
    ra.timeout = Some(Duration::from_millis(150));
    let mut rb = request("abc", 1000);
    rb.timeout = Some(Duration::from_millis(100));
    let t0 = Instant::now();
    r.submit(ra, sink_into(&a)).unwrap();
    r.submit(rb, sink_into(&b)).unwrap();
    r.run_until_idle();
    let took = t0.elapsed();
    let (ra, na) = a.lock().unwrap().finished.unwrap();
    assert_eq!(ra, FinishReason::Timeout);
    assert!(
        (2..=5).contains(&na),
        "{na} tokens in 150 ms of 40 ms steps"
    );
    assert_eq!(a.lock().unwrap().text.len(), na);
    // b waited for the only slot and timed out in the queue.
    assert_eq!(b.lock().unwrap().finished, Some((FinishReason::Timeout, 0)));
    assert!(took < Duration::from_millis(400), "{took:?}");

    // The runner's default limit applies when a request has none.
    let log = Log::default();
    let mut fake = Fake::new(1, &log);
    fake.step_delay = Duration::from_millis(20);
    let mut r = InferenceRunner::inline(
        Box::new(fake),
        Arc::new(char_tokenizer()),
        RunnerConfig {
            queue_capacity: 1,
            timeout: Some(Duration::from_millis(60)),
            ..RunnerConfig::default()
        },
    );
    let c = Shared::default();
    r.submit(request("a", 1000), sink_into(&c)).unwrap();
    r.run_until_idle();
    assert_eq!(c.lock().unwrap().finished.unwrap().0, FinishReason::Timeout);
}

#[test]
fn context_and_multi_token_steps() {
    let log = Log::default();
    let mut fake = Fake::new(2, &log);
    fake.ctx = 10;
    fake.per_step = 3;
    let mut r = runner(fake, 4);
    // Prompt 6 + generated 4 fills the 10-position context: Length after 4 tokens, the extra
    // tokens of the last 3-token step discarded.
    let a = Shared::default();
    r.submit(request("abcdef", 100), sink_into(&a)).unwrap();
    // A stop inside a multi-token step: nothing after it is delivered.
    let b = Shared::default();
    let mut rb = request("uvw", 100);
    rb.stop = vec!["zz".into(), "wu".into()];
    r.submit(rb, sink_into(&b)).unwrap();
    r.run_until_idle();
    let a = a.lock().unwrap();
    assert_eq!(
        (a.text.as_str(), a.finished),
        ("abcd", Some((FinishReason::Length, 4)))
    );
    assert_eq!(a.tokens.len(), 4);
    let b = b.lock().unwrap();
    assert_eq!(
        (b.text.as_str(), b.finished),
        ("uv", Some((FinishReason::Stop, 4)))
    );
    assert_eq!(b.stop, Some(1));
    assert_eq!(b.tokens, ids("uvwu"));
    // Prompts that leave no room are refused at submission.
    for (text, want) in [("abcdefghij", 10), ("abcdefghijk", 11)] {
        match r.submit(request(text, 1), sink_into(&Shared::default())) {
            Err(EngineError::PromptTooLong { prompt, ctx: 10 }) => assert_eq!(prompt, want),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        r.submit(
            Request::new(Prompt::Tokens(vec![]), 1),
            sink_into(&Shared::default())
        ),
        Err(EngineError::EmptyPrompt)
    ));
    assert!(matches!(
        r.submit(request("a", 0), sink_into(&Shared::default())),
        Err(EngineError::InvalidRequest {
            what: "max_tokens",
            ..
        })
    ));
    assert!(matches!(
        r.submit(
            Request::new(Prompt::Tokens(vec![300]), 1),
            sink_into(&Shared::default())
        ),
        Err(EngineError::InvalidRequest { .. })
    ));

    // A generator that leaves a slot out (its cache is full) finishes it with Length.
    let log = Log::default();
    let mut fake = Fake::new(1, &log);
    fake.full_after = Some(3);
    let mut r = runner(fake, 1);
    let c = Shared::default();
    r.submit(request("mn", 100), sink_into(&c)).unwrap();
    r.run_until_idle();
    assert_eq!(c.lock().unwrap().text, "mnm");
    assert_eq!(c.lock().unwrap().finished, Some((FinishReason::Length, 3)));
}

#[test]
fn a_failed_step_ends_every_running_request_with_an_error() {
    let log = Log::default();
    let mut fake = Fake::new(2, &log);
    fake.fail_step = true;
    let mut r = runner(fake, 4);
    let (a, b) = (Shared::default(), Shared::default());
    r.submit(request("ab", 10), sink_into(&a)).unwrap();
    r.submit(request("cd", 10), sink_into(&b)).unwrap();
    r.run_until_idle();
    for s in [&a, &b] {
        let s = s.lock().unwrap();
        assert!(
            s.error
                .as_deref()
                .is_some_and(|e| e.starts_with("decode step failed")),
            "{s:?}"
        );
        assert!(s.finished.is_none());
    }
    assert_eq!(
        log_of(&log)
            .iter()
            .filter(|e| e.starts_with("release"))
            .count(),
        2
    );
}

#[test]
fn threaded_runner_serves_concurrent_submitters() {
    let log = Log::default();
    let mut fake = Fake::new(3, &log);
    fake.step_delay = Duration::from_millis(2);
    let r = InferenceRunner::threaded(
        Box::new(fake),
        Arc::new(char_tokenizer()),
        RunnerConfig {
            queue_capacity: 16,
            timeout: None,
            ..RunnerConfig::default()
        },
    );
    let handle = r.handle();
    let words = [
        "alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta",
    ];
    let threads: Vec<_> = words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let h = handle.clone();
            let w = w.to_string();
            std::thread::spawn(move || {
                let (tx, rx) = std::sync::mpsc::channel();
                let n = w.len() * 2 + i;
                h.submit(request(&w, n), Box::new(move |e| tx.send(e).is_ok()))
                    .unwrap();
                let mut text = String::new();
                loop {
                    match rx.recv_timeout(Duration::from_secs(20)).expect("an event") {
                        Event::Delta { text: t, .. } => text += &t,
                        Event::Finished { reason, .. } => return (w, n, text, reason),
                        Event::Error(e) => panic!("{e}"),
                        Event::Accepted { .. } => {}
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let (w, n, text, reason) = t.join().unwrap();
        let want: String = w.chars().cycle().take(n).collect();
        assert_eq!((text, reason), (want, FinishReason::Length));
    }
    // Never more than three slots at once: every start is on a slot that was free.
    let l = log_of(&log);
    let mut busy = [false; 3];
    for e in &l {
        if let Some(s) = e.strip_prefix("start ") {
            let s: usize = s.parse().unwrap();
            assert!(!busy[s]);
            busy[s] = true;
        } else if let Some(s) = e.strip_prefix("release ") {
            busy[s.parse::<usize>().unwrap()] = false;
        }
    }
    assert_eq!(l.iter().filter(|e| e.starts_with("start")).count(), 8);
    // Dropping the runner joins its worker; later submissions are refused.
    drop(r);
    assert!(matches!(
        handle.submit(request("a", 1), Box::new(|_| true)),
        Err(EngineError::Shutdown)
    ));
}

/// A generator with chunked prefill: a long prompt is computed a piece (`prefill_chunk`
/// tokens) per scheduler turn with a decode step of the running request after each piece, so
/// that request keeps receiving tokens during the prefill; a request cancelled mid-prefill
/// frees its slot and gets `Finished(Cancelled)`.
#[test]
fn long_prompts_prefill_in_pieces_between_decode_steps() {
    let log = Log::default();
    let mut r = chunked_runner(
        2,
        &log,
        RunnerConfig {
            queue_capacity: 4,
            prefill_chunk: 3,
            ..RunnerConfig::default()
        },
    );
    let (a, b, c) = (Shared::default(), Shared::default(), Shared::default());
    r.submit(request("aa", 6), sink_into(&a)).unwrap();
    assert!(r.tick()); // begin 0, its one piece, its first token, a step
    r.submit(request("bcdefghij", 2), sink_into(&b)).unwrap();
    assert!(r.tick()); // begin 1 and its first piece, a step
    assert_eq!(
        r.stats().active,
        2,
        "the prefilling request counts as active"
    );
    let text_during = a.lock().unwrap().text.clone();
    r.run_until_idle();
    let l = log_of(&log);
    let expect_head = [
        "begin 0",
        "piece 0 2",
        "step",
        "begin 1",
        "piece 1 3",
        "step",
        "piece 1 3",
        "step",
        "piece 1 3",
        "step",
    ];
    assert_eq!(&l[..expect_head.len()], expect_head, "{l:?}");
    // a had 3 tokens after the first piece of b and finished while b was still prefilling.
    assert_eq!(text_during, "aaa");
    assert_eq!(a.lock().unwrap().text, "aaaaaa");
    assert_eq!(b.lock().unwrap().text, "bc");
    assert_eq!(b.lock().unwrap().finished, Some((FinishReason::Length, 2)));

    // Cancelled between pieces: the slot is released, nothing was generated.
    let id = r.submit(request("klmnopqrstuv", 4), sink_into(&c)).unwrap();
    assert!(r.tick()); // begin and a first piece
    r.cancel(id);
    r.tick();
    assert_eq!(
        c.lock().unwrap().finished,
        Some((FinishReason::Cancelled, 0))
    );
    assert_eq!(c.lock().unwrap().text, "");
    let l = log_of(&log);
    assert_eq!(l.last().map(String::as_str), Some("release 0"), "{l:?}");
    assert_eq!(r.stats().active, 0);
    assert!(!r.tick(), "idle");
}

/// Short prompts share a turn's prefill budget (`pack_prompts`): when one ends with tokens of
/// the chunk left, the next queued prompt takes them before the decode step, each piece counted
/// as at least `min_piece_tokens`; the reference (`pack_prompts: false`) prefills one prompt's
/// piece per turn. The tokens are the same.
#[test]
fn short_prompts_share_a_turns_prefill_budget() {
    let packed = [
        "begin 0",
        "piece 0 2",
        "begin 1",
        "piece 1 3",
        "begin 2",
        "piece 2 3",
        "step",
        "piece 2 3",
        "begin 3",
        "piece 3 2",
        "step",
    ];
    // Pieces of 2 and 3 tokens count as 4.
    let least_4 = [
        "begin 0",
        "piece 0 2",
        "begin 1",
        "piece 1 3",
        "step",
        "begin 2",
        "piece 2 6",
        "begin 3",
        "piece 3 2",
        "step",
    ];
    let reference = [
        "begin 0",
        "piece 0 2",
        "step",
        "begin 1",
        "piece 1 3",
        "step",
        "release 0",
        "begin 0",
        "piece 0 6",
        "step",
        "release 1",
        "begin 1",
        "piece 1 2",
        "step",
    ];
    let cases: [(bool, usize, &[&str]); 3] = [
        (true, 1, &packed),
        (true, 4, &least_4),
        (false, 1, &reference),
    ];
    let mut texts = Vec::new();
    for (pack, least, head) in cases {
        let log = Log::default();
        let mut r = chunked_runner(
            4,
            &log,
            RunnerConfig {
                prefill_chunk: 8,
                pack_prompts: pack,
                min_piece_tokens: least,
                ..RunnerConfig::default()
            },
        );
        let outs: Vec<Shared> = (0..4).map(|_| Shared::default()).collect();
        for (p, o) in ["ab", "cde", "fghijk", "lm"].iter().zip(&outs) {
            r.submit(request(p, 3), sink_into(o)).unwrap();
        }
        r.run_until_idle();
        let l = log_of(&log);
        assert_eq!(&l[..head.len()], head, "pack {pack}, least {least}: {l:?}");
        texts.push(
            outs.iter()
                .map(|o| o.lock().unwrap().text.clone())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(texts[0], ["aba", "cde", "fgh", "lml"]);
    assert!(texts.iter().all(|t| *t == texts[0]));
}
