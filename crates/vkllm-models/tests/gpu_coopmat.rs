//! The dense families on the device as `vkllm run` opens it: cooperative-matrix prefill where
//! the device has it (activations rounded to f16 inside the tiles), the portable f32 kernels
//! elsewhere (lavapipe). Greedy 32 tokens must equal the CPU's and transformers' on the long
//! (3-chunk prefill) prompt, logits within `COOP_MAX_NMSE` of the CPU's.
//!
//! Tolerance: the coop matmul rounds each activation and weight to f16 (relative error <=
//! 2^-11) before f32-accumulated products, in every projection of every layer, so the error
//! compounds through the model: on the H200 (2026-11-29) the seven fixtures gave nmse 7.5e-7 to
//! 6.1e-6 (max relative error 1.2e-3 to 8.7e-3, max absolute 2e-2 to 0.13 on logits up to ~15)
//! with every greedy token identical. The bound nmse <= 1e-4 (1% rms relative error) leaves room
//! for that rounding; a wrong tile, edge or accumulate gives nmse of order 1. On devices without
//! cooperative matrices the same check runs the portable f32 path (nmse ~1e-13).

use vkllm_models::fixtures::Fixture;
use vkllm_models::parity::{self, gpu_vs_cpu};
use vkllm_vk::{Device, DeviceOptions, Validation};

const COOP_MAX_NMSE: f64 = 1e-4;

fn check(family: &str) {
    check_with(
        family,
        vkllm_vk::tuning_from_env().unwrap_or_else(|e| panic!("VKLLM_TUNE: {e}")),
    );
}

fn check_with(family: &str, tuning: vkllm_vk::Tuning) {
    let opts = DeviceOptions {
        choice: vkllm_vk::DeviceChoice::from_env(),
        validation: match std::env::var("VKLLM_TEST_NO_VALIDATION") {
            Ok(v) if v == "1" => Validation::Off,
            _ => Validation::On,
        },
        tuning,
        ..Default::default()
    };
    let dev = Device::new(&opts)
        .unwrap_or_else(|e| panic!("GPU tests need a Vulkan device (lavapipe in CI): {e}"));
    eprintln!(
        "device: {} (cooperative matrices {})",
        dev.info().summary(),
        if dev.coopmat() { "on" } else { "off" }
    );
    let fx = Fixture::load(family).unwrap_or_else(|e| panic!("fixture {family}: {e}"));
    let row = gpu_vs_cpu(&dev, &fx, "long").unwrap_or_else(|e| panic!("{family}: {e}"));
    eprint!("{}", parity::render_table(std::slice::from_ref(&row)));
    let (matched, total) = row.greedy.expect("model rows carry greedy counts");
    assert!(
        row.diff.within(f64::INFINITY, COOP_MAX_NMSE),
        "{family}: nmse(gpu, cpu) {:.3e} > {COOP_MAX_NMSE:.0e} (non-finite: {})",
        row.diff.nmse,
        row.diff.non_finite
    );
    assert_eq!(
        matched, total,
        "{family}: greedy diverged at step {matched}"
    );
}

#[test]
fn llama() {
    check("llama");
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

/// Tuning `attn_f32_kv=direct`: the coop prefill attention reads the f32 cache in place (the
/// default reads an f16 copy of the visible rows, which the tests above check: the kernels round
/// K and V to f16 as they load them anyway, so the bound is the same, and a wrong copy (region,
/// length, ring) gives nmse of order 1). Dense, sliding-window ring (gemma3) and hybrid
/// attention layers (qwen3_5).
#[test]
fn f32_cache_read_in_place() {
    for family in ["qwen3", "gemma3", "qwen3_5"] {
        let mut t = vkllm_vk::tuning_from_env().unwrap_or_else(|e| panic!("VKLLM_TUNE: {e}"));
        t.attn_f32_kv = vkllm_vk::F32KvPrefill::Direct;
        check_with(family, t);
    }
}
