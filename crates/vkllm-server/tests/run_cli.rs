//! `vkllm run --raw --temperature 0` reproduces the transformers goldens of the real models
//! (fixtures/real/): the prompt is encoded as transformers' `tokenizer(text)` encodes it (BOS
//! where the model's config asks for one: Gemma), and the streamed stdout equals the decoded
//! golden tokens, on the CPU reference backend and on the Vulkan device (lavapipe in CI). Needs
//! scripts/fetch-models.sh to have run; a missing model fails the test with that message.

use std::process::Command;

use vkllm_tokenizer::Tokenizer;

fn fixtures() -> std::path::PathBuf {
    match std::env::var_os("VKLLM_FIXTURES") {
        Some(d) => d.into(),
        None => std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures")),
    }
}

fn check(device: &str, n_tokens: usize, extra: &[&str]) {
    check_model("smollm2", "smollm2-135m", 0, device, n_tokens, extra);
}

/// Golden case `case` of `fixtures/real/{golden}.json` through `vkllm run --raw --stats --model
/// {name}`: the prompt's token count (stderr) is the golden's, the text its first tokens'.
fn check_model(
    name: &str,
    golden: &str,
    case: usize,
    device: &str,
    n_tokens: usize,
    extra: &[&str],
) {
    let text =
        std::fs::read_to_string(fixtures().join(format!("real/{golden}.json"))).expect("golden");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("golden JSON");
    let case = &doc["cases"][case];
    let ids = case["ids"].as_array().expect("prompt ids").len();
    let prompt = case["prompt"].as_str().expect("prompt");
    let greedy: Vec<u32> = case["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let margins: Vec<f64> = case["margins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(
        margins[..n_tokens].iter().all(|&m| m >= 0.05),
        "golden steps must be unambiguous"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args([
            "run",
            "--model",
            name,
            "--raw",
            "--stats",
            "--temperature",
            "0",
            "--device",
            device,
        ])
        .args(extra)
        .args(["--max-tokens", &n_tokens.to_string(), prompt])
        .output()
        .expect("running vkllm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "vkllm run failed: {stderr}");
    let stdout = String::from_utf8(out.stdout).expect("utf-8 output");

    let model = std::path::PathBuf::from(
        stderr
            .split_whitespace()
            .nth(1)
            .expect("model path in the banner"),
    );
    let prompt_tokens = stderr
        .split_once("| prompt ")
        .and_then(|(_, r)| r.split_whitespace().next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("no prompt token count in: {stderr}"));
    assert_eq!(
        prompt_tokens, ids,
        "{name}: prompt tokens against transformers' ids"
    );
    let tok = Tokenizer::from_path(&model).expect("tokenizer");
    let want = tok.decode(&greedy[..n_tokens], true).expect("decode");
    assert_eq!(
        stdout.strip_suffix('\n').unwrap_or(&stdout),
        want,
        "{name}, device {device}"
    );
}

/// `--ctx 0` takes the model's whole context (it was one position: "raise --ctx").
#[test]
fn ctx_0_takes_the_models_context() {
    check("cpu", 4, &["--ctx", "0"]);
}

/// Gemma's tokenizer adds BOS to plain text: without it the model answers " France. The The".
#[test]
fn raw_prompt_gets_gemmas_bos() {
    check_model("gemma3", "gemma3-270m", 0, "cpu", 5, &[]);
}

#[test]
fn raw_prompt_on_qwen_has_no_bos() {
    check_model("qwen25coder", "qwen2.5-coder-0.5b", 1, "cpu", 5, &[]);
}

#[test]
fn greedy_run_matches_transformers_on_cpu() {
    check("cpu", 5, &[]);
}

/// An f16 KV cache changes logits by ~1e-3 at most here: the golden steps (margins >= 0.05)
/// come out the same.
#[test]
fn greedy_run_with_f16_kv_matches_transformers_on_cpu() {
    check("cpu", 5, &["--kv-type", "f16"]);
}

#[test]
fn greedy_run_matches_transformers_on_vulkan() {
    // The first Vulkan device (lavapipe in CI); a machine without one fails here.
    check("0", 5, &[]);
}
