//! Queue sharing with a host through timeline semaphores: every submission signals vkllm's
//! timeline, and waits on the GPU for a host timeline value when one is set.

use std::time::Duration;

use ash::vk;
use vkllm_vk::kernels::elementwise::Add;
use vkllm_vk::{Device, DeviceOptions, HostFeatures, MemoryKind, PipelineCacheMode, Recorder};

use super::common;

/// vkllm attached to `host`'s handles with the given host features.
fn attach(host: &Device, features: &HostFeatures) -> Device {
    let family = host.info().compute_queue_family.unwrap();
    // SAFETY: the handles belong to `host`, which outlives the attached device; the test holds
    // the shared device's lock, so only it submits to the queue.
    unsafe {
        let inst = vkllm_vk::Instance::from_raw(
            host.instance().entry().clone(),
            host.instance().raw().clone(),
            vk::API_VERSION_1_2,
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
        .unwrap()
    }
}

fn counter(dev: &Device, sem: vk::Semaphore) -> u64 {
    // SAFETY: a timeline semaphore of this device.
    unsafe { dev.raw().get_semaphore_counter_value(sem) }.unwrap()
}

#[test]
fn submissions_signal_the_timeline_and_wait_for_the_host() {
    let host = common::device();
    assert!(
        host.info().timeline_semaphore,
        "the test devices (lavapipe, the H200) offer timeline semaphores"
    );
    assert!(host.enabled_features().timeline_semaphore);
    // A host that did not enable them: no timeline, and the feature is listed as missing.
    let plain = attach(&host, &HostFeatures::default());
    assert!(plain.timeline().is_none());
    assert!(
        plain
            .missing_features()
            .iter()
            .any(|m| m == "timelineSemaphore")
    );
    // SAFETY: (not used: the call fails before keeping anything)
    assert!(unsafe { plain.wait_host_timeline(Some((vk::Semaphore::null(), 1))) }.is_err());
    drop(plain);

    let dev = attach(
        &host,
        &HostFeatures {
            timeline_semaphore: true,
            ..Default::default()
        },
    );
    let (tl, v0) = dev.timeline().unwrap();
    assert_eq!(v0, 0);
    let n = 1000;
    let a = dev.buffer_from("a", &vec![1.5f32; n]).unwrap();
    let b = dev.buffer_from("b", &vec![2.0f32; n]).unwrap();
    let c = dev
        .create_buffer("c", 4 * n as u64, MemoryKind::Device)
        .unwrap();
    // Staged uploads are submissions too (mapped ones are not): the counter follows them.
    // (Uploads wait on their fence; lavapipe may set it before the semaphore, so the timeline
    // is waited for rather than read.)
    let uploads = dev.timeline().unwrap().1;
    let up_sems = [tl];
    let up_vals = [uploads];
    let up_wait = vk::SemaphoreWaitInfo::default()
        .semaphores(&up_sems)
        .values(&up_vals);
    // SAFETY: valid semaphore of this device.
    unsafe { host.raw().wait_semaphores(&up_wait, 5_000_000_000) }.unwrap();
    assert!(counter(&dev, tl) >= uploads);

    // The host's frame semaphore at 0; vkllm's work must wait for 1.
    let mut ty = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let ci = vk::SemaphoreCreateInfo::default().push_next(&mut ty);
    // SAFETY: valid device with timeline semaphores enabled.
    let frame = unsafe { host.raw().create_semaphore(&ci, None) }.unwrap();
    // SAFETY: `frame` is a timeline semaphore of the device, destroyed after the last wait.
    unsafe { dev.wait_host_timeline(Some((frame, 1))) }.unwrap();
    let mut r = Recorder::new(&dev).unwrap();
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
    let rec = r.finish().unwrap();
    rec.submit_nowait().unwrap();
    let (_, v) = dev.timeline().unwrap();
    assert_eq!(v, uploads + 1);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        counter(&dev, tl) < v,
        "the kernel ran before the host signalled its frame"
    );
    // The host signals; the work runs and vkllm's timeline reaches its value.
    let signal = vk::SemaphoreSignalInfo::default().semaphore(frame).value(1);
    // SAFETY: valid semaphore, value above its current one.
    unsafe { host.raw().signal_semaphore(&signal) }.unwrap();
    rec.wait().unwrap();
    // (The fence and the semaphore are separate signal operations: lavapipe may set the fence
    // first, so the timeline is waited for rather than read.)
    let sems = [tl];
    let vals = [v];
    let wait = vk::SemaphoreWaitInfo::default()
        .semaphores(&sems)
        .values(&vals);
    // SAFETY: valid semaphore of this device.
    unsafe { host.raw().wait_semaphores(&wait, 5_000_000_000) }.unwrap();
    assert_eq!(counter(&dev, tl), v);
    // SAFETY: clears the wait.
    unsafe { dev.wait_host_timeline(None) }.unwrap();
    let got: Vec<f32> = dev.read_vec(&c, n).unwrap();
    assert!(got.iter().all(|&x| x == 3.5));
    // The host orders its own work after vkllm's by waiting on the timeline (here on the CPU).
    let (_, last) = dev.timeline().unwrap();
    assert!(last >= v);
    let vals = [last];
    let wait = vk::SemaphoreWaitInfo::default()
        .semaphores(&sems)
        .values(&vals);
    // SAFETY: valid semaphore of this device.
    unsafe { host.raw().wait_semaphores(&wait, 5_000_000_000) }.unwrap();
    drop((a, b, c, rec, dev));
    // SAFETY: nothing waits on it any more.
    unsafe { host.raw().destroy_semaphore(frame, None) };
    host.check_validation().unwrap();
}
