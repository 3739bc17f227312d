//! Recurrent marks on the CPU: several per slot at their own positions, the least recently used
//! replaced; restoring one (into its slot or another) continues with logits bit-identical to a
//! fresh state fed the same pieces, drops the slot's marks past it, and a position without a
//! mark is a typed error.

use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::{HybridModel, HybridState};
use vkllm_models::{CpuBackend, Logits};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Feeds `pieces` (consecutive ranges of `seq`) into `slot` of `st`; the last piece's logits.
fn feed(
    b: &mut CpuBackend,
    m: &HybridModel,
    st: &HybridState,
    slot: usize,
    seq: &[u32],
    pieces: &[(usize, usize)],
) -> Vec<f32> {
    let mut last = Vec::new();
    for &(a, z) in pieces {
        last = m
            .forward_slot(b, st, slot, &seq[a..z], a, Logits::Last)
            .expect("forward");
    }
    last
}

#[test]
fn marks_are_kept_per_position_and_restore_exactly() {
    let fx = Fixture::load("qwen3_5").expect("fixture");
    let mut b = CpuBackend::new();
    let m = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, 16).expect("model");
    let vocab = fx.config.vocab_size as u32;
    let seq: Vec<u32> = (0..40).map(|i| (7 + 31 * i) % vocab).collect();
    let st = m.new_state_slots(&mut b, 48, 2).expect("state");
    let mut marks = m.new_marks_per_slot(&mut b, &st, 2).expect("marks");
    assert_eq!(marks.per_slot(), 2);

    for (a, z) in [(0, 10), (10, 20), (20, 30)] {
        feed(&mut b, &m, &st, 0, &seq, &[(a, z)]);
        m.mark_slot(&mut b, &st, 0, &mut marks).expect("mark");
    }
    // Two marks per slot: the oldest (10) was replaced.
    assert!(!marks.has(0, 10) && marks.has(0, 20) && marks.has(0, 30));
    assert_eq!(marks.pos(0), Some(30));
    assert_eq!(marks.best(0, 29), Some(20));
    assert_eq!(marks.best(0, 19), None);
    assert_eq!(marks.pos(1), None, "slot 1 has none");
    assert!(m.restore_mark(&mut b, &st, 0, 10, &mut marks).is_err());

    // What a fresh state computes from the same pieces.
    let fresh = m.new_state(&mut b, 48).expect("state");
    let want = feed(&mut b, &m, &fresh, 0, &seq, &[(0, 10), (10, 20), (20, 25)]);

    // Slot 1 from slot 0's mark at 20 (slot 0 keeps its state and marks).
    m.restore_mark_from(&mut b, &st, 0, 20, 1, &mut marks)
        .expect("restore into slot 1");
    assert_eq!(st.next[1].get(), 20);
    assert_eq!(st.next[0].get(), 30);
    assert!(marks.has(1, 20) && marks.has(0, 30));
    let got1 = feed(&mut b, &m, &st, 1, &seq, &[(20, 25)]);
    assert_eq!(bits(&got1), bits(&want), "slot 1 from slot 0's mark");

    // Slot 0 back to 20: its mark at 30 goes (the rows after 20 are rewritten).
    m.restore_mark(&mut b, &st, 0, 20, &mut marks)
        .expect("restore");
    assert_eq!(st.next[0].get(), 20);
    assert!(marks.has(0, 20) && !marks.has(0, 30));
    let got0 = feed(&mut b, &m, &st, 0, &seq, &[(20, 25)]);
    assert_eq!(bits(&got0), bits(&want), "slot 0 from its own mark");

    // Marking 25 and then 33: 20 was restored before 25 was taken, so it is the least recently
    // used and goes.
    m.mark_slot(&mut b, &st, 0, &mut marks).expect("mark 25");
    feed(&mut b, &m, &st, 0, &seq, &[(25, 33)]);
    m.mark_slot(&mut b, &st, 0, &mut marks).expect("mark 33");
    assert!(!marks.has(0, 20) && marks.has(0, 25) && marks.has(0, 33));
    marks.forget_after(0, 30);
    assert!(marks.has(0, 25) && !marks.has(0, 33));
    marks.forget(0);
    assert_eq!(marks.pos(0), None);
}
