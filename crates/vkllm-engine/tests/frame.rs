//! `FrameDecoder` (decode within frame budgets, in slices of layers) on a Vulkan device: the
//! tokens are those of a `Session` on the same prompt and settings whatever the budget, with
//! slices replayed from captures (the default) and recorded afresh (the reference); a budget
//! below one layer's cost runs exactly one layer (or the head) per call; the layer hook sees
//! every layer of every token in order, on the device's residual-stream buffer. Needs a Vulkan
//! device (lavapipe in CI).

mod common;

use std::time::Duration;

use common::{char_tokenizer_eos, lcg_ids as ids};
use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{FrameDecoder, FrameOptions, GenerateParams, LayerView, Session};
use vkllm_models::fixtures::Fixture;
use vkllm_models::{DEFAULT_CHUNK, KvType, Model, VulkanBackend};
use vkllm_vk::Device;

const EOS: u32 = 0;
const CTX: usize = 96;

fn device() -> Device {
    Device::from_env().unwrap_or_else(|e| panic!("this test needs a Vulkan device: {e}"))
}

fn model(dev: &Device) -> (VulkanBackend, Model) {
    let fx = Fixture::load("qwen3").expect("fixture");
    let mut b = VulkanBackend::new(dev.clone());
    let m = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("model");
    (b, m)
}

fn sampling() -> SamplingParams {
    SamplingParams {
        temperature: 0.9,
        top_k: 20,
        top_p: 0.95,
        repetition_penalty: 1.1,
        seed: 5,
        ..Default::default()
    }
}

/// The tokens a `Session` generates (the user's path), at most `n`, and whether it stopped at
/// the end-of-generation id before.
fn session_tokens(dev: &Device, prompt: &[u32], s: &SamplingParams, n: usize) -> Vec<u32> {
    let (b, m) = model(dev);
    let mut sess = Session::new(b, m, char_tokenizer_eos(EOS), CTX).expect("session");
    let p = GenerateParams {
        sampling: s.clone(),
        max_tokens: n,
        ..Default::default()
    };
    let u = sess.generate(prompt, &p, |_| {}).expect("generate");
    // The generated tokens fed back are in the history; the last one drawn is not (and an
    // end-of-generation id is never fed).
    let mut got = sess.history()[prompt.len()..].to_vec();
    assert!(got.len() + 1 >= u.generated_tokens.min(n));
    got.truncate(n);
    got
}

fn frame(dev: &Device, s: &SamplingParams) -> FrameDecoder<VulkanBackend> {
    frame_with(dev, s, FrameOptions::default())
}

fn frame_with(dev: &Device, s: &SamplingParams, opts: FrameOptions) -> FrameDecoder<VulkanBackend> {
    let (b, m) = model(dev);
    FrameDecoder::with_options(b, m, CTX, KvType::F32, s.clone(), 0, opts).expect("frame decoder")
}

#[test]
fn tokens_match_the_session_at_any_budget() {
    let dev = device();
    let prompt = ids(9, 4);
    for s in [SamplingParams::default(), sampling()] {
        let want = session_tokens(&dev, &prompt, &s, 12);
        assert!(want.len() >= 4, "the session stopped early: {want:?}");
        for (budget, recorded, overlap_head) in [
            (Duration::ZERO, true, true),
            (Duration::ZERO, true, false),
            (Duration::ZERO, false, true),
            (Duration::from_millis(3), true, true),
            (Duration::from_secs(1), true, true),
            (Duration::from_secs(1), true, false),
            (Duration::from_secs(1), false, true),
        ] {
            let opts = FrameOptions {
                recorded,
                overlap_head,
            };
            let mut f = frame_with(&dev, &s, opts);
            let mut got = vec![f.prefill(&prompt).expect("prefill")];
            let mut calls = 0;
            while got.len() <= want.len() {
                let out = f.step(budget, &mut |_, _| {}).expect("step");
                got.extend(out.tokens);
                calls += 1;
                assert!(calls < 10_000, "no progress");
            }
            // The path asked for is the one that ran.
            assert_eq!(f.replays_captures(), recorded);
            // The session feeds back every token it drew but the last.
            assert_eq!(&got[..want.len()], &want[..], "budget {budget:?}, {opts:?}");
        }
    }
}

#[test]
fn a_tight_budget_runs_one_layer_per_call_and_the_hook_sees_each() {
    let dev = device();
    let mut f = frame(&dev, &SamplingParams::default());
    let n_layers = f.model().cfg.layers.len();
    let width = f.model().cfg.hidden_size;
    let prompt = ids(7, 2);
    f.prefill(&prompt).expect("prefill");
    let mut seen: Vec<(usize, usize)> = Vec::new();
    let mut states: Vec<Vec<f32>> = Vec::new();
    let mut tokens = 0;
    for call in 0..3 * (n_layers + 1) {
        let mut hook = |b: &VulkanBackend, v: LayerView| {
            assert_eq!(v.width, width);
            let buf = b
                .tensor_buffer(v.hidden)
                .expect("the residual stream is a buffer");
            assert!(buf.size() >= 4 * width as u64);
            // Read back for the test only: the hook itself gets the device buffer.
            let x: Vec<f32> = b.device().read_vec(buf, width).expect("read");
            assert!(x.iter().all(|v| v.is_finite()), "layer {}", v.layer);
            seen.push((v.position, v.layer));
            states.push(x);
        };
        let out = f.step(Duration::ZERO, &mut hook).expect("step");
        // Layers first, one per call, then the head alone.
        if call % (n_layers + 1) < n_layers {
            assert_eq!((out.layers, out.tokens.len()), (1, 0), "call {call}");
        } else {
            assert_eq!((out.layers, out.tokens.len()), (0, 1), "call {call}");
            tokens += 1;
        }
    }
    assert_eq!(tokens, 3);
    let p0 = prompt.len();
    let want: Vec<(usize, usize)> = (0..3)
        .flat_map(|t| (0..n_layers).map(move |l| (p0 + t, l)))
        .collect();
    assert_eq!(seen, want);
    // Each layer changes the residual stream.
    for w in states.windows(2) {
        assert_ne!(w[0], w[1]);
    }
    assert!(f.layer_cost().is_some());
    assert_eq!(f.history().len(), prompt.len() + 3);
}

/// A backend that runs ops as they come (the CPU reference) captures nothing: the decoder
/// records every slice afresh, with the same tokens as a `Session` on that backend.
#[test]
fn a_backend_without_captures_records_slices_afresh() {
    let fx = Fixture::load("qwen3").expect("fixture");
    let load = || {
        let mut b = vkllm_models::CpuBackend::new();
        let m = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("model");
        (b, m)
    };
    let prompt = ids(9, 4);
    let s = sampling();
    let (b, m) = load();
    let mut sess = Session::new(b, m, char_tokenizer_eos(EOS), CTX).expect("session");
    let p = GenerateParams {
        sampling: s.clone(),
        max_tokens: 6,
        ..Default::default()
    };
    sess.generate(&prompt, &p, |_| {}).expect("generate");
    let want = sess.history()[prompt.len()..].to_vec();
    assert!(want.len() >= 3, "the session stopped early: {want:?}");
    let (b, m) = load();
    let mut f = FrameDecoder::new(b, m, CTX, KvType::F32, s, 0).expect("frame decoder");
    let mut got = vec![f.prefill(&prompt).expect("prefill")];
    while got.len() <= want.len() {
        let out = f
            .step(Duration::from_millis(1), &mut |_, _| {})
            .expect("step");
        got.extend(out.tokens);
    }
    assert!(!f.replays_captures());
    assert_eq!(&got[..want.len()], &want[..]);
}
