//! The validated Vulkan device shared by this crate's GPU test binaries.

#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard, OnceLock};

use vkllm_vk::{Device, DeviceOptions, PipelineCacheMode, Validation};

static DEVICE: OnceLock<Mutex<Device>> = OnceLock::new();

/// The options of this crate's test devices: validated (`VKLLM_TEST_NO_VALIDATION=1` turns the
/// layer off), `VKLLM_TUNE` applied, except that the model tiers compare f32 forwards at tight
/// tolerances, so prefill stays on the portable f32 matmuls (cooperative matrices round
/// activations to f16; their kernel has its own parity case in vkllm-vk).
pub fn options() -> DeviceOptions {
    DeviceOptions {
        choice: vkllm_vk::DeviceChoice::from_env(),
        validation: match std::env::var("VKLLM_TEST_NO_VALIDATION") {
            Ok(v) if v == "1" => Validation::Off,
            _ => Validation::On,
        },
        pipeline_cache: PipelineCacheMode::Off,
        tuning: vkllm_vk::Tuning {
            coopmat: false,
            ..vkllm_vk::tuning_from_env().unwrap_or_else(|e| panic!("VKLLM_TUNE: {e}"))
        },
        ..Default::default()
    }
}

/// A device with [`options`]; without a Vulkan device the test fails with the reason.
pub fn open(opts: &DeviceOptions) -> Device {
    let dev = Device::new(opts)
        .unwrap_or_else(|e| panic!("GPU tests need a Vulkan device (lavapipe in CI): {e}"));
    eprintln!("device: {}", dev.info().summary());
    dev
}

/// One validated device per test binary ([`options`]), one test at a time.
pub fn device() -> MutexGuard<'static, Device> {
    let m = DEVICE.get_or_init(|| Mutex::new(open(&options())));
    m.lock().unwrap_or_else(|e| e.into_inner())
}
