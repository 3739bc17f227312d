//! Attaching to a host's device (`Device::from_raw`): kernels run on the host's handles, a host
//! that enabled nothing gets the portable kernels and the list of what is missing, and the
//! host's device outlives the attached one.

use vkllm_vk::kernels::elementwise::Add;
use vkllm_vk::{DeviceOptions, MemoryKind, PipelineCacheMode, Recorder};

use super::common;

/// `Device::from_raw` runs kernels on a host application's instance/device/queue (here: the
/// handles of another `Device`, standing in for the host) and destroys none of them.
#[test]
fn attaches_to_a_host_device() {
    let host = common::device();
    let family = host.info().compute_queue_family.unwrap();
    // SAFETY: the handles belong to `host`, which outlives `attached`; the test uses the queue
    // from one Device at a time.
    let attached = unsafe {
        let inst = vkllm_vk::Instance::from_raw(
            host.instance().entry().clone(),
            host.instance().raw().clone(),
            ash::vk::API_VERSION_1_1,
        );
        let queue = host.raw().get_device_queue(family, 0);
        vkllm_vk::Device::from_raw(
            inst,
            host.physical_device(),
            host.raw().clone(),
            queue,
            family,
            &vkllm_vk::HostFeatures::default(),
            &DeviceOptions {
                pipeline_cache: PipelineCacheMode::Off,
                ..Default::default()
            },
        )
        .unwrap()
    };
    // A host that enabled nothing beyond Vulkan 1.1: the portable kernels, and the list of
    // what the fast ones would need names every feature the host device itself runs with.
    assert!(!attached.coopmat() && !attached.int8_dot());
    let missing = attached.missing_features();
    assert_eq!(
        missing.iter().any(|m| m == "shaderIntegerDotProduct"),
        host.int8_dot(),
        "{missing:?}"
    );
    assert_eq!(
        missing.iter().any(|m| m == "VK_KHR_cooperative_matrix"),
        host.info().supports_coopmat_f16(),
        "{missing:?}"
    );
    let n = 300;
    let a = attached.buffer_from("a", &vec![2.5f32; n]).unwrap();
    let b = attached.buffer_from("b", &vec![0.5f32; n]).unwrap();
    let c = attached
        .create_buffer("c", 4 * n as u64, MemoryKind::Device)
        .unwrap();
    let mut r = Recorder::new(&attached).unwrap();
    r.dispatch(
        Add {
            a: a.all(),
            b: b.all(),
            out: c.all(),
        }
        .dispatch(n)
        .unwrap(),
    )
    .unwrap();
    r.finish().unwrap().submit().unwrap();
    let got: Vec<f32> = attached.read_vec(&c, n).unwrap();
    assert!(got.iter().all(|&v| v == 3.0));
    drop((a, b, c, attached));
    // The host device still works after the attached one is gone.
    let x = host.buffer_from("x", &[1.0f32; 4]).unwrap();
    let back: Vec<f32> = host.read_vec(&x, 4).unwrap();
    assert_eq!(back, [1.0; 4]);
    host.check_validation().unwrap();
}
