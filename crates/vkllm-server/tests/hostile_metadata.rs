//! A GGUF whose counts are hostile (4294967295 or 0 layers, heads, widths) is refused by every
//! command that loads a model: exit status 1 and an error naming the GGUF key and its value,
//! never an abort from a huge allocation (exit 134) or a model run with no layers.

use std::path::{Path, PathBuf};
use std::process::Command;

fn vkllm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vkllm"))
}

/// A tiny Llama-shaped file from `vkllm synth` in a fresh directory.
fn tiny(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.gguf");
    let out = vkllm()
        .args(["synth", "--shape", "tiny-llama", "--quant", "f16", "-o"])
        .arg(&path)
        .output()
        .expect("running vkllm synth");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// `bytes` with the u32 value of metadata key `key` set to `value` (GGUF: key string, then
/// type 4 = u32, then the value).
fn with_u32(bytes: &[u8], key: &str, value: u32) -> Vec<u8> {
    let k = key.as_bytes();
    let at = (0..bytes.len() - k.len() - 8)
        .find(|&i| {
            &bytes[i..i + k.len()] == k
                && bytes[i - 8..i] == (k.len() as u64).to_le_bytes()
                && bytes[i + k.len()..i + k.len() + 4] == 4u32.to_le_bytes()
        })
        .unwrap_or_else(|| panic!("no u32 key {key}"));
    let mut out = bytes.to_vec();
    let v = at + k.len() + 4;
    out[v..v + 4].copy_from_slice(&value.to_le_bytes());
    out
}

#[test]
fn hostile_counts_are_typed_errors_in_every_command() {
    let dir = std::env::temp_dir().join(format!("vkllm-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = std::fs::read(tiny(&dir)).unwrap();
    let text = dir.join("text.txt");
    std::fs::write(
        &text,
        "The quick brown fox jumps over the lazy dog. ".repeat(8),
    )
    .unwrap();
    let cases = [
        ("llama.block_count", u32::MAX),
        ("llama.block_count", 0),
        ("llama.attention.head_count", u32::MAX),
        ("llama.attention.head_count_kv", 0),
        ("llama.embedding_length", 0x7fff_ffff),
        ("llama.feed_forward_length", u32::MAX),
    ];
    for (i, &(key, value)) in cases.iter().enumerate() {
        let file = dir.join(format!("hostile{i}.gguf"));
        std::fs::write(&file, with_u32(&base, key, value)).unwrap();
        let f = file.to_str().unwrap();
        let t = text.to_str().unwrap();
        let commands: [&[&str]; 6] = [
            &["info", "--model", f],
            &[
                "run",
                "--device",
                "cpu",
                "--max-tokens",
                "2",
                "--model",
                f,
                "hi",
            ],
            &["chat", "--device", "cpu", "--model", f],
            &["perplexity", "--device", "cpu", "--model", f, "--file", t],
            &[
                "bench", "--pp", "4", "--tg", "2", "--reps", "1", "--model", f,
            ],
            &["serve", "--port", "0", "--model", f],
        ];
        for args in commands {
            let out = vkllm()
                .args(args)
                .stdin(std::process::Stdio::null())
                .output()
                .expect("running vkllm");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{args:?} ({key} = {value}): {err}"
            );
            assert!(
                err.contains(key) && err.contains(&value.to_string()),
                "{args:?}: the error should name {key} and {value}: {err}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
