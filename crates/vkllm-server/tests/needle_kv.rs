//! Passkey retrieval through `vkllm run --raw` with a quantized KV cache: SmolLM2-135M reads a
//! five-digit key planted in the middle of ~1,100 tokens of filler and repeats it (greedy). With
//! f16, q8_0, q8_0-keys/q4_0-values and q4_0 caches (centred keys, the default) it does on the
//! CPU reference, and with q8_0 on the Vulkan device (lavapipe in CI). q4_0 keys stored as they
//! are (`--tune kv_centre=0`) answer "a pass key. It is a pass" instead (measured 2026-12-05,
//! not asserted: a quality finding, not a contract). A missing model file fails with the command
//! that fetches it.

use std::process::Command;

const KEY: &str = "68231";

fn prompt() -> String {
    let filler = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and \
                  back again. ";
    let needle = format!("The pass key is {KEY}. Remember it. {KEY} is the pass key. ");
    format!(
        "There is important info hidden inside a lot of irrelevant text. Find it and memorize \
         it.\n{}{needle}{}\nWhat is the pass key? The pass key is",
        filler.repeat(20),
        filler.repeat(20)
    )
}

fn answer(kv: &[&str], device: &str) -> String {
    let model = vkllm_models::fixtures::cache_dir()
        .join("models")
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        model.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        model.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args(["run", "--raw", "--temperature", "0", "--max-tokens", "8"])
        .args(kv)
        .args(["--device", device, "-m"])
        .arg(&model)
        .arg(prompt())
        .output()
        .expect("run vkllm");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{kv:?} on {device}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_passkey_survives_f16_q8_0_and_centred_q4_0_caches() {
    let mixed: &[&str] = &["--kv-type-k", "q8_0", "--kv-type-v", "q4_0"];
    for (kv, device) in [
        (&["--kv-type", "f16"][..], "cpu"),
        (&["--kv-type", "q8_0"][..], "cpu"),
        (mixed, "cpu"),
        (&["--kv-type", "q4_0"][..], "cpu"),
        (&["--kv-type", "q8_0"][..], "0"),
    ] {
        let got = answer(kv, device);
        let tail: String = got
            .chars()
            .rev()
            .take(80)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        assert!(
            tail.contains(KEY),
            "{kv:?} on {device}: the answer does not repeat the key: {tail:?}"
        );
    }
}
