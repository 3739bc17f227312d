//! Batched decode on the device (slots): the recorded multi-step decode with GPU sampling must
//! give every sequence exactly the tokens of the per-dispatch reference path (one sequence at a
//! time, re-recorded each step, sampled by the CPU sampler), alone or batched with others, when
//! slots join and leave mid-generation, greedy and seeded-sampled, with logprobs, for every
//! dense family and for an f16 KV cache. Under the validation layer.

mod common;

use common::device;
use vkllm_cpu::sampler::{SamplingParams, log_softmax, sample};
use vkllm_models::fixtures::Fixture;
use vkllm_models::{
    Backend, CpuBackend, DEFAULT_CHUNK, KvType, Logits, Model, SlotDecoderConfig, SlotStart,
    VulkanBackend,
};

/// One generation request of a test.
#[derive(Clone)]
struct Req {
    prompt: Vec<u32>,
    params: SamplingParams,
    n: usize,
    seq_id: u64,
    logprobs: Option<usize>,
}

/// The reference: the sequence alone in its own cache, one `forward` per token (the
/// per-dispatch path), the CPU sampler on each step's logits. Returns tokens and the logits each
/// token was drawn from.
fn reference<B: Backend>(
    b: &mut B,
    model: &Model,
    r: &Req,
    ctx: usize,
    dtype: KvType,
) -> (Vec<u32>, Vec<Vec<f32>>) {
    let kv = model.new_kv_slots(b, ctx, 1, dtype).expect("kv");
    let vocab = model.cfg.vocab_size;
    let mut counts = vec![0u32; vocab];
    let mut logits = model
        .forward(b, &kv, &r.prompt, 0, Logits::Last)
        .expect("prefill");
    let (mut toks, mut all) = (Vec::new(), Vec::new());
    loop {
        let t = sample(&logits, &r.params, &counts, r.seq_id, toks.len() as u64);
        toks.push(t);
        all.push(logits);
        counts[t as usize] += 1;
        if toks.len() == r.n {
            return (toks, all);
        }
        let pos = r.prompt.len() + toks.len() - 1;
        logits = model
            .forward(b, &kv, &[t], pos, Logits::Last)
            .expect("decode");
    }
}

/// Something that happens between submits: a request joins a slot, or a slot is stopped.
enum Event {
    Join { at: usize, slot: usize, req: usize },
    Leave { at: usize, slot: usize },
}

impl Event {
    fn at(&self) -> usize {
        match self {
            Event::Join { at, .. } | Event::Leave { at, .. } => *at,
        }
    }
}

