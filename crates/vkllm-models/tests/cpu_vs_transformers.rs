//! Tier "cpu vs transformers": the CPU forward of every dense family against the goldens that
//! transformers made (fixtures/<family>/). Logits at every prompt position within 1e-4
//! (f32, `parity::CPU_VS_HF_MAX_ABS`), greedy continuation identical for all 32 tokens, on a
//! short (24-token) and a long (300-token, three prefill chunks) prompt.

use vkllm_models::fixtures::Fixture;
use vkllm_models::parity::{self, cpu_vs_transformers};

fn check(family: &str) {
    let fx = Fixture::load(family).unwrap_or_else(|e| panic!("fixture {family}: {e}"));
    for prompt in ["short", "long"] {
        let row =
            cpu_vs_transformers(&fx, prompt).unwrap_or_else(|e| panic!("{family} {prompt}: {e}"));
        eprint!("{}", parity::render_table(std::slice::from_ref(&row)));
        let (matched, total) = row.greedy.expect("model rows carry greedy counts");
        assert!(
            row.diff.within(parity::CPU_VS_HF_MAX_ABS, f64::INFINITY),
            "{family} {prompt}: max |logit diff| {:.3e} > {:.0e} (non-finite: {})",
            row.diff.max_abs,
            parity::CPU_VS_HF_MAX_ABS,
            row.diff.non_finite
        );
        assert_eq!(
            matched, total,
            "{family} {prompt}: greedy diverged at step {matched}"
        );
        assert!(row.pass);
    }
}

#[test]
fn llama() {
    check("llama");
}

#[test]
fn mistral() {
    check("mistral");
}

#[test]
fn qwen2() {
    check("qwen2");
}

#[test]
fn qwen3() {
    check("qwen3");
}

#[test]
fn gemma() {
    check("gemma");
}

#[test]
fn gemma2() {
    check("gemma2");
}

#[test]
fn gemma3() {
    check("gemma3");
}

#[test]
fn qwen3_5() {
    check("qwen3_5");
}

#[test]
fn qwen3_5_moe() {
    check("qwen3_5_moe");
}

#[test]
fn qwen3_next() {
    check("qwen3_next");
}

#[test]
fn qwen3_moe() {
    check("qwen3_moe");
}
