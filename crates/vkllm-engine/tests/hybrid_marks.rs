//! The reference generator on the CPU keeps a hybrid slot's recurrent state at the end of each
//! prompt: a prompt that repeats the last one and goes on differently from its answer restarts
//! from that mark (only the new tokens are computed) and gives a fresh generator's tokens; a
//! prompt sharing less starts from scratch.

use vkllm_engine::{Generator, SimpleGenerator, SlotParams};
use vkllm_models::CpuBackend;
use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::HybridModel;

fn generator(family: &str) -> SimpleGenerator<CpuBackend> {
    let fx = Fixture::load(family).expect("fixture");
    let mut b = CpuBackend::new();
    let m = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, 16).expect("model");
    SimpleGenerator::new(b, m, 1, 96).expect("generator")
}

/// `n` greedy tokens of `prompt` on `g` (one slot), and the prompt tokens it reused.
fn generate(g: &mut SimpleGenerator<CpuBackend>, prompt: &[u32], n: usize) -> (Vec<u32>, usize) {
    let p = SlotParams::default();
    let (slot, first) = g.start(prompt, &p).expect("start");
    let reused = g.reused(slot);
    let mut toks = vec![first.id];
    while toks.len() < n {
        for (_, out) in g.step().expect("step") {
            toks.extend(out.iter().map(|t| t.id));
        }
    }
    g.release(slot);
    toks.truncate(n);
    (toks, reused)
}

#[test]
fn prompts_restart_from_the_last_prompts_mark() {
    for family in ["qwen3_5", "qwen3_5_moe"] {
        let fx = Fixture::load(family).expect("fixture");
        let prompt = fx.prompt("short").expect("prompt").ids;
        let vocab = fx.config.vocab_size as u32;
        let mut g = generator(family);
        let (first, _) = generate(&mut g, &prompt, 5);
        let mut resent = prompt.clone();
        resent.extend([(first[0] + 1) % vocab, 5, 7]);
        let (got, reused) = generate(&mut g, &resent, 5);
        assert_eq!(reused, prompt.len(), "{family}: the mark was restored");
        assert_eq!(
            got,
            generate(&mut generator(family), &resent, 5).0,
            "{family}: restored"
        );
        let short = &prompt[..prompt.len() - 2];
        let (got, reused) = generate(&mut g, short, 4);
        assert_eq!(reused, 0, "{family}: less than the mark");
        assert_eq!(
            got,
            generate(&mut generator(family), short, 4).0,
            "{family}: from scratch"
        );
    }
}

/// Prompts behind one shared prefix (a system prompt): the second is marked where it leaves the
/// prefix the first one holds, so the third starts there, and so does the second one resent
/// (its end mark went when the third rewrote the rows after the prefix); every answer is a
/// fresh generator's.
#[test]
fn prompts_start_where_they_leave_a_shared_prefix() {
    let family = "qwen3_5";
    let fx = Fixture::load(family).expect("fixture");
    let vocab = fx.config.vocab_size as u32;
    let system: Vec<u32> = (0..24).map(|i| (11 + 13 * i) % vocab).collect();
    let turn = |seed: u32| -> Vec<u32> {
        let mut p = system.clone();
        p.extend((0..6).map(|i| (seed + 5 * i) % vocab));
        p
    };
    let mut g = generator(family);
    let mut reused = Vec::new();
    for p in [turn(1), turn(2), turn(3), turn(2)] {
        let (got, r) = generate(&mut g, &p, 4);
        reused.push(r);
        assert_eq!(got, generate(&mut generator(family), &p, 4).0, "{p:?}");
    }
    assert_eq!(reused, [0, 0, system.len(), system.len()]);
}
