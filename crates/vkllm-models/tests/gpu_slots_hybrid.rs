//! Batched decode of hybrid (Gated DeltaNet) and MoE models on the device (slots): the recorded
//! multi-step decode with GPU sampling must give every sequence exactly the tokens of the
//! per-dispatch reference path (the sequence alone in its own state, one `forward` per token,
//! the CPU sampler), when slots join and leave mid-generation and a slot is reused, and a slot
//! restored from a snapshot of another slot continues bit-exactly; also with Q8_0 weights
//! (quantized experts). Under the validation layer.

mod common;

use common::device;
use vkllm_cpu::sampler::{SamplingParams, sample};
use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::{HybridModel, HybridState};
use vkllm_models::parity::argmax;
use vkllm_models::weights::TensorSource;
use vkllm_models::{
    Backend, DEFAULT_CHUNK, Logits, QuantScheme, QuantizingSource, SlotDecoderConfig, SlotStart,
    VulkanBackend,
};

#[derive(Clone)]
struct Req {
    prompt: Vec<u32>,
    params: SamplingParams,
    n: usize,
    seq_id: u64,
}

/// The reference: the sequence alone in a fresh one-slot state, one `forward` per token.
fn reference<B: Backend>(b: &mut B, m: &HybridModel, r: &Req, ctx: usize) -> Vec<u32> {
    let st = m.new_state(b, ctx).expect("state");
    let mut counts = vec![0u32; m.cfg.vocab_size];
    let mut logits = m
        .forward(b, &st, &r.prompt, 0, Logits::Last)
        .expect("prefill");
    let mut toks = Vec::new();
    loop {
        let t = sample(&logits, &r.params, &counts, r.seq_id, toks.len() as u64);
        toks.push(t);
        counts[t as usize] += 1;
        if toks.len() == r.n {
            return toks;
        }
        let pos = r.prompt.len() + toks.len() - 1;
        logits = m.forward(b, &st, &[t], pos, Logits::Last).expect("decode");
    }
}

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

/// Prefills `r` into `slot` (after a reset) and starts the slot with its first token.
fn join(
    b: &mut VulkanBackend,
    m: &HybridModel,
    st: &HybridState,
    dec: vkllm_models::SlotDecoderId,
    slot: usize,
    r: &Req,
) -> u32 {
    m.reset_slot(b, st, slot).expect("reset");
    let logits = m
        .forward_slot(b, st, slot, &r.prompt, 0, Logits::Last)
        .expect("prefill");
    let first = sample(&logits, &r.params, &[], r.seq_id, 0);
    let mut counts = vec![0u32; m.cfg.vocab_size];
    counts[first as usize] += 1;
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
            logprobs: None,
        },
    )
    .expect("slot start");
    first
}

/// Runs `reqs` through a hybrid slot decoder following `events` (keyed by submit index),
/// `steps` steps per submit; returns each request's tokens.
fn batched(
    b: &mut VulkanBackend,
    m: &HybridModel,
    reqs: &[Req],
    slots: usize,
    ctx: usize,
    events: &[Event],
    steps: usize,
) -> Vec<Vec<u32>> {
    let st = m.new_state_slots(b, ctx, slots).expect("state");
    let dec = b
        .hybrid_slot_decoder(m, &st, SlotDecoderConfig::default())
        .expect("record slot decoder");
    let mut out = vec![Vec::new(); reqs.len()];
    let mut owner: Vec<Option<usize>> = vec![None; slots];
    let mut submit = 0;
    loop {
        for e in events.iter().filter(|e| e.at() == submit) {
            match *e {
                Event::Join { slot, req, .. } => {
                    out[req].push(join(b, m, &st, dec, slot, &reqs[req]));
                    owner[slot] = Some(req);
                }
                Event::Leave { slot, .. } => {
                    b.slot_stop(dec, slot).expect("slot stop");
                    owner[slot] = None;
                }
            }
        }
        let pending = events.iter().any(|e| e.at() > submit);
        let live = (0..slots).any(|s| owner[s].is_some_and(|q| out[q].len() < reqs[q].n));
        if !live && !pending {
            return out;
        }
        let got = b.slots_run(dec, steps).expect("slots run");
        #[allow(clippy::needless_range_loop)]
        for s in 0..slots {
            let Some(q) = owner[s] else { continue };
            for k in 0..got.steps {
                let id = got.id(k, s);
                if id != u32::MAX && out[q].len() < reqs[q].n {
                    out[q].push(id);
                }
            }
            if out[q].len() >= reqs[q].n {
                b.slot_stop(dec, s).expect("slot stop");
                owner[s] = None;
            }
        }
        submit += 1;
    }
}

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

