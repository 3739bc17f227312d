//! Sessions over hybrid (Gated DeltaNet) and MoE models: the qwen3_5 and qwen3_moe fixtures on
//! the CPU. Greedy text equals the model's own forward and argmax; a turn that extends the
//! conversation reuses the recurrent state and the KV caches (`reused_tokens > 0`), a turn that
//! rewinds it recomputes from position 0 (a recurrent state cannot be cut back); either way the
//! output is a fresh session's.

mod common;

use common::{char_tokenizer_eos, lcg_ids as ids};
use vkllm_engine::{GenerateParams, Session};
use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::parity::argmax;
use vkllm_models::{CpuBackend, Logits};

const EOS: u32 = 0;
const CTX: usize = 256;

fn model(family: &str, b: &mut CpuBackend) -> HybridModel {
    let fx = Fixture::load(family).expect("fixture");
    HybridModel::load(fx.config.clone(), &fx.weights, b, 16).expect("model")
}

fn session(family: &str) -> Session<CpuBackend> {
    let mut b = CpuBackend::new();
    let m = model(family, &mut b);
    Session::new(b, m, char_tokenizer_eos(EOS), CTX).expect("session")
}

fn params() -> GenerateParams {
    GenerateParams {
        max_tokens: 6,
        ..GenerateParams::default()
    }
}

/// Generates on `s` and on a fresh session: same text and history; returns the reuse count.
fn turn(family: &str, s: &mut Session<CpuBackend>, context: &[u32]) -> usize {
    let mut text = String::new();
    let usage = s
        .generate(context, &params(), |t| text.push_str(t))
        .expect("generate");
    let mut fresh = session(family);
    let mut want = String::new();
    fresh
        .generate(context, &params(), |t| want.push_str(t))
        .expect("fresh");
    assert_eq!(
        text, want,
        "{family}: text after reusing {}",
        usage.reused_tokens
    );
    assert_eq!(s.history(), fresh.history(), "{family}");
    usage.reused_tokens
}

#[test]
fn greedy_text_is_the_models_argmax() {
    for family in ["qwen3_5", "qwen3_moe"] {
        let context = ids(30, 7);
        let mut s = session(family);
        let mut text = String::new();
        s.generate(&context, &params(), |t| text.push_str(t))
            .expect("generate");
        // The same tokens by the model's own forward and argmax.
        let mut b = CpuBackend::new();
        let m = model(family, &mut b);
        let st = m.new_state(&mut b, CTX).expect("state");
        let mut logits = m
            .forward(&mut b, &st, &context, 0, Logits::Last)
            .expect("prefill");
        let mut want = String::new();
        for i in 0..params().max_tokens {
            let t = argmax(&logits);
            if t == EOS {
                break;
            }
            want.push(common::char_of(t));
            logits = m
                .forward(&mut b, &st, &[t], context.len() + i, Logits::Last)
                .expect("step");
        }
        assert!(!want.is_empty(), "{family}: the first token was the EOS");
        assert_eq!(text, want, "{family}");
    }
}

#[test]
fn extending_reuses_the_state_and_rewinding_recomputes() {
    for family in ["qwen3_5", "qwen3_moe"] {
        let mut s = session(family);
        let a = ids(40, 1);
        assert_eq!(turn(family, &mut s, &a), 0);
        // The next turn extends the whole conversation: everything held is reused.
        let mut b = s.history().to_vec();
        let held = b.len();
        b.extend(ids(10, 2));
        assert_eq!(turn(family, &mut s, &b), held, "{family}");
        // A turn that shares only part of it: the recurrent state holds more than the shared
        // prefix, so it restarts from 0.
        let mut c = a[..20].to_vec();
        c.extend(ids(12, 3));
        assert_eq!(turn(family, &mut s, &c), 0, "{family}");
    }
}

/// A turn that repeats the last prompt but continues differently from the answer (a chat
/// template that re-renders the reply, e.g. without its thinking) restarts from the recurrent
/// state kept at the end of that prompt: only the new tokens are computed, the text is a fresh
/// session's.
#[test]
fn a_re_rendered_turn_restarts_from_the_last_prompt() {
    for family in ["qwen3_5", "qwen3_moe"] {
        let mut s = session(family);
        let a = ids(40, 1);
        assert_eq!(turn(family, &mut s, &a), 0);
        assert!(
            s.history().len() > a.len(),
            "{family}: the answer is in the cache"
        );
        let mut b = a.clone();
        b.extend(ids(9, 5));
        assert_ne!(
            b[a.len()],
            s.history()[a.len()],
            "{family}: the answer differs"
        );
        assert_eq!(turn(family, &mut s, &b), a.len(), "{family}");
    }
}
