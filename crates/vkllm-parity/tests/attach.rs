//! Kernels on a device lent by a host (`Device::from_raw`) with the features the host enabled
//! (`HostFeatures`): the int8 and cooperative-matrix parity cases pass on it and it takes the
//! same fast paths as vkllm's own device; a host that enabled nothing gets the portable kernels.

// The device setup of vkllm-vk's GPU tests (one validated device per binary).
#[path = "../../vkllm-vk/tests/common/mod.rs"]
mod common;

use vkllm_vk::{Device, DeviceOptions, HostFeatures, PipelineCacheMode};

/// A device on `host`'s handles with `features` as what the host enabled.
fn attach(host: &Device, features: &HostFeatures) -> Device {
    let family = host.info().compute_queue_family.expect("compute queue");
    // SAFETY: the handles belong to `host`, which outlives the attached device (the test drops
    // it first); `host` enabled at least `features`; one device submits at a time.
    unsafe {
        let inst = vkllm_vk::Instance::from_raw(
            host.instance().entry().clone(),
            host.instance().raw().clone(),
            host.instance().api_version(),
        );
        let queue = host.raw().get_device_queue(family, 0);
        Device::from_raw(
            inst,
            host.physical_device(),
            host.raw().clone(),
            queue,
            family,
            features,
            &DeviceOptions {
                pipeline_cache: PipelineCacheMode::Off,
                ..Default::default()
            },
        )
        .expect("attach")
    }
}

#[test]
fn attached_device_runs_the_fast_kernels() {
    let host = common::device();
    let seed = common::seed();
    let attached = attach(&host, host.enabled_features());
    assert_eq!(attached.int8_dot(), host.int8_dot());
    assert_eq!(attached.coopmat(), host.coopmat());
    assert!(
        attached.missing_features().is_empty(),
        "{:?}",
        attached.missing_features()
    );
    for name in ["matvec_q8a", "matmul_coop"] {
        let case = vkllm_parity::CASES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
            .expect("case");
        let rows = case(&attached, seed).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!rows.is_empty(), "{name}");
        for r in &rows {
            eprintln!("{r}");
            assert!(
                !r.failed(),
                "{name} on the attached device (seed {seed}): {r}"
            );
        }
    }
    drop(attached);
    // The host device still runs after the attached one is gone.
    let x = host.buffer_from("x", &[1.0f32; 4]).expect("buffer");
    assert_eq!(host.read_vec::<f32>(&x, 4).expect("read"), [1.0; 4]);
    host.check_validation().expect("validation");
}

#[test]
fn a_bare_host_gets_the_portable_kernels() {
    let host = common::device();
    let attached = attach(&host, &HostFeatures::default());
    assert!(!attached.int8_dot() && !attached.coopmat());
    let missing = attached.missing_features().to_vec();
    assert_eq!(
        missing.iter().any(|m| m == "shaderIntegerDotProduct"),
        host.int8_dot(),
        "{missing:?}"
    );
    // The portable matvec runs and matches.
    let seed = common::seed();
    let case = vkllm_parity::CASES
        .iter()
        .find(|(n, _)| *n == "matvec")
        .map(|(_, f)| *f)
        .expect("case");
    for r in case(&attached, seed).expect("matvec") {
        assert!(!r.failed(), "{r}");
    }
    drop(attached);
    host.check_validation().expect("validation");
}
