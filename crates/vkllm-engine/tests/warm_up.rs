//! `runner::warm_up` on the batched GPU generator (`vkllm serve`'s start): its requests all
//! finish, and afterwards requests of other prompt lengths, alone and together, greedy and
//! sampled, build no new pipeline, which is what the warm-up is for. Needs a Vulkan device
//! (lavapipe in CI).

mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use common::char_tokenizer_eos;
use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{
    Event, InferenceRunner, Prompt, Request, RunnerConfig, RunnerHandle, SlotGenerator, SlotParams,
    warm_up, warm_up_lengths,
};
use vkllm_models::fixtures::Fixture;
use vkllm_models::{DEFAULT_CHUNK, KvType, Model, VulkanBackend};
use vkllm_vk::Device;

/// The tokenizer's end of generation: a request may end at it before its token limit.
const EOS: u32 = 0;
const CTX: usize = 1024;

/// Submits every `(prompt length, sampled)` request at once and waits for all of them; the
/// generated token counts.
fn run_together(h: &RunnerHandle, reqs: &[(usize, bool)], seed: u64) -> Vec<usize> {
    let (tx, rx) = mpsc::channel();
    for (i, &(len, sampled)) in reqs.iter().enumerate() {
        let ids = common::lcg_ids(len, seed + i as u64)
            .into_iter()
            .map(|t| 1 + t % 255)
            .collect();
        let mut req = Request::new(Prompt::Tokens(ids), 6);
        if sampled {
            req.params = SlotParams {
                sampling: SamplingParams {
                    temperature: 1.1,
                    top_k: 7,
                    top_p: 0.9,
                    seed: 5,
                    ..Default::default()
                },
                ..Default::default()
            };
        }
        let tx = tx.clone();
        h.submit(
            req,
            Box::new(move |e| {
                match e {
                    Event::Finished { usage, .. } => tx.send(usage.generated_tokens).expect("send"),
                    Event::Error(e) => panic!("request failed: {e}"),
                    _ => {}
                }
                true
            }),
        )
        .expect("submit");
    }
    (0..reqs.len())
        .map(|_| rx.recv_timeout(Duration::from_secs(300)).expect("finished"))
        .collect()
}

/// A threaded runner over the batched GPU generator of the llama fixture (`slots` x `ctx`),
/// and its device.
fn fixture_runner(slots: usize, ctx: usize, config: RunnerConfig) -> (Device, InferenceRunner) {
    let dev = Device::from_env().unwrap_or_else(|e| panic!("this test needs a Vulkan device: {e}"));
    let fx = Fixture::load("llama").expect("fixture");
    let mut b = VulkanBackend::new(dev.clone());
    let m = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let g = SlotGenerator::new(b, m, slots, ctx, KvType::F32, 2).expect("generator");
    let tok = Arc::new(char_tokenizer_eos(EOS));
    (dev, InferenceRunner::threaded(Box::new(g), tok, config))
}

#[test]
fn after_warm_up_other_requests_build_no_pipelines() {
    let (dev, r) = fixture_runner(4, CTX, RunnerConfig::default());
    let chunk = RunnerConfig::default().prefill_chunk;
    let w = warm_up(&r.handle(), chunk).expect("warm-up");
    let (long, short) = warm_up_lengths(CTX, chunk);
    assert_eq!(w.requests, 1 + short.len());
    assert_eq!(w.prompt_tokens, long + short.iter().sum::<usize>());
    assert!((w.requests..=12 * w.requests).contains(&w.generated_tokens));
    let built = dev.pipelines_created();
    assert!(built > 0);
    // Prompt lengths the warm-up did not send: two alone, then a mixed batch (more requests
    // than slots: they queue and join as others end).
    let generated = [
        run_together(&r.handle(), &[(700, false)], 1),
        run_together(
            &r.handle(),
            &[(3, true), (17, false), (33, true), (130, true)],
            9,
        ),
    ];
    assert!(generated.concat().iter().all(|n| (1..=6).contains(n)));
    assert_eq!(
        dev.pipelines_created(),
        built,
        "requests after the warm-up built pipelines"
    );
    r.shutdown();
}

/// A queue shorter than the warm-up's 19 short prompts: they go in groups that fit it, so no
/// submission is refused.
#[test]
fn warm_up_fits_a_short_queue() {
    let config = RunnerConfig {
        queue_capacity: 3,
        ..RunnerConfig::default()
    };
    let (_, r) = fixture_runner(2, 96, config);
    let w = warm_up(&r.handle(), 512).expect("warm-up");
    assert_eq!(w.requests, 20);
    r.shutdown();
}
