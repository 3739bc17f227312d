//! The runner and `SimpleGenerator` on a real forward: the llama fixture (tiny random weights,
//! transformers goldens) on the CPU backend. Greedy tokens equal transformers' through the
//! runner, however requests share the slots; logprobs equal an f64 log-softmax of the golden
//! logits; seeded sampling matches a `Session` run alone; a full context ends with `Length`.

mod common;

use std::sync::{Arc, Mutex};

use common::char_tokenizer_eos;
use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{
    Event, FinishReason, GenerateParams, Generator, InferenceRunner, Prompt, Request, RunnerConfig,
    Session, SimpleGenerator, SlotParams, TokenOut,
};
use vkllm_models::fixtures::Fixture;
use vkllm_models::{CpuBackend, DEFAULT_CHUNK, Model};

/// Id 0 never occurs in the fixture's greedy continuations: it is the EOS here, so they run
/// to their full length.
const EOS: u32 = 0;

fn model(fx: &Fixture, b: &mut CpuBackend) -> Model {
    Model::load(fx.config.clone(), &fx.weights, b, DEFAULT_CHUNK).expect("fixture model")
}

fn generator(fx: &Fixture, slots: usize, ctx: usize) -> SimpleGenerator<CpuBackend> {
    let mut b = CpuBackend::new();
    let m = model(fx, &mut b);
    SimpleGenerator::new(b, m, slots, ctx).expect("generator")
}

type Out = Arc<Mutex<(Vec<TokenOut>, Option<FinishReason>)>>;

fn collect(out: &Out) -> vkllm_engine::Sink {
    let out = out.clone();
    Box::new(move |e| {
        let mut o = out.lock().unwrap();
        match e {
            Event::Delta { tokens, .. } => o.0.extend(tokens),
            Event::Finished { reason, .. } => o.1 = Some(reason),
            Event::Error(e) => panic!("{e}"),
            Event::Accepted { .. } => {}
        }
        true
    })
}

fn ids_of(o: &Out) -> Vec<u32> {
    o.lock().unwrap().0.iter().map(|t| t.id).collect()
}

#[test]
fn greedy_through_shared_slots_matches_transformers() {
    let fx = Fixture::load("llama").expect("fixture");
    let short = fx.prompt("short").expect("short");
    let long = fx.prompt("long").expect("long");
    assert!(!short.greedy.contains(&EOS) && !long.greedy.contains(&EOS));
    // Two slots, four requests: they queue, join between steps and reuse freed slots.
    let mut r = InferenceRunner::inline(
        Box::new(generator(&fx, 2, 400)),
        Arc::new(char_tokenizer_eos(EOS)),
        RunnerConfig::default(),
    );
    let cases = [(&short, 32), (&long, 32), (&short, 20), (&long, 9)];
    let outs: Vec<Out> = cases.iter().map(|_| Out::default()).collect();
    for ((g, n), o) in cases.iter().zip(&outs) {
        r.submit(Request::new(Prompt::Tokens(g.ids.clone()), *n), collect(o))
            .unwrap();
    }
    r.run_until_idle();
    for ((g, n), o) in cases.iter().zip(&outs) {
        assert_eq!(
            ids_of(o),
            g.greedy[..*n],
            "prompt of {} tokens",
            g.ids.len()
        );
        assert_eq!(o.lock().unwrap().1, Some(FinishReason::Length));
    }
}

#[test]
fn logprobs_are_the_log_softmax_of_the_model() {
    let fx = Fixture::load("llama").expect("fixture");
    let short = fx.prompt("short").expect("short");
    let mut g = generator(&fx, 1, 64);
    let p = SlotParams {
        logprobs: Some(5),
        ..SlotParams::default()
    };
    let (_, first) = g.start(&short.ids, &p).unwrap();
    // The first token's distribution is the golden logits' last row, in f64.
    let v = 256;
    let row = &short.logits[(short.ids.len() - 1) * v..];
    let m = row
        .iter()
        .fold(f64::NEG_INFINITY, |a, &x| a.max(f64::from(x)));
    let lse = m + row
        .iter()
        .map(|&x| (f64::from(x) - m).exp())
        .sum::<f64>()
        .ln();
    let lp = |id: u32| f64::from(row[id as usize]) - lse;
    assert_eq!(first.id, short.greedy[0]);
    let got = f64::from(first.logprob.unwrap());
    assert!(
        (got - lp(first.id)).abs() < 1e-3,
        "{got} vs {}",
        lp(first.id)
    );
    assert_eq!(first.top.len(), 5);
    assert_eq!(first.top[0].0, short.greedy[0], "greedy is the most likely");
    let mut order: Vec<u32> = (0..v as u32).collect();
    order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]));
    for (k, &(id, l)) in first.top.iter().enumerate() {
        assert_eq!(id, order[k]);
        assert!((f64::from(l) - lp(id)).abs() < 1e-3);
    }
    // Without logprobs the token comes bare.
    let mut g = generator(&fx, 1, 64);
    let (_, t) = g.start(&short.ids, &SlotParams::default()).unwrap();
    assert_eq!((t.logprob, t.top.len()), (None, 0));
}

