//! Sliding-window layers keep a ring of `window + chunk` rows (position `p` in row `p % ring`)
//! instead of the whole context. The fixtures' random-weight models of Gemma 3, Gemma 2 and
//! Mistral shape, given a window of 64 and prefill chunks of 48 (rings of 128 rows), over
//! prompts of 2100 tokens (the ring wraps 16 times):
//! - CPU ring == CPU full-context cache, bit for bit (the same keys summed in the same order),
//!   prefill logits at every position and 24 decode steps;
//! - GPU ring == CPU ring within the model tier's bound (`parity::GPU_VS_CPU_MAX_ABS`), greedy
//!   tokens equal, the recorded decode step bit-identical to the per-dispatch path;
//! - the batched slot decoder over many wraps: every token it picks is the CPU's greedy token
//!   (teacher-forced, within 1e-3 of the best log-probability) with its log-probability within
//!   1e-3 of the CPU's;
//! - rewinding: a prefix the ring still covers is reused bit-identically; one it does not cover
//!   is refused by `KvCache::reusable`, and continuing there anyway would be wrong.

mod common;

use common::device;
use vkllm_cpu::sampler::{SamplingParams, log_softmax};
use vkllm_models::fixtures::Fixture;
use vkllm_models::parity::{GPU_VS_CPU_MAX_ABS, argmax};
use vkllm_models::{
    Backend, CpuBackend, KvCache, KvType, Logits, Model, ModelConfig, SlotDecoderConfig, SlotStart,
    VulkanBackend,
};

const WINDOW: usize = 64;
const CHUNK: usize = 48;
/// `window + chunk` rounded up to `KV_ROW_ALIGN` (128).
const RING: usize = 128;
const PROMPT: usize = 2100;

/// The fixture's config with every sliding layer's window set to [`WINDOW`].
fn windowed(family: &str) -> (Fixture, ModelConfig) {
    let fx = Fixture::load(family).unwrap_or_else(|e| panic!("fixture {family}: {e}"));
    let mut cfg = fx.config.clone();
    let mut sliding = 0;
    for l in &mut cfg.layers {
        if l.window.is_some() {
            l.window = Some(WINDOW);
            sliding += 1;
        }
    }
    assert!(sliding > 0, "{family} has sliding layers");
    (fx, cfg)
}

/// `n` ids in 3..vocab from a fixed LCG.
fn ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            3 + ((s >> 33) as u32) % (vocab as u32 - 3)
        })
        .collect()
}

/// A cache whose every layer keeps the whole context (the model still attends within windows).
fn full_cache<B: Backend>(b: &mut B, cfg: &ModelConfig, capacity: usize) -> KvCache {
    let windows = vec![None; cfg.n_layers];
    KvCache::alloc(b, &windows, cfg.kv_dim(), capacity, CHUNK, 1, KvType::F32).expect("kv")
}