/// Runs `reqs` through a slot decoder with `slots` slots, following `events` (keyed by the
/// submit index), `steps` steps per submit. Returns each request's tokens and logprobs.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn batched(
    b: &mut VulkanBackend,
    model: &Model,
    reqs: &[Req],
    slots: usize,
    ctx: usize,
    dtype: KvType,
    events: &[Event],
    steps: usize,
) -> Vec<(Vec<u32>, Vec<Option<(f32, Vec<(u32, f32)>)>>)> {
    let kv = model.new_kv_slots(b, ctx, slots, dtype).expect("kv");
    let dec = b
        .slot_decoder(model, &kv, SlotDecoderConfig::default())
        .expect("record slot decoder");
    let vocab = model.cfg.vocab_size;
    let mut out: Vec<(Vec<u32>, Vec<Option<(f32, Vec<(u32, f32)>)>>)> =
        vec![(Vec::new(), Vec::new()); reqs.len()];
    let mut owner: Vec<Option<usize>> = vec![None; slots];
    let mut submit = 0;
    loop {
        for e in events.iter().filter(|e| e.at() == submit) {
            match *e {
                Event::Join { slot, req, .. } => {
                    let r = &reqs[req];
                    let logits = model
                        .forward_slot(b, &kv, slot, &r.prompt, 0, Logits::Last)
                        .expect("prefill");
                    let first = sample(&logits, &r.params, &[], r.seq_id, 0);
                    let mut counts = vec![0u32; vocab];
                    counts[first as usize] += 1;
                    out[req].0.push(first);
                    out[req].1.push(None);
                    b.slot_start(
                        dec,
                        slot,
                        &SlotStart {
                            token: first,
                            pos: r.prompt.len(),
                            sampling: &r.params,
                            seq_id: r.seq_id,
                            step: 1,
                            counts: Some(&counts),
                            logprobs: r.logprobs,
                        },
                    )
                    .expect("slot start");
                    owner[slot] = Some(req);
                }
                Event::Leave { slot, .. } => {
                    b.slot_stop(dec, slot).expect("slot stop");
                    owner[slot] = None;
                }
            }
        }
        let pending = events.iter().any(|e| e.at() > submit);
        let live: Vec<usize> = (0..slots)
            .filter(|&s| owner[s].is_some_and(|q| out[q].0.len() < reqs[q].n))
            .collect();
        if live.is_empty() && !pending {
            return out;
        }
        let got = b.slots_run(dec, steps).expect("slots run");
        #[allow(clippy::needless_range_loop)]
        for s in 0..slots {
            let Some(q) = owner[s] else { continue };
            for k in 0..got.steps {
                let id = got.id(k, s);
                if id == u32::MAX || out[q].0.len() >= reqs[q].n {
                    continue;
                }
                out[q].0.push(id);
                out[q].1.push(
                    got.logprobs[k * slots + s]
                        .as_ref()
                        .map(|l| (l.logprob, l.top.clone())),
                );
            }
            // Done, or retired on the device at the context capacity (only idle entries).
            let retired = (0..got.steps).all(|k| got.id(k, s) == u32::MAX);
            if out[q].0.len() >= reqs[q].n || retired {
                b.slot_stop(dec, s).expect("slot stop");
                owner[s] = None;
            }
        }
        submit += 1;
    }
}

/// Prompt variants of a fixture's short prompt (distinct sequences of different lengths).
fn prompts(fx: &Fixture) -> Vec<Vec<u32>> {
    let base = fx.prompt("short").expect("short prompt").ids;
    let v = fx.config.vocab_size as u32;
    vec![
        base.clone(),
        base.iter().rev().copied().collect(),
        base.iter()
            .take(base.len() / 2 + 1)
            .map(|&t| (t * 7 + 3) % (v - 3) + 3)
            .collect(),
    ]
}

fn sampled(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.02,
        repetition_penalty: 1.1,
        presence_penalty: 0.1,
        frequency_penalty: 0.05,
        logit_bias: vec![(5, 1.5), (6, -2.0)],
        seed,
    }
}