/// Three requests (greedy, seeded-sampled, greedy) in 4 slots: two start together with a
/// fourth that leaves after two submits; the third joins the slot it left (its recurrent state
/// reset and prefilled anew). Every finished request's tokens equal the reference's.
fn check_family(family: &str, steps: usize) {
    check_family_with(family, steps, None);
}

/// [`check_family`] with the weights quantized at load to `scheme` when given.
fn check_family_with(family: &str, steps: usize, scheme: Option<QuantScheme>) {
    let dev = device();
    let fx = Fixture::load(family).unwrap_or_else(|e| panic!("fixture {family}: {e}"));
    let mut b = VulkanBackend::new(dev.clone());
    let quantized = scheme.map(|s| QuantizingSource::new(&fx.weights, &fx.config, s));
    let src: &dyn TensorSource = match &quantized {
        Some(q) => q,
        None => &fx.weights,
    };
    let m = HybridModel::load(fx.config.clone(), src, &mut b, DEFAULT_CHUNK).expect("load");
    let ps = prompts(&fx);
    let n = 12;
    let req = |p: usize, params, n, seq_id| Req {
        prompt: ps[p].clone(),
        params,
        n,
        seq_id,
    };
    let reqs = vec![
        req(0, SamplingParams::default(), n, 1),
        req(1, sampled(42), n, 2),
        req(2, SamplingParams::default(), n, 3),
        req(2, sampled(7), 64, 4),
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
    let got = batched(&mut b, &m, &reqs, 4, ctx, &events, steps);
    for (i, r) in reqs.iter().enumerate().take(3) {
        let want = reference(&mut b, &m, r, ctx);
        assert_eq!(
            got[i], want,
            "{family} request {i}: batched tokens differ from the per-dispatch reference"
        );
    }
    let left = Req {
        n: got[3].len(),
        ..reqs[3].clone()
    };
    assert!(
        !got[3].is_empty() && reference(&mut b, &m, &left, ctx) == got[3],
        "{family}: the request that left diverged before leaving"
    );
    eprintln!("{family}: 3 requests x {n} tokens batched == reference ({steps} steps/submit)");
}

#[test]
fn slots_match_reference_qwen3_5() {
    check_family("qwen3_5", 4);
}

#[test]
fn slots_match_reference_qwen3_5_moe() {
    check_family("qwen3_5_moe", 3);
}

/// Q8_0 weights (experts included: read in their blocks by the expert kernels).
#[test]
fn slots_match_reference_qwen3_moe_q8_0() {
    check_family_with("qwen3_moe", 4, Some(QuantScheme::Q8_0));
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A snapshot of slot 0 after a prefill and a few steps, restored into slot 2 of the same
/// state, continues bit-exactly (per-dispatch path); restored into slot 3 and started in the
/// slot decoder, it yields the greedy tokens of the uninterrupted sequence.
#[test]
fn snapshot_restores_into_another_slot() {
    let dev = device();
    let fx = Fixture::load("qwen3_5").expect("fixture");
    let mut b = VulkanBackend::new(dev.clone());
    let m = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let prompt = prompts(&fx)[0].clone();
    let ctx = 64;
    let st = m.new_state_slots(&mut b, ctx, 4).expect("state");
    let step = |b: &mut VulkanBackend, slot: usize, tok: u32| {
        let pos = st.next[slot].get();
        m.forward_slot(b, &st, slot, &[tok], pos, Logits::Last)
            .expect("step")
    };
    let mut tok = argmax(
        &m.forward_slot(&mut b, &st, 0, &prompt, 0, Logits::Last)
            .expect("prefill"),
    );
    for _ in 0..3 {
        tok = argmax(&step(&mut b, 0, tok));
    }
    let snap = m.snapshot_slot(&mut b, &st, 0).expect("snapshot");
    // Slot 0 runs on: the uninterrupted continuation.
    let (mut t0, mut straight) = (tok, Vec::new());
    for _ in 0..6 {
        let l = step(&mut b, 0, t0);
        t0 = argmax(&l);
        straight.push(l);
    }
    m.restore_slot(&mut b, &snap, &st, 2).expect("restore");
    assert_eq!(st.next[2].get(), snap.pos);
    let (mut t2, mut restored) = (tok, Vec::new());
    for _ in 0..6 {
        let l = step(&mut b, 2, t2);
        t2 = argmax(&l);
        restored.push(l);
    }
    assert_eq!(
        bits(&restored.concat()),
        bits(&straight.concat()),
        "restored slot 2 differs from the uninterrupted slot 0"
    );

    // Into the slot decoder: restore into slot 3 and decode there.
    let dec = b
        .hybrid_slot_decoder(&m, &st, SlotDecoderConfig::default())
        .expect("decoder");
    m.restore_slot(&mut b, &snap, &st, 3).expect("restore");
    let greedy = SamplingParams::default();
    b.slot_start(
        dec,
        3,
        &SlotStart {
            token: tok,
            pos: snap.pos,
            sampling: &greedy,
            seq_id: 0,
            step: 1,
            counts: None,
            logprobs: None,
        },
    )
    .expect("start");
    let mut got = Vec::new();
    while got.len() < straight.len() {
        let r = b.slots_run(dec, 4).expect("run");
        got.extend(
            (0..r.steps)
                .map(|k| r.id(k, 3))
                .filter(|&id| id != u32::MAX),
        );
    }
    got.truncate(straight.len());
    let want: Vec<u32> = straight.iter().map(|l| argmax(l)).collect();
    assert_eq!(got, want, "slot decoder from a restored snapshot");
}

/// Tunings `q8a_xg1_produce` and `q8a_xg1_reuse` on a hybrid model's single-token decode (one
/// slot, Q8_0 weights, norm products over rows of 64+ on quantized x): with the output
/// projections (attention, DeltaNet, dense down) quantizing the residual for the next norm
/// product, or with a DeltaNet layer's z, b and a reusing its q/k/v's quantization, the greedy
/// tokens are those of a quantize launch per product (both off). (gpu_norm_qkv.rs counts the
/// launches saved on a dense model; q8x_reuse.rs in vkllm-vk those of the reuse.)
#[test]
fn one_slot_tokens_match_with_products_quantizing_their_output() {
    let fx = Fixture::load("qwen3_5").expect("fixture qwen3_5");
    let q = QuantizingSource::new(&fx.weights, &fx.config, QuantScheme::Q8_0);
    let ps = prompts(&fx);
    let reqs = vec![Req {
        prompt: ps[0].clone(),
        params: SamplingParams::default(),
        n: 16,
        seq_id: 1,
    }];
    let events = [Event::Join {
        at: 0,
        slot: 0,
        req: 0,
    }];
    let mut tokens = Vec::new();
    for (produce, reuse) in [(true, false), (false, true), (false, false)] {
        let dev = common::int8_device(|t| {
            t.q8a_xg1_norm = 64;
            t.q8a_xg1_produce = produce;
            t.q8a_xg1_reuse = reuse;
        });
        let mut b = VulkanBackend::new(dev);
        let m = HybridModel::load(fx.config.clone(), &q, &mut b, DEFAULT_CHUNK).expect("load");
        tokens.push(batched(&mut b, &m, &reqs, 1, 64, &events, 4).remove(0));
    }
    assert_eq!(tokens[0].len(), 16);
    assert_eq!(
        tokens[0], tokens[2],
        "greedy tokens with producers quantizing against the quantize launches"
    );
    assert_eq!(
        tokens[1], tokens[2],
        "greedy tokens with one quantization reused against a launch per product"
    );
}
