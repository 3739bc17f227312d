//! `vkllm run --json-schema FILE` and `--grammar FILE` on the three real models (chat template,
//! sampled): the answer parses as JSON and satisfies the schema (checked field by field here),
//! or matches the grammar; a schema that cannot be compiled is an error naming the reason, not
//! a panic. On the CPU reference backend, and SmolLM2 on the Vulkan device (lavapipe in CI,
//! the GPU sampler's mask). Needs scripts/fetch-models.sh to have run.

use std::process::{Command, Output};

fn run(model: &str, device: &str, extra: &[&str], prompt: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args([
            "run",
            "--model",
            model,
            "--device",
            device,
            "--temperature",
            "0.7",
            "--seed",
            "5",
            "--max-tokens",
            "160",
            "--stats",
        ])
        .args(extra)
        .arg(prompt)
        .output()
        .expect("running vkllm")
}

fn file(name: &str, text: &str) -> tempfile::TempPath {
    let mut f = tempfile::Builder::new()
        .suffix(name)
        .tempfile()
        .expect("temp file");
    std::io::Write::write_all(&mut f, text.as_bytes()).expect("write");
    f.into_temp_path()
}

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "city": {"type": "string", "maxLength": 40},
    "country": {"type": "string", "maxLength": 40},
    "population_millions": {"type": "number", "minimum": 0, "maximum": 100},
    "size": {"enum": ["small", "medium", "large"]}
  },
  "required": ["city", "country", "population_millions", "size"],
  "additionalProperties": false
}"#;

fn check_answer(model: &str, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{model}: {stderr}");
    assert!(
        stderr.contains("finish: EndOfGeneration"),
        "{model}: the grammar ends the answer before max_tokens: {stderr}\n{stdout}"
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{model}: not JSON ({e}): {stdout:?}"));
    let o = v.as_object().expect("an object");
    assert_eq!(o.len(), 4, "{model}: {v}");
    for k in ["city", "country"] {
        let s = o[k].as_str().unwrap_or_else(|| panic!("{model}: {k}: {v}"));
        assert!(s.chars().count() <= 40, "{model}: {v}");
    }
    let p = o["population_millions"].as_f64().expect("a number");
    assert!((0.0..=100.0).contains(&p), "{model}: {v}");
    assert!(
        ["small", "medium", "large"].contains(&o["size"].as_str().unwrap_or("")),
        "{model}: {v}"
    );
    eprintln!("{model}: {}", stdout.trim());
}

#[test]
fn json_schema_answers_on_the_real_models() {
    let schema = file(".json", SCHEMA);
    let s = schema.to_str().unwrap();
    let prompt = "Describe the capital of France as JSON.";
    for model in ["smollm2", "gemma3", "qwen25coder"] {
        check_answer(model, &run(model, "cpu", &["--json-schema", s], prompt));
    }
    // The GPU path: the sampling kernel applies the mask.
    check_answer(
        "smollm2 (vulkan)",
        &run("smollm2", "0", &["--json-schema", s], prompt),
    );
}

#[test]
fn grammar_files_and_bad_schemas() {
    let g = file(
        ".lark",
        "start: \"The answer is \" (\"yes\" | \"no\") \".\"\n",
    );
    let out = run(
        "smollm2",
        "cpu",
        &["--grammar", g.to_str().unwrap()],
        "Is Paris in France?",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        ["The answer is yes.", "The answer is no."].contains(&text.trim()),
        "{text:?}"
    );
    let bad = file(".json", r#"{"type": "nope"}"#);
    let out = run(
        "smollm2",
        "cpu",
        &["--json-schema", bad.to_str().unwrap()],
        "hi",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("invalid grammar") && err.contains("nope"),
        "{err}"
    );
}