/// Three requests (greedy, seeded-sampled with penalties and bias, greedy with logprobs) in 4
/// slots: two start together, the third joins after two submits into a slot another request
/// left; every request's tokens equal the reference's.
fn check_family(family: &str, steps: usize) {
    let dev = device();
    let fx = Fixture::load(family).unwrap_or_else(|e| panic!("fixture {family}: {e}"));
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let ps = prompts(&fx);
    let n = 14;
    let reqs = vec![
        Req {
            prompt: ps[0].clone(),
            params: SamplingParams::default(),
            n,
            seq_id: 1,
            logprobs: None,
        },
        Req {
            prompt: ps[1].clone(),
            params: sampled(42),
            n,
            seq_id: 2,
            logprobs: None,
        },
        Req {
            prompt: ps[2].clone(),
            params: SamplingParams::default(),
            n,
            seq_id: 3,
            logprobs: Some(5),
        },
        // Stopped early (a client leaving): its slot is reused by request 2.
        Req {
            prompt: ps[2].clone(),
            params: sampled(7),
            n: 64,
            seq_id: 4,
            logprobs: None,
        },
    ];
    let ctx = 64;
    let events = [
        Event::Join {
            at: 0,
            slot: 0,
            req: 0,
        },
        Event::Join {
            at: 0,
            slot: 3,
            req: 1,
        },
        Event::Join {
            at: 0,
            slot: 1,
            req: 3,
        },
        Event::Leave { at: 2, slot: 1 },
        Event::Join {
            at: 2,
            slot: 1,
            req: 2,
        },
    ];
    let got = batched(&mut b, &model, &reqs, 4, ctx, KvType::F32, &events, steps);
    for (i, r) in reqs.iter().enumerate().take(3) {
        let (want, logits) = reference(&mut b, &model, r, ctx, KvType::F32);
        assert_eq!(
            got[i].0, want,
            "{family} request {i}: batched tokens differ from the per-dispatch reference"
        );
        if r.logprobs.is_some() {
            for (k, lp) in got[i].1.iter().enumerate().skip(1) {
                let (chosen, top) = lp.as_ref().expect("logprobs requested");
                let ls = log_softmax(&logits[k]);
                // Batched and single-sequence logits differ by ~1e-5 (matmul vs matvec order).
                assert!(
                    (chosen - ls[want[k] as usize]).abs() < 1e-3,
                    "{family} step {k}: logprob {chosen} vs {}",
                    ls[want[k] as usize]
                );
                let want_top = vkllm_cpu::top_logprobs(&logits[k], 5);
                let ids: Vec<u32> = top.iter().map(|t| t.0).collect();
                let want_ids: Vec<u32> = want_top.iter().map(|t| t.0).collect();
                assert_eq!(ids, want_ids, "{family} step {k}: top-5 ids");
            }
        }
    }
    // The early-stopped request produced exactly the tokens it had when it left.
    let left = Req {
        n: got[3].0.len(),
        ..reqs[3].clone()
    };
    let (want3, _) = reference(&mut b, &model, &left, ctx, KvType::F32);
    assert!(
        !got[3].0.is_empty() && want3 == got[3].0,
        "{family}: the request that left diverged before leaving"
    );
    eprintln!("{family}: 3 requests x {n} tokens batched == reference ({steps} steps/submit)");
}

#[test]
fn slots_match_reference_llama() {
    check_family("llama", 4);
}

#[test]
fn slots_match_reference_mistral() {
    check_family("mistral", 8);
}

#[test]
fn slots_match_reference_qwen2() {
    check_family("qwen2", 1);
}

#[test]
fn slots_match_reference_qwen3() {
    check_family("qwen3", 4);
}

#[test]
fn slots_match_reference_gemma() {
    check_family("gemma", 4);
}

#[test]
fn slots_match_reference_gemma2() {
    check_family("gemma2", 3);
}

#[test]
fn slots_match_reference_gemma3() {
    check_family("gemma3", 4);
}

/// A sequence gives the same tokens alone in a 1-slot decoder and batched with two others.
#[test]
fn alone_equals_batched() {
    let dev = device();
    let fx = Fixture::load("qwen2").expect("fixture");
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let ps = prompts(&fx);
    let reqs: Vec<Req> = (0..3)
        .map(|i| Req {
            prompt: ps[i].clone(),
            params: sampled(100 + i as u64),
            n: 20,
            seq_id: i as u64,
            logprobs: None,
        })
        .collect();
    let alone = batched(
        &mut b,
        &model,
        &reqs[..1],
        1,
        64,
        KvType::F32,
        &[Event::Join {
            at: 0,
            slot: 0,
            req: 0,
        }],
        8,
    );
    let events: Vec<Event> = (0..3)
        .map(|i| Event::Join {
            at: 0,
            slot: 2 - i,
            req: i,
        })
        .collect();
    let together = batched(&mut b, &model, &reqs, 3, 64, KvType::F32, &events, 8);
    assert_eq!(alone[0].0, together[0].0);
}

