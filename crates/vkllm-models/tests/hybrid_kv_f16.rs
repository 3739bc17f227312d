//! Hybrid and MoE models with an f16 KV cache in their attention layers (recurrent states stay
//! f32): the CPU backend rounds keys and values to f16 as it stores them, the GPU stores f16
//! pairs; the GPU's logits differ from the CPU's by no more than f16 rounding moves them (plus
//! the f32 GPU-vs-CPU tolerance) and their greedy tokens are the same; f16 rounding moves the logits only a little from the f32 cache's;
//! snapshots of an f16 state restore bit-exactly and are refused by an f32 state and by the
//! host copy. Under the validation layer.

mod common;

use common::device;
use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::parity::{GPU_VS_CPU_MAX_ABS, argmax};
use vkllm_models::{Backend, CpuBackend, DEFAULT_CHUNK, KvType, Logits, VulkanBackend};

/// Prefill logits (every position) and `n` greedy tokens after them.
fn run<B: Backend>(
    b: &mut B,
    m: &HybridModel,
    ids: &[u32],
    kv: KvType,
    n: usize,
) -> (Vec<f32>, Vec<u32>) {
    let st = m.new_state_kv(b, ids.len() + n, 1, kv).expect("state");
    assert_eq!(st.dtype, kv);
    let logits = m.forward(b, &st, ids, 0, Logits::All).expect("prefill");
    let vocab = m.cfg.vocab_size;
    let mut toks = vec![argmax(&logits[logits.len() - vocab..])];
    while toks.len() < n {
        let pos = ids.len() + toks.len() - 1;
        let l = m
            .forward(b, &st, &[toks[toks.len() - 1]], pos, Logits::Last)
            .expect("decode");
        toks.push(argmax(&l));
    }
    (logits, toks)
}

#[test]
fn f16_kv_matches_the_cpu_on_hybrid_and_moe_models() {
    let dev = device();
    for family in ["qwen3_5", "qwen3_5_moe", "qwen3_next"] {
        let fx = Fixture::load(family).expect("fixture");
        let ids = fx
            .prompt("long")
            .or_else(|_| fx.prompt("short"))
            .expect("prompt")
            .ids;
        let mut cpu = CpuBackend::new();
        let cm = HybridModel::load(fx.config.clone(), &fx.weights, &mut cpu, DEFAULT_CHUNK)
            .expect("cpu model");
        let (want, want_toks) = run(&mut cpu, &cm, &ids, KvType::F16, 8);
        let (f32_logits, _) = run(&mut cpu, &cm, &ids, KvType::F32, 8);
        let rounding = vkllm_cpu::compare::diff(&want, &f32_logits);
        assert!(
            rounding.max_abs > 0.0 && rounding.max_abs < 5e-2,
            "{family}: f16 rounding moved the logits by {}",
            rounding.max_abs
        );
        let mut gpu = VulkanBackend::new(dev.clone());
        let gm = HybridModel::load(fx.config.clone(), &fx.weights, &mut gpu, DEFAULT_CHUNK)
            .expect("gpu model");
        let (got, got_toks) = run(&mut gpu, &gm, &ids, KvType::F16, 8);
        let d = vkllm_cpu::compare::diff(&got, &want);
        // The GPU's keys and values differ from the CPU's in the last f32 bits, so some round to
        // the neighbouring f16: the logits may differ by up to what f16 rounding itself moves
        // them (dense models' f16 caches behave the same), plus the f32 tolerance.
        let tol = GPU_VS_CPU_MAX_ABS + rounding.max_abs;
        eprintln!(
            "{family}: f16 rounding {:.3e}, gpu vs cpu {:.3e}",
            rounding.max_abs, d.max_abs
        );
        assert!(
            d.max_abs <= tol,
            "{family}: f16 KV logits max abs {} > {tol}",
            d.max_abs
        );
        assert_eq!(got_toks, want_toks, "{family}: greedy tokens");
    }
}

#[test]
fn f16_snapshots_restore_exactly() {
    let dev = device();
    let fx = Fixture::load("qwen3_5").expect("fixture");
    let ids = fx.prompt("short").expect("prompt").ids;
    let mut b = VulkanBackend::new(dev.clone());
    let m = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let cap = ids.len() + 8;
    let st = m.new_state_kv(&mut b, cap, 1, KvType::F16).expect("state");
    let l0 = m
        .forward(&mut b, &st, &ids, 0, Logits::Last)
        .expect("prefill");
    let snap = m.snapshot(&mut b, &st).expect("snapshot");
    let t = argmax(&l0);
    let a = m
        .forward(&mut b, &st, &[t], ids.len(), Logits::Last)
        .expect("step");
    // Restored into another f16 state: the same step gives the same bits.
    let other = m.new_state_kv(&mut b, cap, 1, KvType::F16).expect("other");
    m.restore(&mut b, &snap, &other).expect("restore");
    let b2 = m
        .forward(&mut b, &other, &[t], ids.len(), Logits::Last)
        .expect("step");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b2), "restored f16 state continues exactly");
    let f32_state = m.new_state(&mut b, cap).expect("f32 state");
    let err = m
        .restore(&mut b, &snap, &f32_state)
        .expect_err("dtype mismatch");
    assert!(err.to_string().contains("f16"), "{err}");
    let err = m
        .snapshot_to_host(&mut b, &snap)
        .expect_err("host copy of f16");
    assert!(err.to_string().contains("f32 only"), "{err}");
}
