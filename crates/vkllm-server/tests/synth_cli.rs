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
