//! Prefix reuse with sliding-window rings: the Gemma 3 fixture with a window of 64 and prefill
//! chunks of 48 (128-row rings) on the CPU. A turn that rewinds the conversation further back
//! than the rings remember recomputes from position 0 (`reused_tokens == 0`); a turn that
//! extends it reuses the cache. Either way the output is exactly a fresh session's (the
//! `Session` and the reference `SimpleGenerator`).

mod common;

use common::{char_tokenizer_eos, lcg_ids as ids};
use vkllm_engine::{GenerateParams, Generator, Session, SimpleGenerator, SlotParams};
use vkllm_models::fixtures::Fixture;
use vkllm_models::{CpuBackend, Model};

const EOS: u32 = 0;
const CTX: usize = 1000;

fn model(b: &mut CpuBackend) -> Model {
    let fx = Fixture::load("gemma3").expect("fixture");
    let mut cfg = fx.config.clone();
    for l in &mut cfg.layers {
        if l.window.is_some() {
            l.window = Some(64);
        }
    }
    Model::load(cfg, &fx.weights, b, 48).expect("model")
}

fn session() -> Session<CpuBackend> {
    let mut b = CpuBackend::new();
    let m = model(&mut b);
    Session::new(b, m, char_tokenizer_eos(EOS), CTX).expect("session")
}

fn params() -> GenerateParams {
    GenerateParams {
        max_tokens: 8,
        ..GenerateParams::default()
    }
}

/// Generates on `s` and on a fresh session; both texts, histories and the reuse count.
fn turn(s: &mut Session<CpuBackend>, context: &[u32]) -> usize {
    let mut text = String::new();
    let usage = s
        .generate(context, &params(), |t| text.push_str(t))
        .expect("generate");
    let mut fresh = session();
    let mut want = String::new();
    fresh
        .generate(context, &params(), |t| want.push_str(t))
        .expect("fresh");
    assert_eq!(text, want, "text after reusing {}", usage.reused_tokens);
    assert_eq!(s.history(), fresh.history());
    usage.reused_tokens
}

#[test]
fn session_recomputes_when_the_ring_forgot_the_prefix() {
    let mut s = session();
    let a = ids(400, 1);
    assert_eq!(turn(&mut s, &a), 0);
    let written = s.history().len();
    // Rewind to 200: the rings hold only the last 128 positions written, so the prefix is
    // recomputed.
    let mut b = a[..200].to_vec();
    b.extend(ids(40, 2));
    assert_eq!(turn(&mut s, &b), 0);
    // Extending the conversation reuses everything cached.
    let mut c = s.history().to_vec();
    let cached = c.len();
    c.extend(ids(20, 3));
    assert_eq!(turn(&mut s, &c), cached);
    // Rewinding a little (within ring - window = 64 positions of the furthest write) reuses.
    let back = s.history().len() - 30;
    let mut d = s.history()[..back].to_vec();
    d.extend(ids(10, 4));
    assert_eq!(turn(&mut s, &d), back);
    assert!(written > 200);
}

#[test]
fn simple_generator_recomputes_when_the_ring_forgot_the_prefix() {
    let p = SlotParams {
        logprobs: Some(3),
        ..SlotParams::default()
    };
    let mut b = CpuBackend::new();
    let m = model(&mut b);
    let mut g = SimpleGenerator::new(b, m, 1, CTX).expect("generator");
    let a = ids(400, 5);
    let (slot, _) = g.start(&a, &p).expect("start");
    for _ in 0..5 {
        g.step().expect("step");
    }
    g.release(slot);
    let mut b2 = a[..150].to_vec();
    b2.extend(ids(30, 6));
    let (_, got) = g.start(&b2, &p).expect("start after rewind");
    let mut fb = CpuBackend::new();
    let fm = model(&mut fb);
    let mut fresh = SimpleGenerator::new(fb, fm, 1, CTX).expect("generator");
    let (_, want) = fresh.start(&b2, &p).expect("fresh start");
    assert_eq!(got, want);
    assert_eq!(g.history(0), fresh.history(0));
}
