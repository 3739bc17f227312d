//! A sliced forward's pieces captured once and replayed (`Model::capture_sliced`, what a
//! frame-budget decoder runs): each decode step, replayed in slices of any size, gives the
//! per-dispatch reference path's logits bit for bit on every family; a capture made before later
//! work replaced its scratch is refused (`ModelError::CaptureStale`) and a new capture runs.
//! Needs a Vulkan device (lavapipe in CI), under the validation layer.

mod common;

use common::device;
use vkllm_models::fixtures::Fixture;
use vkllm_models::{Backend, DEFAULT_CHUNK, Logits, Model, ModelError, VulkanBackend, parity};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The logits of a replayed step: slices of `slice` layers, then the head.
fn replayed<B: Backend>(
    b: &mut B,
    m: &Model,
    c: &vkllm_models::SlicedCaptures,
    kv: &vkllm_models::KvCache,
    id: u32,
    pos: usize,
    slice: usize,
) -> Result<Vec<f32>, ModelError> {
    m.sliced_inputs(b, kv, id, pos)?;
    let n = m.cfg.layers.len();
    let mut l = 0;
    while l < n {
        let k = slice.min(n - l);
        m.replay_sliced(b, c, l == 0, l..l + k, false, false)?;
        l += k;
    }
    m.replay_sliced(b, c, false, n..n, true, true)?;
    let mut out = vec![0f32; m.cfg.vocab_size];
    b.read_f32(m.logits_tensor(), 0, &mut out)?;
    Ok(out)
}

#[test]
fn replayed_slices_match_the_reference_path() {
    let dev = device();
    for family in vkllm_models::Family::ALL {
        let fx = Fixture::load(family.name()).expect("fixture");
        let golden = fx.prompt("long").expect("prompt");
        let mut b = VulkanBackend::new(dev.clone());
        let m = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
        let n_gen = golden.greedy.len();
        let kv = m.new_kv(&mut b, golden.ids.len() + n_gen).expect("kv");
        let logits = m
            .forward(&mut b, &kv, &golden.ids, 0, Logits::Last)
            .expect("prefill");
        let c = m
            .capture_sliced(&mut b, &kv)
            .expect("capture")
            .expect("captures");
        let mut tokens = vec![parity::argmax(&logits)];
        while tokens.len() < n_gen {
            let pos = golden.ids.len() + tokens.len() - 1;
            let last = *tokens.last().expect("a token");
            // Slices of 1, 2 and every layer in turn.
            let slice = [1, 2, usize::MAX][tokens.len() % 3];
            let r = replayed(&mut b, &m, &c, &kv, last, pos, slice).expect("replay");
            // The per-dispatch reference path on the same state (it rewrites the same KV row
            // with the same values).
            let f = m
                .forward(&mut b, &kv, &[last], pos, Logits::Last)
                .expect("reference step");
            assert!(
                bits(&r) == bits(&f),
                "{}: replayed step at {pos} (slices of {slice}) differs from the reference path",
                family.name()
            );
            tokens.push(parity::argmax(&r));
        }
        assert_eq!(tokens, golden.greedy, "{}: replayed slices", family.name());
        m.release_sliced(&mut b, c);
    }
}

#[test]
fn a_capture_over_replaced_scratch_is_refused() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let mut b = VulkanBackend::new(dev.clone());
    let m = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let ids = fx.prompt("short").expect("prompt").ids;
    let kv = m.new_kv(&mut b, 64).expect("kv");
    m.forward(&mut b, &kv, &ids, 0, Logits::Last)
        .expect("prefill");
    let c = m
        .capture_sliced(&mut b, &kv)
        .expect("capture")
        .expect("captures");
    let pos = ids.len();
    let before = replayed(&mut b, &m, &c, &kv, 3, pos, 2).expect("replay");
    // A forward at positions past the captured cache's RoPE table replaces the table.
    let long = m.new_kv(&mut b, 2048).expect("long kv");
    m.forward(&mut b, &long, &[5], 1500, Logits::Last)
        .expect("a forward far out");
    let stale = replayed(&mut b, &m, &c, &kv, 3, pos, 2);
    assert!(
        matches!(stale, Err(ModelError::CaptureStale { .. })),
        "{stale:?}"
    );
    m.release_sliced(&mut b, c);
    let c = m
        .capture_sliced(&mut b, &kv)
        .expect("capture")
        .expect("captures");
    let again = replayed(&mut b, &m, &c, &kv, 3, pos, 2).expect("replay");
    assert!(
        bits(&again) == bits(&before),
        "a new capture's step differs"
    );
}