/// f16 KV cache: the batched GPU decode gives the CPU reference's tokens when the CPU stores
/// its keys and values rounded to f16 too, through the wide decode split (the default), the
/// grouped split it replaces (tuning `attn_wide=0`), the wide split whose last workgroup merges
/// (`attn_wide_merge`) and that one with the input step folded in (`attn_wide_rope`).
#[test]
fn f16_kv_matches_cpu() {
    // The shared device's lock keeps the other GPU tests out meanwhile.
    let _one_at_a_time = device();
    for (wide, merge, rope) in [
        (true, false, false),
        (false, false, false),
        (true, true, false),
        (true, true, true),
    ] {
        let mut opts = common::options();
        opts.tuning.attn_wide = wide;
        opts.tuning.attn_wide_merge = merge;
        opts.tuning.attn_wide_rope = rope;
        let dev = common::open(&opts);
        f16_kv_matches_cpu_with(&dev, wide);
        // The path asked for is the one that ran.
        let split = wide && !merge;
        assert_eq!(dev.has_pipeline("attn_decode_split_wide"), split);
        assert_eq!(dev.has_pipeline("attn_decode_split_gqa"), !wide);
        assert_eq!(dev.has_pipeline("attn_decode_merge"), !merge);
        assert_eq!(dev.has_pipeline("attn_decode_wide_merged"), merge && !rope);
        assert_eq!(dev.has_pipeline("attn_decode_wide_rope"), rope);
    }
}

fn f16_kv_matches_cpu_with(dev: &vkllm_vk::Device, wide: bool) {
    for family in ["llama", "gemma2"] {
        let fx = Fixture::load(family).expect("fixture");
        let mut b = VulkanBackend::new(dev.clone());
        let model =
            Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
        let mut cpu = CpuBackend::new();
        let cpu_model =
            Model::load(fx.config.clone(), &fx.weights, &mut cpu, DEFAULT_CHUNK).expect("load");
        let r = Req {
            prompt: prompts(&fx)[0].clone(),
            params: SamplingParams::default(),
            n: 16,
            seq_id: 0,
            logprobs: None,
        };
        let got = batched(
            &mut b,
            &model,
            std::slice::from_ref(&r),
            2,
            48,
            KvType::F16,
            &[Event::Join {
                at: 0,
                slot: 1,
                req: 0,
            }],
            4,
        );
        let (want, _) = reference(&mut cpu, &cpu_model, &r, 48, KvType::F16);
        assert_eq!(got[0].0, want, "{family}: f16 KV tokens (attn_wide {wide})");
    }
}

/// Quantized KV caches: the batched GPU decode (staged RoPE, quantizing append, the grouped
/// split reading blocks) gives the CPU reference's tokens when the CPU stores what the blocks
/// read back.
#[test]
fn quantized_kv_matches_cpu() {
    let dev = device();
    for (family, kv) in [
        ("qwen3", KvType::Q8_0),
        ("gemma2", KvType::Q8_0),
        ("qwen3", KvType::Q4_0),
    ] {
        let fx = Fixture::load(family).expect("fixture");
        let mut b = VulkanBackend::new(dev.clone());
        let model =
            Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
        let mut cpu = CpuBackend::new();
        let cpu_model =
            Model::load(fx.config.clone(), &fx.weights, &mut cpu, DEFAULT_CHUNK).expect("load");
        let reqs: Vec<Req> = (0..2)
            .map(|i| Req {
                prompt: prompts(&fx)[i].clone(),
                params: SamplingParams::default(),
                n: 16,
                seq_id: i as u64,
                logprobs: None,
            })
            .collect();
        let got = batched(
            &mut b,
            &model,
            &reqs,
            3,
            48,
            kv,
            &[
                Event::Join {
                    at: 0,
                    slot: 2,
                    req: 0,
                },
                Event::Join {
                    at: 3,
                    slot: 0,
                    req: 1,
                },
            ],
            4,
        );
        for (i, r) in reqs.iter().enumerate() {
            let (want, _) = reference(&mut cpu, &cpu_model, r, 48, kv);
            assert_eq!(got[i].0, want, "{family} {}: request {i} tokens", kv.name());
        }
    }
}

