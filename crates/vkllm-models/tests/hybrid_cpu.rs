//! The hybrid / MoE forward on the CPU beyond the parity rows: prefill chunk sizes that cut the
//! prompt (and the delta rule's 64-token chunks) at other places, a prefill fed one token at a
//! time (the recurrent form of the delta rule and the one-token conv update) and the order rule
//! of the recurrent state. Every variant is held to the transformers goldens at 1e-4.

use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::parity::CPU_VS_HF_MAX_ABS;
use vkllm_models::{CpuBackend, Family, Logits, ModelError};

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn prefill_chunkings_match_transformers() {
    for family in Family::HYBRID_MOE {
        let fx = Fixture::load(family.name()).expect("fixture");
        let golden = fx.prompt("long").expect("prompt");
        let vocab = fx.config.vocab_size;
        for chunk in [1usize, 37, 300] {
            let mut b = CpuBackend::new();
            let model =
                HybridModel::load(fx.config.clone(), &fx.weights, &mut b, chunk).expect("load");
            let st = model.new_state(&mut b, golden.ids.len()).expect("state");
            // Split the prompt once more by hand: 5 tokens, then the rest.
            let mut logits = model
                .forward(&mut b, &st, &golden.ids[..5], 0, Logits::All)
                .expect("head");
            logits.extend(
                model
                    .forward(&mut b, &st, &golden.ids[5..], 5, Logits::All)
                    .expect("rest"),
            );
            let d = max_abs(&logits, &golden.logits);
            eprintln!(
                "{} chunk {chunk}: max |cpu - transformers| {d:.3e}",
                family.name()
            );
            assert!(
                f64::from(d) <= CPU_VS_HF_MAX_ABS,
                "{} chunk {chunk}: {d}",
                family.name()
            );
            let last = &logits[logits.len() - vocab..];
            assert_eq!(vkllm_models::parity::argmax(last), golden.greedy[0]);
        }
    }
}

#[test]
fn state_must_be_fed_in_order() {
    let fx = Fixture::load("qwen3_5").expect("fixture");
    let mut b = CpuBackend::new();
    let model = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, 16).expect("load");
    let st = model.new_state(&mut b, 64).expect("state");
    model
        .forward(&mut b, &st, &[5, 6, 7], 0, Logits::Last)
        .expect("first");
    let again = model.forward(&mut b, &st, &[8], 0, Logits::Last);
    assert!(
        matches!(
            again,
            Err(ModelError::StateOrder {
                expected: 3,
                start: 0
            })
        ),
        "{again:?}"
    );
    let full = model.forward(&mut b, &st, &[9; 62], 3, Logits::Last);
    assert!(
        matches!(full, Err(ModelError::ContextFull { .. })),
        "{full:?}"
    );
    assert!(matches!(
        model.forward(&mut b, &st, &[], 3, Logits::Last),
        Err(ModelError::EmptyInput)
    ));
    let bad = model.forward(&mut b, &st, &[100_000], 3, Logits::Last);
    assert!(
        matches!(bad, Err(ModelError::TokenOutOfRange { .. })),
        "{bad:?}"
    );
}
