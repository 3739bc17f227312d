//! Cancelling a generation with `Session::generate_with` on the real SmolLM2-135M-Instruct (CPU
//! reference backend): the answer stops where the flag was set, its tokens are the uncancelled
//! answer's first tokens, and the next turn reuses everything computed. Needs
//! scripts/fetch-models.sh smollm2.

use std::sync::atomic::{AtomicBool, Ordering};

use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{FinishReason, GenerateParams, Session};
use vkllm_models::gguf::GgufModel;
use vkllm_models::{CpuBackend, DEFAULT_CHUNK, Model};
use vkllm_tokenizer::{EncodeOptions, Tokenizer, cache};

fn session() -> Session<CpuBackend> {
    let (known, path) = cache::known("smollm2").expect("known model");
    assert!(path.exists(), "{}", cache::missing_message(&known, &path));
    let gguf = GgufModel::open(&path).expect("gguf");
    let tok = Tokenizer::from_path(&path).expect("tokenizer");
    let mut b = CpuBackend::new();
    let model = Model::load(gguf.config.clone(), &gguf, &mut b, DEFAULT_CHUNK).expect("load");
    Session::new(b, model, tok, 256).expect("session")
}

fn greedy(max_tokens: usize) -> GenerateParams {
    GenerateParams {
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        max_tokens,
        stop: Vec::new(),
        grammar: None,
    }
}

#[test]
fn cancel_stops_the_answer_and_keeps_its_tokens() {
    let mut s = session();
    let prompt = s
        .tokenizer
        .encode(
            "Once upon a time, in a land far away,",
            EncodeOptions::prompt(),
        )
        .expect("encode");

    // The whole answer, uncancelled.
    let mut full = String::new();
    let u = s
        .generate(&prompt, &greedy(12), |t| full.push_str(t))
        .expect("generate");
    assert_eq!(u.finish, FinishReason::Length);
    assert_eq!(u.generated_tokens, 12);
    let full_history = s.history().to_vec();

    // The same prompt, cancelled by the callback after the third piece of text.
    s.reset();
    let cancel = AtomicBool::new(false);
    let mut pieces = 0;
    let mut part = String::new();
    let u = s
        .generate_with(&prompt, &greedy(12), &cancel, |t| {
            if !t.is_empty() {
                pieces += 1;
                part.push_str(t);
                if pieces == 3 {
                    cancel.store(true, Ordering::Relaxed);
                }
            }
        })
        .expect("generate");
    assert_eq!(u.finish, FinishReason::Cancelled);
    assert!(
        u.generated_tokens >= 3 && u.generated_tokens < 12,
        "{} tokens",
        u.generated_tokens
    );
    assert!(
        full.starts_with(&part),
        "{part:?} is not a prefix of {full:?}"
    );
    assert!(part.len() < full.len());
    // The cache holds the prompt and the tokens computed before the flag was seen: a prefix of
    // the uncancelled run's.
    let h = s.history().to_vec();
    assert!(full_history.starts_with(&h));
    assert_eq!(h.len(), prompt.len() + u.generated_tokens);

    // A next turn that extends what was generated reuses all of it.
    let mut next = h.clone();
    next.extend(
        s.tokenizer
            .encode(" The end.", EncodeOptions::plain())
            .expect("encode"),
    );
    let u2 = s.generate(&next, &greedy(2), |_| {}).expect("generate");
    assert_eq!(u2.reused_tokens, h.len());

    // A flag set before the call: nothing is generated.
    s.reset();
    let set = AtomicBool::new(true);
    let mut out = String::new();
    let u3 = s
        .generate_with(&prompt, &greedy(12), &set, |t| out.push_str(t))
        .expect("generate");
    assert_eq!(u3.finish, FinishReason::Cancelled);
    assert_eq!(u3.generated_tokens, 0);
    assert_eq!(out, "");
}
