//! `Logits::All` over prompts longer than the logits buffer ([`LOGITS_ROWS`] rows): a model
//! loaded with a 512-token chunk runs them in pieces of `LOGITS_ROWS` and returns every row,
//! the same logits (to f32 rounding of a different chunking) as a model with 64-token chunks;
//! the last row matches `Logits::Last`. Dense and hybrid, on the CPU backend.

use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::{CpuBackend, LOGITS_ROWS, Logits, Model};

fn ids(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 13) % vocab) as u32).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn dense_all_logits_longer_than_the_buffer() {
    let fx = Fixture::load("qwen3").expect("fixture");
    let vocab = fx.config.vocab_size;
    let n = LOGITS_ROWS * 2 + 37;
    let p = ids(n, vocab);
    let mut b = CpuBackend::new();
    let big = Model::load(fx.config.clone(), &fx.weights, &mut b, 512).unwrap();
    let small = Model::load(fx.config.clone(), &fx.weights, &mut b, 64).unwrap();
    assert_eq!(big.logits_rows(), LOGITS_ROWS);
    let kv_big = big.new_kv(&mut b, n).unwrap();
    let kv_small = small.new_kv(&mut b, n).unwrap();
    let all = big.forward(&mut b, &kv_big, &p, 0, Logits::All).unwrap();
    let want = small
        .forward(&mut b, &kv_small, &p, 0, Logits::All)
        .unwrap();
    assert_eq!(all.len(), n * vocab);
    let d = max_diff(&all, &want);
    assert!(d < 1e-4, "chunk 512 vs 64: max |diff| {d}");
    let kv_last = big.new_kv(&mut b, n).unwrap();
    let last = big.forward(&mut b, &kv_last, &p, 0, Logits::Last).unwrap();
    let d = max_diff(&last, &all[(n - 1) * vocab..]);
    assert!(d < 1e-4, "last row vs Logits::Last: {d}");
}

#[test]
fn hybrid_all_logits_longer_than_the_buffer() {
    let fx = Fixture::load("qwen3_5").expect("fixture");
    let vocab = fx.config.vocab_size;
    let n = LOGITS_ROWS + 45;
    let p = ids(n, vocab);
    let mut b = CpuBackend::new();
    let big = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, 512).unwrap();
    let small = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, 64).unwrap();
    let st_big = big.new_state(&mut b, n).unwrap();
    let st_small = small.new_state(&mut b, n).unwrap();
    let all = big.forward(&mut b, &st_big, &p, 0, Logits::All).unwrap();
    let want = small
        .forward(&mut b, &st_small, &p, 0, Logits::All)
        .unwrap();
    assert_eq!(all.len(), n * vocab);
    let d = max_diff(&all, &want);
    assert!(d < 1e-4, "chunk 512 vs 64: max |diff| {d}");
}