#[test]
fn seeded_sampling_matches_a_session_and_reuses_prefixes() {
    let fx = Fixture::load("llama").expect("fixture");
    let long = fx.prompt("long").expect("long");
    let sampling = |seed| SamplingParams {
        temperature: 1.0,
        top_k: 40,
        top_p: 0.95,
        frequency_penalty: 0.5,
        seed,
        ..SamplingParams::default()
    };
    let n = 24;
    // The reference: a Session alone.
    let mut b = CpuBackend::new();
    let m = model(&fx, &mut b);
    let mut session = Session::new(b, m, char_tokenizer_eos(EOS), 400).unwrap();
    let mut text = String::new();
    let usage = session
        .generate(
            &long.ids,
            &GenerateParams {
                sampling: sampling(7),
                max_tokens: n,
                stop: Vec::new(),
                grammar: None,
            },
            |t| text.push_str(t),
        )
        .unwrap();
    assert_eq!(usage.finish, FinishReason::Length);
    let tok = char_tokenizer_eos(EOS);

    // The runner, one slot: the same request twice (the second reuses the cached prompt), and
    // another seed in between, interleaved with a greedy request on a second slot.
    let mut r = InferenceRunner::inline(
        Box::new(generator(&fx, 2, 400)),
        Arc::new(char_tokenizer_eos(EOS)),
        RunnerConfig::default(),
    );
    let outs: Vec<Out> = (0..4).map(|_| Out::default()).collect();
    for (i, seed) in [7u64, 8, 7].into_iter().enumerate() {
        let mut req = Request::new(Prompt::Tokens(long.ids.clone()), n);
        req.params.sampling = sampling(seed);
        r.submit(req, collect(&outs[i])).unwrap();
        if i == 0 {
            r.submit(
                Request::new(Prompt::Tokens(long.ids[..100].to_vec()), 10),
                collect(&outs[3]),
            )
            .unwrap();
        }
        r.run_until_idle();
    }
    let first = ids_of(&outs[0]);
    assert_eq!(tok.decode(&first, true).unwrap(), text);
    assert_eq!(
        ids_of(&outs[2]),
        first,
        "same seed, prompt reused from the cache"
    );
    assert_ne!(ids_of(&outs[1]), first, "another seed");
    assert_eq!(ids_of(&outs[3]).len(), 10);
}

#[test]
fn a_full_context_ends_with_length_not_a_panic() {
    let fx = Fixture::load("llama").expect("fixture");
    let short = fx.prompt("short").expect("short");
    let ctx = short.ids.len() + 3;
    // Through the runner: prompt + generated fill the context.
    let mut r = InferenceRunner::inline(
        Box::new(generator(&fx, 1, ctx)),
        Arc::new(char_tokenizer_eos(EOS)),
        RunnerConfig::default(),
    );
    let o = Out::default();
    r.submit(
        Request::new(Prompt::Tokens(short.ids.clone()), 100),
        collect(&o),
    )
    .unwrap();
    r.run_until_idle();
    assert_eq!(ids_of(&o), short.greedy[..3]);
    assert_eq!(o.lock().unwrap().1, Some(FinishReason::Length));

    // The generator alone: a slot whose cache is full is left out of the step.
    let mut g = generator(&fx, 1, ctx);
    let (slot, _) = g.start(&short.ids, &SlotParams::default()).unwrap();
    for _ in 0..3 {
        assert_eq!(g.step().unwrap().len(), 1);
    }
    assert!(g.step().unwrap().is_empty());
    g.release(slot);
    assert_eq!(g.history(slot).len(), ctx);
}
