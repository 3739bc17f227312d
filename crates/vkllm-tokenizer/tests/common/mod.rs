//! Shared by the parity tests: where fixtures and fetched files are, and loading them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value as Json;
use vkllm_tokenizer::Tokenizer;
use vkllm_tokenizer::cache::{KNOWN, cache_dir, missing_message};

/// `$VKLLM_FIXTURES`, else the workspace's `fixtures/`.
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("VKLLM_FIXTURES").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"),
    }
}

pub fn read_fixture(name: &str) -> Json {
    let path = fixtures_dir().join("tokenizer").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "fixture {} is missing ({e}); regenerate with fixtures/tokenizer/make_tokenizer_fixtures.py",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The corpus strings, by index.
pub fn corpus() -> &'static Vec<String> {
    static C: OnceLock<Vec<String>> = OnceLock::new();
    C.get_or_init(|| {
        read_fixture("corpus.json")["texts"]
            .as_array()
            .expect("corpus.json: texts")
            .iter()
            .map(|t| t.as_str().expect("corpus text").to_string())
            .collect()
    })
}

/// A fetched file under the cache, by its name in `cache::KNOWN`; fails (never skips) with
/// the command to run when it is missing.
pub fn fetched(known_name: &str) -> PathBuf {
    let k = KNOWN
        .iter()
        .find(|k| k.name == known_name)
        .unwrap_or_else(|| panic!("no known file {known_name}"));
    let path = cache_dir().join(k.rel_path);
    assert!(path.exists(), "{}", missing_message(k, &path));
    path
}

/// The fixture name -> the fetched file it is made from.
fn source_of(name: &str) -> &'static str {
    match name {
        "smollm2-gguf" => "smollm2",
        "qwen25coder-gguf" => "qwen25coder",
        "gemma3-gguf" => "gemma3",
        "gemma3-json" => "gemma3-tok",
        "qwen3-json" => "qwen3-tok",
        "qwen36-tiktoken" => "qwen3.6-tok",
        other => panic!("unknown tokenizer fixture {other}"),
    }
}

/// Every tokenizer the fixtures cover.
pub const NAMES: [&str; 6] = [
    "smollm2-gguf",
    "qwen25coder-gguf",
    "gemma3-gguf",
    "gemma3-json",
    "qwen3-json",
    "qwen36-tiktoken",
];

/// A fresh copy of a fixture's tokenizer (for tests that change its settings).
pub fn load(name: &str) -> Tokenizer {
    let path = fetched(source_of(name));
    Tokenizer::from_path(&path).unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

/// The tokenizer of a fixture, loaded once per test binary.
pub fn tokenizer(name: &str) -> &'static Tokenizer {
    static CELLS: [OnceLock<Tokenizer>; 6] = [const { OnceLock::new() }; 6];
    let i = NAMES
        .iter()
        .position(|n| *n == name)
        .unwrap_or_else(|| panic!("unknown tokenizer {name}"));
    CELLS[i].get_or_init(|| load(name))
}

/// The ids of a JSON array.
pub fn ids(v: &Json) -> Vec<u32> {
    v.as_array()
        .expect("an id array")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}
