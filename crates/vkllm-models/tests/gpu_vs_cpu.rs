//! Tier "gpu model vs cpu model": the Vulkan forward of every dense family against the CPU
//! forward, under the Khronos validation layer (any message fails the submission). Logits at
//! every prompt position within `parity::GPU_VS_CPU_MAX_ABS` (2e-4), greedy 32 tokens identical
//! to the CPU's and to transformers', on the short and the long (3-chunk prefill) prompt.
//! Without a Vulkan device these tests fail with the reason.

mod common;

use common::device;
use vkllm_models::fixtures::Fixture;
use vkllm_models::parity::{self, gpu_vs_cpu_with};

fn check(family: &str) {
    check_with(family, false);
}

/// `folded`: decode attention with the input step folded in (`attn_decode_rope`).
fn check_with(family: &str, folded: bool) {
    let dev = device();
    let fx = Fixture::load(family).unwrap_or_else(|e| panic!("fixture {family}: {e}"));
    for prompt in ["short", "long"] {
        let row = gpu_vs_cpu_with(&dev, &fx, prompt, |b| {
            if folded { b.with_folded_attention() } else { b }
        })
        .unwrap_or_else(|e| panic!("{family} {prompt}: {e}"));
        eprint!("{}", parity::render_table(std::slice::from_ref(&row)));
        let (matched, total) = row.greedy.expect("model rows carry greedy counts");
        assert!(
            row.diff.within(parity::GPU_VS_CPU_MAX_ABS, f64::INFINITY),
            "{family} {prompt}: max |gpu - cpu| {:.3e} > {:.0e} (non-finite: {})",
            row.diff.max_abs,
            parity::GPU_VS_CPU_MAX_ABS,
            row.diff.non_finite
        );
        assert_eq!(
            matched, total,
            "{family} {prompt}: greedy diverged at step {matched}"
        );
    }
}

#[test]
fn llama() {
    check("llama");
}

// The folded decode attention (not the default) on the families it changes most: per-head
// q/k norms (qwen3), norms with 1 + w, sliding windows and softcap-free GQA (gemma3), plain
// GQA (llama).
#[test]
fn folded_attention_qwen3() {
    check_with("qwen3", true);
}

#[test]
fn folded_attention_gemma3() {
    check_with("gemma3", true);
}

#[test]
fn folded_attention_llama() {
    check_with("llama", true);
}

#[test]
fn mistral() {
    check("mistral");
}

#[test]
fn qwen2() {
    check("qwen2");
}

#[test]
fn qwen3() {
    check("qwen3");
}

#[test]
fn gemma() {
    check("gemma");
}

#[test]
fn gemma2() {
    check("gemma2");
}

#[test]
fn gemma3() {
    check("gemma3");
}

#[test]
fn qwen3_5() {
    check("qwen3_5");
}

#[test]
fn qwen3_5_moe() {
    check("qwen3_5_moe");
}

#[test]
fn qwen3_next() {
    check("qwen3_next");
}

#[test]
fn qwen3_moe() {
    check("qwen3_moe");
}

/// A prompt of `n` ids in 3..vocab from a fixed LCG (reproducible, no special ids).
fn long_prompt(n: usize, vocab: u32, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            3 + ((s >> 33) as u32) % (vocab - 3)
        })
        .collect()
}

/// At least 2048 tokens: split-K decode attention over many chunks, sliding windows far shorter than
/// the context (mistral, gemma2), Llama 3 RoPE scaling at large positions (llama), 17 prefill
/// chunks. GPU logits at every position within the model tier's bound, 8 greedy tokens equal.
#[test]
fn long_context() {
    let dev = device();
    for family in ["llama", "mistral", "gemma2"] {
        let fx = Fixture::load(family).unwrap_or_else(|e| panic!("fixture {family}: {e}"));
        let ids = long_prompt(2100, fx.config.vocab_size as u32, 7);
        let (cpu_logits, cpu_tokens) =
            parity::run_ids(&mut vkllm_models::CpuBackend::new(), &fx, &ids, 8).expect("cpu");
        let mut gpu = vkllm_models::VulkanBackend::new(dev.clone());
        let (gpu_logits, gpu_tokens) = parity::run_ids(&mut gpu, &fx, &ids, 8).expect("gpu");
        let d = vkllm_cpu::compare::diff(&gpu_logits, &cpu_logits);
        eprintln!(
            "{family} 2100 tokens: max |gpu - cpu| {:.3e}, nmse {:.3e}",
            d.max_abs, d.nmse
        );
        assert!(
            d.within(parity::GPU_VS_CPU_MAX_ABS, f64::INFINITY),
            "{family}: {d:?}"
        );
        assert_eq!(gpu_tokens, cpu_tokens, "{family}: greedy");
    }
}

