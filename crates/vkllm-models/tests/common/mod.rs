//! The validated Vulkan device shared by this crate's GPU test binaries.

use std::sync::{Mutex, MutexGuard, OnceLock};

use vkllm_vk::{Device, DeviceOptions, PipelineCacheMode, Validation};

static DEVICE: OnceLock<Mutex<Device>> = OnceLock::new();

/// One validated device per test binary, one test at a time (`VKLLM_TEST_NO_VALIDATION=1`
/// turns the layer off). Without a Vulkan device the test fails with the reason.
pub fn device() -> MutexGuard<'static, Device> {
    let m = DEVICE.get_or_init(|| {
        let opts = DeviceOptions {
            choice: vkllm_vk::DeviceChoice::from_env(),
            validation: match std::env::var("VKLLM_TEST_NO_VALIDATION") {
                Ok(v) if v == "1" => Validation::Off,
                _ => Validation::On,
            },
            pipeline_cache: PipelineCacheMode::Off,
            // The model tiers compare f32 forwards at tight tolerances: prefill stays on the
            // portable f32 matmuls (cooperative matrices round activations to f16; their kernel
            // has its own parity case in vkllm-vk).
            cooperative_matrix: false,
            ..Default::default()
        };
        let dev = Device::new(&opts)
            .unwrap_or_else(|e| panic!("GPU tests need a Vulkan device (lavapipe in CI): {e}"));
        eprintln!("device: {}", dev.info().summary());
        Mutex::new(dev)
    });
    m.lock().unwrap_or_else(|e| e.into_inner())
}
