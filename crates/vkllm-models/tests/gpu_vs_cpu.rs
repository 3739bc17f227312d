//! Tier "gpu model vs cpu model": the Vulkan forward of every dense family against the CPU
//! forward, under the Khronos validation layer (any message fails the submission). Logits at
//! every prompt position within `parity::GPU_VS_CPU_MAX_ABS` (2e-4), greedy 32 tokens identical
//! to the CPU's and to transformers', on the short and the long (3-chunk prefill) prompt.
//! Without a Vulkan device these tests fail with the reason.

use std::sync::{Mutex, MutexGuard, OnceLock};

use vkllm_models::fixtures::Fixture;
use vkllm_models::parity::{self, gpu_vs_cpu};
use vkllm_vk::{Device, DeviceOptions, PipelineCacheMode, Validation};

static DEVICE: OnceLock<Mutex<Device>> = OnceLock::new();

/// One validated device per test binary, one test at a time.
fn device() -> MutexGuard<'static, Device> {
    let m = DEVICE.get_or_init(|| {
        let opts = DeviceOptions {
            choice: vkllm_vk::DeviceChoice::from_env(),
            validation: match std::env::var("VKLLM_TEST_NO_VALIDATION") {
                Ok(v) if v == "1" => Validation::Off,
                _ => Validation::On,
            },
            pipeline_cache: PipelineCacheMode::Off,
            ..Default::default()
        };
        let dev = Device::new(&opts)
            .unwrap_or_else(|e| panic!("GPU tests need a Vulkan device (lavapipe in CI): {e}"));
        eprintln!("device: {}", dev.info().summary());
        Mutex::new(dev)
    });
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn check(family: &str) {
    let dev = device();
    let fx = Fixture::load(family).unwrap_or_else(|e| panic!("fixture {family}: {e}"));
    for prompt in ["short", "long"] {
        let row =
            gpu_vs_cpu(&dev, &fx, prompt).unwrap_or_else(|e| panic!("{family} {prompt}: {e}"));
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
