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

/// `n` pseudo-random values in `[-scale, scale)` from an LCG state.
pub fn rand(seed: &mut u64, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// A device with [`options`] on the int8 matvec (tuning `matvec=int8`, GPUs' default), `set`
/// applied to its tuning; fails where the device lacks integer dot products.
pub fn int8_device(set: impl FnOnce(&mut vkllm_vk::Tuning)) -> Device {
    let mut opts = options();
    opts.tuning.matvec = Some(vkllm_vk::kernels::matvec_fused::MatvecImpl::Int8);
    set(&mut opts.tuning);
    let dev = open(&opts);
    assert!(
        dev.int8_dot(),
        "this test needs integer dot products (lavapipe has them)"
    );
    dev
}

/// Two int8 runs of one op against the CPU's f32 reference `want`: each within the int8
/// kernels' error (activations quantized per 32 to 8 bits: NMSE <= 1e-3, max <= 3% of the
/// largest output), and each other to f32 rounding (NMSE <= 1e-10: the same int8 products in
/// another order). Returns their NMSE.
pub fn assert_int8_pair(label: &str, a: (&str, &[f32]), b: (&str, &[f32]), want: &[f32]) -> f64 {
    let scale = want.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
    assert!(scale > 1e-3, "{label}: the reference is not all zero");
    for (name, got) in [a, b] {
        let d = vkllm_cpu::compare::diff(got, want);
        assert!(
            d.non_finite == 0 && d.max_abs <= 0.03 * scale && d.nmse <= 1e-3,
            "{label} {name} vs the CPU: max abs {} (scale {scale}), nmse {}",
            d.max_abs,
            d.nmse
        );
    }
    let d = vkllm_cpu::compare::diff(a.1, b.1);
    assert!(
        d.non_finite == 0 && d.nmse <= 1e-10,
        "{label}: {} vs {} max abs {}, nmse {}",
        a.0,
        b.0,
        d.max_abs,
        d.nmse
    );
    d.nmse
}

/// `n` RMSNorm weights in `[0.7, 1.3)`.
pub fn norm_weight(seed: &mut u64, n: usize) -> Vec<f32> {
    rand(seed, n, 0.3).iter().map(|v| 1.0 + v).collect()
}