/// Two runs of the same prompt on the same device give bit-identical logits (fixed reduction
/// order, no atomics).
#[test]
fn repeatable() {
    let dev = device();
    let fx = Fixture::load("gemma3").expect("fixture");
    let golden = fx.prompt("long").expect("prompt");
    let run = || {
        let mut gpu = vkllm_models::VulkanBackend::new(dev.clone());
        parity::run_prompt(&mut gpu, &fx, &golden).expect("gpu")
    };
    let (a, ta) = run();
    let (b, tb) = run();
    assert_eq!(ta, tb);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&a) == bits(&b),
        "logits differ between two identical runs"
    );
}

/// How forwards reach the GPU changes nothing: step inputs in host-visible memory with the
/// logits read in the same submit, and a forward submitted in parts while it is recorded (the
/// defaults), give logits bit-identical to uploads, downloads and one submit per forward
/// (`with_submits(false, None)`) on the long prompt (prefill, then decode), for a dense and a
/// hybrid family; with parts from 4 dispatches (the tiny models' forwards can be shorter than
/// the default first part's 32 on devices that fuse more) early parts were really submitted.
#[test]
fn submit_paths_agree() {
    let dev = device();
    for family in ["qwen3", "qwen3_5"] {
        let fx = Fixture::load(family).expect("fixture");
        let golden = fx.prompt("long").expect("prompt");
        let run = |one: bool, split: Option<usize>| {
            let mut gpu = vkllm_models::VulkanBackend::new(dev.clone()).with_submits(one, split);
            let out = parity::run_prompt(&mut gpu, &fx, &golden).expect("gpu");
            (out, gpu.parts_submitted())
        };
        let ((a, ta), parts) = run(true, Some(4));
        let ((b, tb), none) = run(false, None);
        assert!(parts > 0, "{family}: no forward was submitted in parts");
        assert_eq!(none, 0, "{family}: parts submitted with splitting off");
        assert_eq!(ta, tb, "{family}: greedy tokens");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(bits(&a) == bits(&b), "{family}: logits differ");
    }
}

/// The decode step recorded once and replayed for every token (positions and token ids come
/// from device buffers): logits bit-identical to the per-dispatch reference path at every step,
/// greedy tokens identical to the CPU's and transformers', for every family, on the long prompt
/// (prefilled in three chunks).
#[test]
fn recorded_decode_replays() {
    let dev = device();
    for family in vkllm_models::Family::ALL {
        let fx = Fixture::load(family.name()).expect("fixture");
        let golden = fx.prompt("long").expect("prompt");
        let mut b = vkllm_models::VulkanBackend::new(dev.clone());
        let model = vkllm_models::Model::load(
            fx.config.clone(),
            &fx.weights,
            &mut b,
            vkllm_models::DEFAULT_CHUNK,
        )
        .expect("load");
        let n_gen = golden.greedy.len();
        let kv = model.new_kv(&mut b, golden.ids.len() + n_gen).expect("kv");
        let logits = model
            .forward(&mut b, &kv, &golden.ids, 0, vkllm_models::Logits::Last)
            .expect("prefill");
        let step = b.record_decode(&model, &kv).expect("record");
        let mut tokens = vec![parity::argmax(&logits)];
        while tokens.len() < n_gen {
            let pos = golden.ids.len() + tokens.len() - 1;
            let last = *tokens.last().unwrap();
            let r = b.replay_decode(&step, &model, last, pos).expect("replay");
            // The per-dispatch reference path on the same state (it rewrites the same KV row
            // with the same values): bit-identical logits.
            let f = model
                .forward(&mut b, &kv, &[last], pos, vkllm_models::Logits::Last)
                .expect("reference step");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(
                bits(&r) == bits(&f),
                "{}: replayed step at {pos} differs from the reference path",
                family.name()
            );
            tokens.push(parity::argmax(&r));
        }
        assert_eq!(tokens, golden.greedy, "{}: recorded decode", family.name());
        // Past the cache is a typed error, not a hang or a wrong answer.
        let full = b.replay_decode(&step, &model, 3, kv.capacity);
        assert!(
            matches!(full, Err(vkllm_models::ModelError::ContextFull { .. })),
            "{full:?}"
        );
    }
}