/// A slot that reaches the context capacity retires on the device: it yields exactly the
/// tokens that fit and no more.
#[test]
fn slot_retires_at_capacity() {
    let dev = device();
    let fx = Fixture::load("llama").expect("fixture");
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let prompt = prompts(&fx)[0].clone();
    let ctx = prompt.len() + 5;
    let r = Req {
        prompt,
        params: SamplingParams::default(),
        n: 100,
        seq_id: 0,
        logprobs: None,
    };
    let got = batched(
        &mut b,
        &model,
        std::slice::from_ref(&r),
        1,
        ctx,
        KvType::F32,
        &[Event::Join {
            at: 0,
            slot: 0,
            req: 0,
        }],
        8,
    );
    // Positions prompt..ctx-1 take 5 decode steps after the first token: 6 tokens in all.
    assert_eq!(got[0].0.len(), 6);
    let (want, _) = reference(&mut b, &model, &Req { n: 6, ..r }, ctx, KvType::F32);
    assert_eq!(got[0].0, want);
}

/// A decoder recorded without logprobs gives the reference's greedy tokens, refuses a slot that
/// asks for logprobs, and records no logprobs dispatch.
#[test]
fn decoder_without_logprobs() {
    let dev = device();
    let fx = Fixture::load("llama").expect("fixture");
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let prompt = prompts(&fx)[0].clone();
    let ctx = prompt.len() + 24;
    let r = Req {
        prompt,
        params: SamplingParams::default(),
        n: 17,
        seq_id: 0,
        logprobs: None,
    };
    let kv = model.new_kv_slots(&mut b, ctx, 2, KvType::F32).expect("kv");
    let cfg = SlotDecoderConfig {
        logprobs: false,
        ..SlotDecoderConfig::default()
    };
    let dec = b
        .slot_decoder(&model, &kv, cfg)
        .expect("record slot decoder");
    let logits = model
        .forward_slot(&mut b, &kv, 0, &r.prompt, 0, Logits::Last)
        .expect("prefill");
    let first = sample(&logits, &r.params, &[], r.seq_id, 0);
    let start = |logprobs| SlotStart {
        token: first,
        pos: r.prompt.len(),
        sampling: &r.params,
        seq_id: r.seq_id,
        step: 1,
        counts: None,
        logprobs,
    };
    let err = b
        .slot_start(dec, 1, &start(Some(0)))
        .expect_err("logprobs asked of a decoder without them");
    assert!(err.to_string().contains("logprobs"), "{err}");
    b.slot_start(dec, 0, &start(None)).expect("slot start");
    let mut toks = vec![first];
    while toks.len() < r.n {
        let got = b.slots_run(dec, 8).expect("slots run");
        for k in 0..got.steps {
            assert!(got.logprobs[k * got.slots].is_none());
            if toks.len() < r.n {
                toks.push(got.id(k, 0));
            }
        }
    }
    let (want, _) = reference(&mut b, &model, &r, ctx, KvType::F32);
    assert_eq!(toks, want);
    // The recorded step has no logprobs dispatch (and still its sampling and advance).
    let kernels: Vec<&str> = b
        .slot_profile(dec, &model, &kv, 1)
        .expect("profile")
        .iter()
        .map(|d| d.kernel)
        .collect();
    assert!(kernels.contains(&"decode_advance"), "{kernels:?}");
    assert!(!kernels.contains(&"logprobs"), "{kernels:?}");
}

