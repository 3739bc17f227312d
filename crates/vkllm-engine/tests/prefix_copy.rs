//! The reference generator on the CPU copies the longest cached prefix from another slot (a
//! running one too) into the slot a new request takes: the request reports those prompt tokens
//! as reused and gives the tokens of a generator that computes them. Dense families, one with
//! sliding-window layers.

use vkllm_engine::{Generator, SimpleGenerator, SlotParams};
use vkllm_models::fixtures::Fixture;
use vkllm_models::{CpuBackend, Model};

fn generator(family: &str, slots: usize) -> SimpleGenerator<CpuBackend> {
    let fx = Fixture::load(family).expect("fixture");
    let mut b = CpuBackend::new();
    let m = Model::load(fx.config.clone(), &fx.weights, &mut b, 16).expect("model");
    SimpleGenerator::new(b, m, slots, 96).expect("generator")
}

/// `n` greedy tokens of `prompt` started on `g` and the prompt tokens it reused; the slot is
/// released afterwards.
fn generate(g: &mut SimpleGenerator<CpuBackend>, prompt: &[u32], n: usize) -> (Vec<u32>, usize) {
    let (slot, first) = g.start(prompt, &SlotParams::default()).expect("start");
    let reused = g.reused(slot);
    let mut toks = vec![first.id];
    while toks.len() < n {
        for (s, out) in g.step().expect("step") {
            if s == slot {
                toks.extend(out.iter().map(|t| t.id));
            }
        }
    }
    g.release(slot);
    toks.truncate(n);
    (toks, reused)
}

#[test]
fn a_new_request_copies_a_running_requests_prefix() {
    for family in ["qwen3", "gemma3"] {
        let fx = Fixture::load(family).expect("fixture");
        let prompt = fx.prompt("short").expect("prompt").ids;
        let mut longer = prompt.clone();
        longer.extend([7, 9, 11]);
        let mut g = generator(family, 2);
        // Request A stays running in one slot while B starts in the other.
        let (a, _) = g.start(&prompt, &SlotParams::default()).expect("start A");
        g.step().expect("step");
        let (got, reused) = generate(&mut g, &longer, 5);
        assert_eq!(reused, prompt.len(), "{family}: B copied A's prompt rows");
        g.release(a);
        let (want, fresh) = generate(&mut generator(family, 2), &longer, 5);
        assert_eq!(fresh, 0);
        assert_eq!(got, want, "{family}: tokens");
    }
}
