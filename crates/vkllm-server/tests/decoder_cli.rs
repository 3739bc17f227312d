//! `vkllm run --decoder`: the recorded slot decoder (what `auto` picks on GPUs) and the
//! per-token path (what it picks on CPU Vulkan devices such as lavapipe) answer a dense
//! `vkllm synth --shape tiny-llama` GGUF with the same text, greedy and sampled with a seed, and
//! so does the slot decoder with KV memory on demand (`--kv-sharing on-demand`, a long `--ctx`);
//! the slot decoder on the CPU backend is a clear error.

use std::path::PathBuf;
use std::process::{Command, Output};

fn vkllm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vkllm"))
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn synth() -> PathBuf {
    let path = std::env::temp_dir().join(format!("vkllm-tl-{}.gguf", std::process::id()));
    ok(vkllm()
        .args(["synth", "--shape", "tiny-llama", "--seed", "3", "-o"])
        .arg(&path)
        .output()
        .expect("running vkllm synth"));
    path
}

fn run(model: &PathBuf, decoder: &str, sampling: &[&str]) -> String {
    run_with(model, decoder, sampling, &[])
}

fn run_with(model: &PathBuf, decoder: &str, sampling: &[&str], extra: &[&str]) -> String {
    ok(vkllm()
        .args(["run", "--raw", "--max-tokens", "12", "--decoder", decoder])
        .args(sampling)
        .args(extra)
        .arg("--model")
        .arg(model)
        .arg("one two three four")
        .output()
        .expect("running vkllm run"))
}

#[test]
fn slot_decoder_and_per_token_agree() {
    let model = synth();
    for sampling in [
        &["--temperature", "0"][..],
        &[
            "--temperature",
            "0.9",
            "--seed",
            "7",
            "--repeat-penalty",
            "1.1",
        ][..],
    ] {
        let slots = run(&model, "slots", sampling);
        let per_token = run(&model, "per-token", sampling);
        assert!(!slots.trim().is_empty(), "no text for {sampling:?}");
        assert_eq!(slots, per_token, "{sampling:?}");
        let on_demand = ["--kv-sharing", "on-demand", "--ctx", "4096"];
        let paged = run_with(&model, "slots", sampling, &on_demand);
        assert_eq!(paged, per_token, "{sampling:?} on demand");
    }
    let out = vkllm()
        .args(["run", "--device", "cpu", "--decoder", "slots", "--model"])
        .arg(&model)
        .arg("hi")
        .output()
        .expect("running vkllm run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--decoder slots needs a Vulkan device"),
        "{err}"
    );
    std::fs::remove_file(&model).ok();
}
