//! [`warm_up`]: throwaway requests through a runner before it takes real traffic, so the
//! pipelines a GPU driver compiles on first use (prefill products of a whole chunk and of every
//! shorter width, few-token products, decode steps of each row count with sampling) are built
//! at start and not inside the first users' time to first token.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use vkllm_cpu::sampler::SamplingParams;

use super::{Event, Prompt, Request, RunnerHandle};
use crate::error::EngineError;
use crate::generator::SlotParams;

/// Lengths of the short prompts sent together: every remainder of the 8-column products alone
/// and after a full pass, one to four 16-token tiles of the few-token products. They join the
/// batch a few per step and end at different steps (each generates its own number of tokens),
/// so decode steps run at many row counts up to their number (or the slots).
const SHORT_PROMPTS: [usize; 19] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 21, 40, 61,
];
/// Tokens past one prefill chunk in the long prompt: a chunk and an odd tail.
const LONG_TAIL: usize = 77;
/// Most tokens a warm-up request generates (the short ones 2 to this many).
const MAX_TOKENS: usize = 12;
/// Longest wait for the warm-up requests (the first pipeline builds of a cold driver cache can
/// take seconds each on some drivers).
const TIMEOUT: Duration = Duration::from_secs(600);

/// What [`warm_up`] ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarmUpReport {
    /// Requests run.
    pub requests: usize,
    /// Prompt tokens over all of them.
    pub prompt_tokens: usize,
    /// Tokens they generated.
    pub generated_tokens: usize,
}

/// The warm-up requests' prompt lengths for a runner of `ctx` positions whose prefill runs in
/// pieces of `prefill_chunk` tokens (0: whole prompts): first a long prompt (one piece and a
/// tail) alone, then the short ones together. Each leaves room for `MAX_TOKENS`.
pub fn warm_up_lengths(ctx: usize, prefill_chunk: usize) -> (usize, Vec<usize>) {
    let room = ctx.saturating_sub(MAX_TOKENS + 1).max(1);
    let chunk = match prefill_chunk {
        0 => super::DEFAULT_PREFILL_CHUNK,
        c => c,
    };
    let long = (chunk + LONG_TAIL).min(room);
    let mut short: Vec<usize> = SHORT_PROMPTS.iter().map(|&n| n.min(room)).collect();
    short.dedup();
    (long, short)
}

/// Runs the warm-up requests on `handle`'s runner (which must be idle: they take slots like
/// any request) and waits for them. Prompts are token ids spread over the vocabulary; the long
/// one decodes greedily alone, the short ones sample together (temperature 0.8, top-k 40,
/// top-p 0.95, min-p 0.05). Any request's error is returned, and
/// [`EngineError::WarmUpTimeout`] after 10 minutes.
pub fn warm_up(handle: &RunnerHandle, prefill_chunk: usize) -> Result<WarmUpReport, EngineError> {
    let (long, short) = warm_up_lengths(handle.context(), prefill_chunk);
    let vocab = handle.vocab().max(1);
    let deadline = Instant::now() + TIMEOUT;
    let mut report = WarmUpReport {
        requests: 0,
        prompt_tokens: 0,
        generated_tokens: 0,
    };
    let sampled = SlotParams {
        sampling: SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    // (prompt length, tokens, sampling)
    let rounds: [Vec<(usize, usize, SlotParams)>; 2] = [
        vec![(long, MAX_TOKENS, SlotParams::default())],
        short
            .iter()
            .enumerate()
            .map(|(i, &n)| (n, 2 + i % (MAX_TOKENS - 1), sampled.clone()))
            .collect(),
    ];
    // Groups no larger than the queue, so that no submission is refused as QueueFull.
    let group = handle.queue_capacity().max(1);
    for round in rounds {
        for (g, part) in round.chunks(group).enumerate() {
            run_group(handle, part, g * group, vocab, deadline, &mut report)?;
        }
    }
    Ok(report)
}

/// Submits `part` (request `first + i` gets prompt ids of its own) and waits for all of it.
fn run_group(
    handle: &RunnerHandle,
    part: &[(usize, usize, SlotParams)],
    first: usize,
    vocab: usize,
    deadline: Instant,
    report: &mut WarmUpReport,
) -> Result<(), EngineError> {
    let (tx, rx) = mpsc::channel();
    for (i, (len, max_tokens, params)) in part.iter().enumerate() {
        let tokens = (0..*len)
            .map(|j| ((j * 7919 + (first + i) * 104_729 + 13) % vocab) as u32)
            .collect();
        let mut req = Request::new(Prompt::Tokens(tokens), *max_tokens);
        req.params = params.clone();
        req.timeout = Some(TIMEOUT);
        let tx = tx.clone();
        handle.submit(
            req,
            Box::new(move |e| {
                if let Event::Finished { usage, .. } = e {
                    let _ = tx.send(Ok(usage.generated_tokens));
                } else if let Event::Error(err) = e {
                    let _ = tx.send(Err(err));
                }
                true
            }),
        )?;
        report.requests += 1;
        report.prompt_tokens += len;
    }
    drop(tx);
    for _ in 0..part.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(r) => report.generated_tokens += r?,
            Err(_) => {
                return Err(EngineError::WarmUpTimeout {
                    seconds: TIMEOUT.as_secs(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_fit_the_context() {
        let (long, short) = warm_up_lengths(4096, 512);
        assert_eq!(long, 589);
        assert_eq!(short.len(), 19);
        assert_eq!(short[15..], [16, 21, 40, 61]);
        // Whole-prompt prefill: the default chunk still sets the long prompt.
        assert_eq!(warm_up_lengths(4096, 0).0, 589);
        // A short context caps every prompt so that 12 generated tokens still fit.
        let (long, short) = warm_up_lengths(48, 512);
        assert_eq!(long, 35);
        assert_eq!(short[15..], [16, 21, 35]);
        assert_eq!(warm_up_lengths(2, 512), (1, vec![1]));
    }
}
