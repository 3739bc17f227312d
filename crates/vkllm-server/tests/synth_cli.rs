//! `vkllm synth`: every tiny shape's file has a vocabulary vkllm-tokenizer loads (byte-level BPE
//! and SentencePiece) that round-trips text; bad names are errors naming the known ones.

use std::process::Command;

use vkllm_tokenizer::{EncodeOptions, Tokenizer};

fn vkllm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args(args)
        .output()
        .expect("running vkllm")
}

/// `vkllm run` on the CPU generates three greedy tokens from the file at `path`.
fn generates(path: &str) {
    let o = vkllm(&[
        "run",
        "--device",
        "cpu",
        "--raw",
        "--max-tokens",
        "3",
        "--temperature",
        "0",
        "--model",
        path,
        "hello",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn synth_files_carry_a_loadable_vocabulary() {
    let dir = std::env::temp_dir();
    for shape in [
        "tiny-qwen3",
        "tiny-llama",
        "tiny-qwen2",
        "tiny-smollm2",
        "tiny-gemma3",
        "tiny-qwen3.5",
        "tiny-qwen3.6-moe",
        "tiny-qwen3-moe",
    ] {
        let path = dir.join(format!(
            "vkllm-synth-cli-{}-{shape}.gguf",
            std::process::id()
        ));
        let p = path.to_str().unwrap();
        let out = vkllm(&[
            "synth", "--shape", shape, "--quant", "q4_k_m", "--seed", "5", "-o", p,
        ]);
        assert!(
            out.status.success(),
            "{shape}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tok = Tokenizer::from_gguf_file(&path).unwrap_or_else(|e| panic!("{shape}: {e}"));
        assert_eq!(tok.vocab_size(), 1024, "{shape}");
        let text = "Hello, world! 123 \u{e9}t\u{e9}";
        let ids = tok.encode(text, EncodeOptions::plain()).unwrap();
        assert!(
            !ids.is_empty() && ids.iter().all(|&i| i < 1024),
            "{shape}: {ids:?}"
        );
        assert_eq!(tok.decode(&ids, true).unwrap(), text, "{shape}: round trip");
        assert!(tok.special_ids().eos.is_some(), "{shape}: eos");
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn unknown_names_are_reported() {
    let out = vkllm(&["synth", "--shape", "qwen9", "-o", "/dev/null"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown model shape `qwen9`") && err.contains("qwen3-0.6b"),
        "{err}"
    );
    let out = vkllm(&[
        "synth",
        "--shape",
        "tiny-qwen3",
        "--quant",
        "q3",
        "-o",
        "/dev/null",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown quantization `q3`") && err.contains("q4_k_m"),
        "{err}"
    );
    let help = String::from_utf8_lossy(&vkllm(&["synth", "--help"]).stdout).to_string();
    assert!(help.contains("qwen3.5-0.8b"), "{help}");
}

#[test]
fn layers_keeps_a_slice_of_the_model() {
    let path = std::env::temp_dir().join(format!(
        "vkllm-synth-cli-{}-layers.gguf",
        std::process::id()
    ));
    let p = path.to_str().unwrap();
    let full =
        std::env::temp_dir().join(format!("vkllm-synth-cli-{}-full.gguf", std::process::id()));
    let f = full.to_str().unwrap();
    for (out, layers) in [(p, Some("1")), (f, None)] {
        let mut args = vec![
            "synth",
            "--shape",
            "tiny-qwen3.6-moe",
            "--quant",
            "q8_0",
            "-o",
            out,
        ];
        if let Some(n) = layers {
            args.extend(["--layers", n]);
        }
        let o = vkllm(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let (one, all) = (
        std::fs::metadata(&path).unwrap().len(),
        std::fs::metadata(&full).unwrap().len(),
    );
    assert!(one < all, "one layer {one} bytes, every layer {all}");
    // The slice loads and generates (its block count matches its tensors).
    generates(p);
    let info = vkllm(&["info", "-m", p]);
    let text = String::from_utf8_lossy(&info.stdout).to_string();
    assert!(text.contains(", 1 layers,"), "{text}");
    let o = vkllm(&[
        "synth",
        "--shape",
        "tiny-qwen3",
        "--layers",
        "0",
        "-o",
        "/dev/null",
    ]);
    assert!(!o.status.success(), "0 layers is refused");
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&full).ok();
}

/// `--fill pool`: a file of the same size as the exact one that `vkllm run` generates from;
/// `--fill` takes only its two values.
#[test]
fn pooled_fill_makes_a_runnable_file_of_the_same_size() {
    let dir = std::env::temp_dir();
    let pid = std::process::id();
    let (exact, pool) = (
        dir.join(format!("vkllm-synth-cli-{pid}-exact.gguf")),
        dir.join(format!("vkllm-synth-cli-{pid}-pool.gguf")),
    );
    for (path, fill) in [(&exact, "exact"), (&pool, "pool")] {
        let p = path.to_str().unwrap();
        let o = vkllm(&[
            "synth",
            "--shape",
            "tiny-qwen3.6-moe",
            "--quant",
            "q4_k_m",
            "--fill",
            fill,
            "-o",
            p,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(
        std::fs::metadata(&exact).unwrap().len(),
        std::fs::metadata(&pool).unwrap().len()
    );
    generates(pool.to_str().unwrap());
    let bad = vkllm(&[
        "synth",
        "--shape",
        "tiny-qwen3",
        "--fill",
        "zeros",
        "-o",
        "/dev/null",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("pool"));
    for p in [exact, pool] {
        std::fs::remove_file(p).ok();
    }
}
