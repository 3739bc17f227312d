//! State snapshot and restore (KV rows + recurrent states) at a token boundary: generate,
//! snapshot at token t, run on (the state moves past t), restore (into the same state and into
//! another one), continue: the logits of every following step are bit-identical to the
//! uninterrupted run. On the CPU and, when a Vulkan device is present, on the GPU.

use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::{HybridModel, HybridState};
use vkllm_models::parity::argmax;
use vkllm_models::{Backend, CpuBackend, Logits, ModelError, VulkanBackend};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Greedy steps from the state's position: each step's logits.
fn decode<B: Backend>(
    b: &mut B,
    m: &HybridModel,
    st: &HybridState,
    first: u32,
    steps: usize,
) -> Vec<Vec<f32>> {
    let mut tok = first;
    let mut out = Vec::new();
    for _ in 0..steps {
        let pos = st.next[0].get();
        let l = m.forward(b, st, &[tok], pos, Logits::Last).expect("step");
        tok = argmax(&l);
        out.push(l);
    }
    out
}

fn check<B: Backend>(b: &mut B, family: &str) {
    let fx = Fixture::load(family).expect("fixture");
    let ids = fx.prompt("long").expect("prompt").ids;
    let m = HybridModel::load(fx.config.clone(), &fx.weights, b, 128).expect("load");
    let cap = ids.len() + 40;
    let (t, after) = (7usize, 12usize);

    // Uninterrupted: prompt (3 prefill chunks), then t + after greedy steps.
    let st = m.new_state(b, cap).expect("state");
    let first = argmax(&m.forward(b, &st, &ids, 0, Logits::Last).expect("prefill"));
    let straight = decode(b, &m, &st, first, t + after);

    // Same again, snapshot after t steps (device side and host side).
    let st = m.new_state(b, cap).expect("state");
    m.forward(b, &st, &ids, 0, Logits::Last).expect("prefill");
    let head = decode(b, &m, &st, first, t);
    assert_eq!(bits(&head.concat()), bits(&straight[..t].concat()));
    let next = argmax(head.last().expect("steps"));
    let snap = m.snapshot(b, &st).expect("snapshot");
    assert_eq!(snap.pos, ids.len() + t);
    let host = m.snapshot_to_host(b, &snap).expect("to host");

    // The state moves on with other tokens...
    decode(b, &m, &st, 5, 9);
    assert_ne!(st.next[0].get(), snap.pos);
    // ...is restored, and continues exactly as the uninterrupted run.
    m.restore(b, &snap, &st).expect("restore");
    let resumed = decode(b, &m, &st, next, after);
    assert!(
        bits(&resumed.concat()) == bits(&straight[t..].concat()),
        "{family}: restored run differs"
    );

    // Into another state (another slot), from the host copy.
    let other = m.new_state(b, cap).expect("other state");
    m.forward(b, &other, &ids[..11], 0, Logits::Last)
        .expect("unrelated history");
    let up = m.snapshot_from_host(b, &host).expect("from host");
    m.restore(b, &up, &other)
        .expect("restore into another state");
    let moved = decode(b, &m, &other, next, after);
    assert!(
        bits(&moved.concat()) == bits(&straight[t..].concat()),
        "{family}: run in another slot differs"
    );

    // A state too small for the snapshot is a typed error.
    let small = m.new_state(b, snap.pos - 1).expect("small state");
    assert!(matches!(
        m.restore(b, &snap, &small),
        Err(ModelError::ContextFull { .. })
    ));
}

#[test]
fn cpu_snapshot_restore_is_bit_exact() {
    for family in ["qwen3_5", "qwen3_5_moe", "qwen3_next", "qwen3_moe"] {
        check(&mut CpuBackend::new(), family);
    }
}

#[test]
fn gpu_snapshot_restore_is_bit_exact() {
    let dev = vkllm_vk::Device::new(&vkllm_vk::DeviceOptions {
        choice: vkllm_vk::DeviceChoice::from_env(),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("GPU tests need a Vulkan device (lavapipe in CI): {e}"));
    for family in ["qwen3_5", "qwen3_5_moe"] {
        check(&mut VulkanBackend::new(dev.clone()), family);
    }
}