/// A decoder that allows logprobs runs the logprobs dispatch only while a slot asks for them:
/// the recorded step has it after such a slot starts and not before or after it stops, and the
/// slot gets its logprobs while the other does not.
#[test]
fn logprobs_dispatch_only_when_asked() {
    let dev = device();
    let fx = Fixture::load("llama").expect("fixture");
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let ps = prompts(&fx);
    let ctx = ps.iter().map(Vec::len).max().unwrap_or(0) + 40;
    let kv = model.new_kv_slots(&mut b, ctx, 2, KvType::F32).expect("kv");
    let dec = b
        .slot_decoder(&model, &kv, SlotDecoderConfig::default())
        .expect("record slot decoder");
    let params = SamplingParams::default();
    let start = |b: &mut VulkanBackend, slot: usize, logprobs| {
        let logits = model
            .forward_slot(b, &kv, slot, &ps[slot], 0, Logits::Last)
            .expect("prefill");
        let first = sample(&logits, &params, &[], 0, 0);
        b.slot_start(
            dec,
            slot,
            &SlotStart {
                token: first,
                pos: ps[slot].len(),
                sampling: &params,
                seq_id: 0,
                step: 1,
                counts: None,
                logprobs,
            },
        )
        .expect("slot start");
    };
    let has_lp = |b: &mut VulkanBackend| {
        b.slot_profile(dec, &model, &kv, 1)
            .expect("profile")
            .iter()
            .any(|d| d.kernel == "logprobs")
    };
    start(&mut b, 0, None);
    assert!(!has_lp(&mut b), "no slot asks for logprobs");
    start(&mut b, 1, Some(2));
    assert!(has_lp(&mut b), "slot 1 asks for logprobs");
    let got = b.slots_run(dec, 4).expect("slots run");
    for k in 0..got.steps {
        assert!(got.logprobs[k * got.slots].is_none());
        let lp = got.logprobs[k * got.slots + 1]
            .as_ref()
            .expect("slot 1's logprobs");
        assert!(lp.logprob <= 0.0 && lp.top.len() == 2, "{lp:?}");
    }
    b.slot_stop(dec, 1).expect("slot stop");
    assert!(!has_lp(&mut b), "slot 1 stopped");
}

/// A step in two submits (`slots_forward`, then `slots_finish`) gives the reference's sampled
/// tokens like `slots_run`; while a forward is in flight only masks may be written, and the
/// calls out of order are typed errors.
#[test]
fn split_step_matches_reference() {
    let dev = device();
    let fx = Fixture::load("llama").expect("fixture");
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let prompt = prompts(&fx)[0].clone();
    let ctx = prompt.len() + 24;
    let r = Req {
        prompt,
        params: SamplingParams::default(),
        n: 9,
        seq_id: 3,
        logprobs: None,
    };
    let kv = model.new_kv_slots(&mut b, ctx, 2, KvType::F32).expect("kv");
    let plain = b
        .slot_decoder(&model, &kv, SlotDecoderConfig::default())
        .expect("record slot decoder");
    let err = b.slots_forward(plain).expect_err("no split recordings");
    assert!(err.to_string().contains("split_step"), "{err}");
    let cfg = SlotDecoderConfig {
        split_step: true,
        ..SlotDecoderConfig::default()
    };
    let dec = b
        .slot_decoder(&model, &kv, cfg)
        .expect("record slot decoder");
    let err = b.slots_finish(dec).expect_err("nothing in flight");
    assert!(err.to_string().contains("no forward in flight"), "{err}");
    let logits = model
        .forward_slot(&mut b, &kv, 0, &r.prompt, 0, Logits::Last)
        .expect("prefill");
    let first = sample(&logits, &r.params, &[], r.seq_id, 0);
    let start = SlotStart {
        token: first,
        pos: r.prompt.len(),
        sampling: &r.params,
        seq_id: r.seq_id,
        step: 1,
        counts: None,
        logprobs: None,
    };
    b.slot_start(dec, 0, &start).expect("slot start");
    let mut toks = vec![first];
    while toks.len() < r.n {
        b.slots_forward(dec).expect("forward");
        assert!(b.slots_forward(dec).is_err(), "a second forward in flight");
        assert!(
            b.slot_start(dec, 1, &start).is_err(),
            "start while in flight"
        );
        assert!(b.slots_run(dec, 1).is_err(), "run while in flight");
        b.slot_mask(dec, 1, None).expect("masks may be written");
        let got = b.slots_finish(dec).expect("finish");
        assert_eq!(got.steps, 1);
        toks.push(got.id(0, 0));
    }
    let (want, _) = reference(&mut b, &model, &r, ctx, KvType::F32);
    assert_eq!(toks, want);
}