/// A ring cache of the model, checking its sliding layers wrap.
fn ring_cache<B: Backend>(b: &mut B, model: &Model, capacity: usize) -> KvCache {
    let kv = model.new_kv(b, capacity).expect("kv");
    for (l, lc) in kv.layers.iter().zip(&model.cfg.layers) {
        let want = if lc.window.is_some() { RING } else { capacity };
        assert_eq!(l.ring, want);
    }
    kv
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Prefill logits at every position, then `n_gen` greedy steps: (logits of all, tokens).
fn run<B: Backend>(
    b: &mut B,
    model: &Model,
    kv: &KvCache,
    prompt: &[u32],
    n_gen: usize,
) -> (Vec<f32>, Vec<u32>) {
    let vocab = model.cfg.vocab_size;
    let mut logits = model
        .forward(b, kv, prompt, 0, Logits::All)
        .expect("prefill");
    let mut tokens = vec![argmax(&logits[logits.len() - vocab..])];
    while tokens.len() < n_gen {
        let pos = prompt.len() + tokens.len() - 1;
        let step = model
            .forward(b, kv, &[*tokens.last().unwrap()], pos, Logits::Last)
            .expect("decode");
        tokens.push(argmax(&step));
        logits.extend(step);
    }
    (logits, tokens)
}

#[test]
fn cpu_ring_is_bit_identical_to_full_cache() {
    for family in ["gemma3", "gemma2", "mistral"] {
        let (fx, cfg) = windowed(family);
        let mut b = CpuBackend::new();
        let model = Model::load(cfg.clone(), &fx.weights, &mut b, CHUNK).expect("load");
        let prompt = ids(PROMPT, cfg.vocab_size, 11);
        let cap = PROMPT + 24;
        let ring = ring_cache(&mut b, &model, cap);
        let full = full_cache(&mut b, &cfg, cap);
        let (lr, tr) = run(&mut b, &model, &ring, &prompt, 24);
        let (lf, tf) = run(&mut b, &model, &full, &prompt, 24);
        assert_eq!(tr, tf, "{family}: tokens");
        assert!(
            bits(&lr) == bits(&lf),
            "{family}: ring logits differ from the full cache's"
        );
        // The window matters: the same model without windows gives other logits.
        let mut no_window = cfg.clone();
        no_window.layers.iter_mut().for_each(|l| l.window = None);
        let m2 = Model::load(no_window, &fx.weights, &mut b, CHUNK).expect("load");
        let kv2 = m2.new_kv(&mut b, PROMPT).expect("kv");
        let l2 = m2
            .forward(&mut b, &kv2, &prompt, 0, Logits::Last)
            .expect("forward");
        let last = &lr[(PROMPT - 1) * cfg.vocab_size..PROMPT * cfg.vocab_size];
        let d = vkllm_cpu::compare::diff(&l2, last);
        assert!(d.max_abs > 1e-3, "{family}: windows change the logits");
        eprintln!(
            "{family}: {PROMPT} tokens + 24 steps, ring {RING} rows == full cache, bit for bit"
        );
    }
}

#[test]
fn gpu_ring_matches_cpu_ring() {
    let dev = device();
    for family in ["gemma3", "gemma2"] {
        let (fx, cfg) = windowed(family);
        let mut cpu = CpuBackend::new();
        let cpu_model = Model::load(cfg.clone(), &fx.weights, &mut cpu, CHUNK).expect("load");
        let mut gpu = VulkanBackend::new(dev.clone());
        let gpu_model = Model::load(cfg.clone(), &fx.weights, &mut gpu, CHUNK).expect("load");
        let prompt = ids(PROMPT, cfg.vocab_size, 12);
        let n_gen = 16;
        let cap = PROMPT + n_gen;
        let ckv = ring_cache(&mut cpu, &cpu_model, cap);
        let gkv = ring_cache(&mut gpu, &gpu_model, cap);
        let (cl, ct) = run(&mut cpu, &cpu_model, &ckv, &prompt, n_gen);
        let (gl, gt) = run(&mut gpu, &gpu_model, &gkv, &prompt, n_gen);
        let d = vkllm_cpu::compare::diff(&gl, &cl);
        eprintln!(
            "{family}: {PROMPT} tokens + {n_gen} steps, ring {RING}: max |gpu - cpu| {:.3e}, nmse {:.3e}",
            d.max_abs, d.nmse
        );
        assert!(
            d.within(GPU_VS_CPU_MAX_ABS, f64::INFINITY),
            "{family}: {d:?}"
        );
        assert_eq!(gt, ct, "{family}: greedy tokens");

        // The recorded decode step over the ring: bit-identical to the per-dispatch path.
        let step = gpu.record_decode(&gpu_model, &gkv).expect("record");
        for k in 1..n_gen {
            let pos = PROMPT + k - 1;
            let r = gpu
                .replay_decode(&step, &gpu_model, gt[k - 1], pos)
                .expect("replay");
            let f = gpu_model
                .forward(&mut gpu, &gkv, &[gt[k - 1]], pos, Logits::Last)
                .expect("reference step");
            assert!(bits(&r) == bits(&f), "{family}: replayed step at {pos}");
            assert_eq!(argmax(&r), gt[k], "{family}: replayed token {k}");
        }
    }
}

#[test]
fn slot_decoder_over_wraps() {
    let dev = device();
    let (fx, cfg) = windowed("gemma3");
    let vocab = cfg.vocab_size;
    let mut gpu = VulkanBackend::new(dev.clone());
    let model = Model::load(cfg.clone(), &fx.weights, &mut gpu, CHUNK).expect("load");
    let (slots, ctx, n) = (2usize, 700usize, 300usize);
    let kv = model
        .new_kv_slots(&mut gpu, ctx, slots, KvType::F32)
        .expect("kv");
    assert!(kv.layers.iter().any(|l| l.ring == RING));
    let dec = gpu
        .slot_decoder(&model, &kv, SlotDecoderConfig::default())
        .expect("record slot decoder");
    // Slot 1 starts first with a longer prompt; slot 0 joins after three submits.
    let prompts = [ids(37, vocab, 21), ids(150, vocab, 22)];
    let join = [3usize, 0];
    let mut toks: Vec<Vec<u32>> = vec![Vec::new(); slots];
    let mut lps: Vec<Vec<f32>> = vec![Vec::new(); slots];
    let greedy = SamplingParams::default();
    let mut submit = 0;
    while toks.iter().any(|t| t.len() < n) {
        for s in 0..slots {
            if join[s] == submit {
                let logits = model
                    .forward_slot(&mut gpu, &kv, s, &prompts[s], 0, Logits::Last)
                    .expect("prefill");
                let first = argmax(&logits);
                toks[s].push(first);
                lps[s].push(log_softmax(&logits)[first as usize]);
                gpu.slot_start(
                    dec,
                    s,
                    &SlotStart {
                        token: first,
                        pos: prompts[s].len(),
                        sampling: &greedy,
                        seq_id: s as u64,
                        step: 1,
                        counts: None,
                        logprobs: Some(1),
                    },
                )
                .expect("slot start");
            }
        }
        let got = gpu.slots_run(dec, 8).expect("slots run");
        for s in 0..slots {
            for k in 0..got.steps {
                let id = got.id(k, s);
                if id == u32::MAX || toks[s].len() >= n || toks[s].is_empty() {
                    continue;
                }
                toks[s].push(id);
                let lp = got.logprobs[k * slots + s].as_ref().expect("logprobs");
                lps[s].push(lp.logprob);
            }
            if toks[s].len() >= n {
                gpu.slot_stop(dec, s).expect("stop");
            }
        }
        submit += 1;
    }
    // Teacher-forced CPU reference over the same tokens, with a ring cache too.
    let mut cpu = CpuBackend::new();
    let cpu_model = Model::load(cfg.clone(), &fx.weights, &mut cpu, CHUNK).expect("load");
    for s in 0..slots {
        let mut seq = prompts[s].clone();
        seq.extend_from_slice(&toks[s][..n - 1]);
        let ckv = ring_cache(&mut cpu, &cpu_model, ctx);
        let all = cpu_model
            .forward(&mut cpu, &ckv, &seq, 0, Logits::All)
            .expect("cpu");
        let mut worst: f32 = 0.0;
        for k in 0..n {
            let row = prompts[s].len() - 1 + k;
            let ls = log_softmax(&all[row * vocab..(row + 1) * vocab]);
            let best = ls.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let tok = toks[s][k] as usize;
            assert!(
                best - ls[tok] <= 1e-3,
                "slot {s} token {k} (position {row}): {tok} is not the CPU's greedy choice \
                 ({} below the best)",
                best - ls[tok]
            );
            worst = worst.max((lps[s][k] - ls[tok]).abs());
        }
        assert!(worst <= 1e-3, "slot {s}: logprob off by {worst}");
        eprintln!(
            "slot {s}: {n} tokens to position {}, ring {RING}: every token the CPU's greedy \
             choice, logprobs within {worst:.2e}",
            prompts[s].len() + n - 1
        );
    }
}

#[test]
fn rewinding_a_ring() {
    let (fx, cfg) = windowed("gemma3");
    let vocab = cfg.vocab_size;
    let mut b = CpuBackend::new();
    let model = Model::load(cfg.clone(), &fx.weights, &mut b, CHUNK).expect("load");
    let a = ids(400, vocab, 31);
    let tail = ids(30, vocab, 32);
    // Fresh logits of a[..l] + tail.
    let fresh = |b: &mut CpuBackend, l: usize| {
        let kv = ring_cache(b, &model, 600);
        let mut seq = a[..l].to_vec();
        seq.extend_from_slice(&tail);
        let all = model.forward(b, &kv, &seq, 0, Logits::All).expect("fresh");
        all[l * vocab..].to_vec()
    };
    // Written up to 400: the ring holds positions 272..400; a query at l sees l - 63..=l.
    for (l, keeps) in [(350usize, true), (335, true), (334, false), (200, false)] {
        let kv = ring_cache(&mut b, &model, 600);
        model
            .forward(&mut b, &kv, &a, 0, Logits::Last)
            .expect("turn 1");
        assert_eq!(kv.reusable(400, l), if keeps { l } else { 0 }, "l = {l}");
        let want = fresh(&mut b, l);
        let cont = model
            .forward(&mut b, &kv, &tail, l, Logits::All)
            .expect("continue");
        if keeps {
            assert!(bits(&cont) == bits(&want), "l = {l}: reused prefix");
        } else {
            // The ring lost keys the continuation needs (at 334 one key of the first query's
            // window): continuing anyway is wrong ...
            let d = vkllm_cpu::compare::diff(&cont, &want);
            eprintln!(
                "l = {l}: continuing on the stale ring is off by {:.3e}",
                d.max_abs
            );
            assert!(d.max_abs > 1e-3, "l = {l}: stale ring went unnoticed");
            // ... and recomputing from 0 in the same cache is right.
            let mut seq = a[..l].to_vec();
            seq.extend_from_slice(&tail);
            let all = model
                .forward(&mut b, &kv, &seq, 0, Logits::All)
                .expect("recompute");
            assert!(
                bits(&all[l * vocab..]) == bits(&want),
                "l = {l}: recomputed"
            );
        }
    }
}
