//! `vkllm info` and `vkllm serve` open a Hugging Face checkpoint directory (config.json +
//! safetensors + tokenizer.json) the way `run` does: the llama fixture (2 layers, hidden 64,
//! 4 heads with 2 kv heads, vocab 256, fixtures/llama/config.json) with a 256-word tokenizer.

use std::path::{Path, PathBuf};
use std::process::Command;

mod serve_harness;

fn fixture() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/llama"))
}

/// The fixture's config and weights plus a word-level tokenizer of 256 words `w0` .. `w255`.
fn checkpoint_dir() -> PathBuf {
    serve_harness::tiny_checkpoint("ckdir")
}

fn vkllm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vkllm"))
}

#[test]
fn info_describes_a_checkpoint_directory() {
    let out = vkllm()
        .args(["info", "--model"])
        .arg(fixture())
        .output()
        .expect("running vkllm");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("family llama, 2 layers, hidden 64, heads 4 (kv 2), head dim 16"),
        "{stdout}"
    );
    assert!(stdout.contains("f32:"), "{stdout}");
}

fn serve_answers(dir: &Path, extra: &[&str]) {
    let mut args = vec!["--device", "cpu", "--model", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let server = serve_harness::Server::start_args(&args);
    let reply = server.raw(
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json",
        r#"{"model": "x", "prompt": "w5 w7 w9", "max_tokens": 3, "temperature": 0}"#,
    );
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains(r#""completion_tokens":3"#), "{reply}");
    assert!(reply.contains(r#""prompt_tokens":3"#), "{reply}");
}

#[test]
fn serve_answers_from_a_checkpoint_directory() {
    let dir = checkpoint_dir();
    serve_answers(&dir, &["--any-model"]);
    // Quantized at load, as run does.
    serve_answers(&dir, &["--any-model", "--quant", "q8_0"]);
    std::fs::remove_dir_all(&dir).ok();
}

/// A repo id names the checkpoint in a local Hugging Face hub cache (`$HF_HOME/hub`,
/// `models--ORG--NAME/snapshots/<refs/main>/`); an absent one is exit 1 naming where it looked.
#[test]
fn repo_ids_resolve_in_the_hub_cache() {
    let home = std::env::temp_dir().join(format!("vkllm-hfhome-{}", std::process::id()));
    let repo = home.join("hub").join("models--TestOrg--tiny-llama");
    let snap = repo.join("snapshots").join("0123abcd");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs").join("main"), "0123abcd").unwrap();
    let src = checkpoint_dir();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(src.join(f), snap.join(f)).unwrap();
    }
    let run = |model: &str| {
        vkllm()
            .args(["info", "--model", model])
            .env("HF_HOME", &home)
            .env_remove("HF_HUB_CACHE")
            .output()
            .expect("running vkllm")
    };
    let out = run("TestOrg/tiny-llama");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("family llama, 2 layers, hidden 64"),
        "{stdout}"
    );
    let out = run("TestOrg/not-fetched");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let looked = home
        .join("hub")
        .join("models--TestOrg--not-fetched")
        .join("snapshots")
        .join("main");
    assert!(
        stderr.contains("not in the local Hugging Face hub cache")
            && stderr.contains(&looked.display().to_string()),
        "{stderr}"
    );
    std::fs::remove_dir_all(&home).unwrap();
}
