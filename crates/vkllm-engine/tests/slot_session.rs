//! `SlotSession` (the recorded multi-step GPU decoder behind `vkllm run` and `vkllm chat` on
//! GPUs) against `Session` (one forward per token, sampled on the host) on the same Vulkan
//! device: a dense (qwen3) and a hybrid (qwen3_5) fixture give the same text greedily and
//! sampled, a second turn reuses the cached prefix and still matches a fresh per-token session,
//! stop strings, the token limit and cancellation end it the same way. Needs a Vulkan device
//! (lavapipe in CI).

mod common;

use std::sync::atomic::AtomicBool;

use common::{char_tokenizer_eos, lcg_ids as ids};
use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{FinishReason, GenerateParams, Session, SlotSession, Usage};
use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::{AnyModel, DEFAULT_CHUNK, KvType, Model, VulkanBackend};
use vkllm_vk::Device;

const EOS: u32 = 0;
const CTX: usize = 128;

fn device() -> Device {
    Device::from_env().unwrap_or_else(|e| panic!("this test needs a Vulkan device: {e}"))
}

fn model(family: &str, b: &mut VulkanBackend) -> AnyModel {
    let fx = Fixture::load(family).expect("fixture");
    if family == "qwen3_5" {
        HybridModel::load(fx.config.clone(), &fx.weights, b, DEFAULT_CHUNK)
            .expect("model")
            .into()
    } else {
        Model::load(fx.config.clone(), &fx.weights, b, DEFAULT_CHUNK)
            .expect("model")
            .into()
    }
}

fn per_token(dev: &Device, family: &str) -> Session<VulkanBackend> {
    let mut b = VulkanBackend::new(dev.clone());
    let m = model(family, &mut b);
    Session::new(b, m, char_tokenizer_eos(EOS), CTX).expect("session")
}

fn slots(dev: &Device, family: &str) -> SlotSession {
    let mut b = VulkanBackend::new(dev.clone());
    let m = model(family, &mut b);
    SlotSession::new(b, m, char_tokenizer_eos(EOS), CTX, KvType::F32).expect("slot session")
}

fn sampled(max_tokens: usize) -> GenerateParams {
    GenerateParams {
        sampling: SamplingParams {
            temperature: 0.9,
            top_k: 20,
            top_p: 0.95,
            repetition_penalty: 1.1,
            seed: 11,
            ..Default::default()
        },
        max_tokens,
        stop: Vec::new(),
        grammar: None,
    }
}

fn greedy(max_tokens: usize) -> GenerateParams {
    GenerateParams {
        max_tokens,
        ..GenerateParams::default()
    }
}

fn on_slots(s: &mut SlotSession, ctx: &[u32], p: &GenerateParams) -> (String, Usage) {
    let mut text = String::new();
    let u = s
        .generate_with(ctx, p, &AtomicBool::new(false), |t| text.push_str(t))
        .expect("slot session generate");
    (text, u)
}

fn on_session(s: &mut Session<VulkanBackend>, ctx: &[u32], p: &GenerateParams) -> (String, Usage) {
    let mut text = String::new();
    let u = s
        .generate(ctx, p, |t| text.push_str(t))
        .expect("session generate");
    (text, u)
}

#[test]
fn slot_session_matches_per_token_session() {
    let dev = device();
    for family in ["qwen3", "qwen3_5"] {
        let first = ids(23, 3);
        for p in [greedy(10), sampled(10)] {
            let (want, wu) = on_session(&mut per_token(&dev, family), &first, &p);
            let mut s = slots(&dev, family);
            let (got, gu) = on_slots(&mut s, &first, &p);
            assert_eq!(got, want, "{family}: first turn");
            assert_eq!(gu.generated_tokens, wu.generated_tokens, "{family}");
            assert_eq!(gu.finish, wu.finish, "{family}");
            assert_eq!(gu.reused_tokens, 0, "{family}");
            // A second turn that extends what the slot holds reuses it and matches a fresh
            // per-token session on the whole context.
            let mut next = s.history().to_vec();
            next.extend(ids(5, 9));
            let (got2, gu2) = on_slots(&mut s, &next, &p);
            let (want2, _) = on_session(&mut per_token(&dev, family), &next, &p);
            assert_eq!(got2, want2, "{family}: second turn");
            assert!(gu2.reused_tokens > 0, "{family}: nothing reused");
            // After a reset nothing is reused and the answer is the same.
            s.reset();
            let (got3, gu3) = on_slots(&mut s, &next, &p);
            assert_eq!(got3, want2, "{family}: after reset");
            assert_eq!(gu3.reused_tokens, 0, "{family}: reused after reset");
        }
    }
}

#[test]
fn slot_session_stops_like_the_session() {
    let dev = device();
    let first = ids(17, 5);
    let mut s = slots(&dev, "qwen3");
    // The token limit: exactly max_tokens (the decoder runs ahead in steps of 4).
    let (text, u) = on_slots(&mut s, &first, &greedy(3));
    assert_eq!(u.finish, FinishReason::Length);
    assert_eq!(u.generated_tokens, 3);
    assert_eq!(text.chars().count(), 3, "{text:?}");
    // A limit of 0: no text and no token, on both sessions.
    let (text, u) = on_slots(&mut s, &first, &greedy(0));
    let (want, wu) = on_session(&mut per_token(&dev, "qwen3"), &first, &greedy(0));
    for (t, u) in [(&text, &u), (&want, &wu)] {
        assert!(t.is_empty(), "{t:?}");
        assert_eq!((u.generated_tokens, u.finish), (0, FinishReason::Length));
    }
    // A stop string taken from the greedy answer ends it before the stop, like the session.
    let (long, _) = on_slots(&mut s, &first, &greedy(12));
    let stop: String = long.chars().skip(4).take(2).collect();
    let p = GenerateParams {
        stop: vec![stop.clone()],
        ..greedy(12)
    };
    let (got, gu) = on_slots(&mut s, &first, &p);
    let (want, wu) = on_session(&mut per_token(&dev, "qwen3"), &first, &p);
    assert_eq!(got, want, "stop {stop:?}");
    assert_eq!(gu.finish, wu.finish);
    assert!(!got.contains(&stop), "{got:?} holds the stop {stop:?}");
    // Cancelled before the first token: nothing generated, and the slot is free again.
    let mut text = String::new();
    let u = s
        .generate_with(&first, &greedy(8), &AtomicBool::new(true), |t| {
            text.push_str(t)
        })
        .expect("cancelled generate");
    assert_eq!(u.finish, FinishReason::Cancelled);
    assert_eq!(u.generated_tokens, 0);
    assert!(text.is_empty());
    let (again, _) = on_slots(&mut s, &first, &greedy(3));
    assert_eq!(again.chars().count(), 3);
    // Too long for the context: the session's error, before anything runs.
    assert!(
        s.generate_with(&ids(CTX, 1), &greedy(1), &AtomicBool::new(false), |_| {})
            .is_err()
    );
}
