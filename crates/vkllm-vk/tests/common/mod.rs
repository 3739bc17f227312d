//! Shared test setup: one device per test binary, with the validation layer (synchronization
//! validation included), handed to one test at a time (lavapipe runs each dispatch on all
//! cores; parallel tests only fight over them, and validation messages stay attributable).
//!
//! A machine without a Vulkan device fails these tests with the error saying why; they never
//! skip. `VKLLM_TEST_NO_VALIDATION=1` runs without the layer (for machines that lack it; the
//! default and CI always validate).

#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard, OnceLock};

use vkllm_vk::{Device, DeviceOptions, PipelineCacheMode, Validation};

pub fn options() -> DeviceOptions {
    DeviceOptions {
        choice: vkllm_vk::DeviceChoice::from_env(),
        validation: match std::env::var("VKLLM_TEST_NO_VALIDATION") {
            Ok(v) if v == "1" => Validation::Off,
            _ => Validation::On,
        },
        pipeline_cache: PipelineCacheMode::Off,
        tuning: vkllm_vk::tuning_from_env().unwrap_or_else(|e| panic!("VKLLM_TUNE: {e}")),
        ..Default::default()
    }
}

pub fn open(opts: &DeviceOptions) -> Device {
    match Device::new(opts) {
        Ok(d) => {
            eprintln!("device: {}", d.info().summary());
            d
        }
        Err(e) => panic!("GPU tests need a Vulkan device (lavapipe in CI): {e}"),
    }
}

static DEVICE: OnceLock<Mutex<Device>> = OnceLock::new();

/// The binary's shared device, locked for the calling test. Messages left by an earlier
/// (failed) test are discarded first.
pub fn device() -> MutexGuard<'static, Device> {
    let m = DEVICE.get_or_init(|| Mutex::new(open(&options())));
    let g = m.lock().unwrap_or_else(|e| e.into_inner());
    let _ = g.take_validation_messages();
    g
}

pub fn seed() -> u64 {
    let s = vkllm_vk::seed_from_env();
    eprintln!("seed: {s} (rerun with VKLLM_SEED={s})");
    s
}

/// `n` values uniform in `[-scale, scale)` from a 64-bit LCG advanced in `s`.
pub fn rand(s: &mut u64, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}
