//! `vkllm info`: lists the Vulkan devices (lavapipe in CI) and describes a model. The expected
//! numbers are SmolLM2-135M-Instruct's published shape (30 layers, hidden 576, 9 heads with 3 KV
//! heads, vocab 49152) and its GGUF's tensor types (Q4_1 with a Q8_0 embedding).

use std::process::Command;

#[test]
fn lists_devices_and_describes_smollm2() {
    let out = Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args(["info", "--model", "smollm2"])
        .output()
        .expect("running vkllm");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "vkllm info failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Vulkan devices"),
        "no device list:\n{stdout}"
    );
    assert!(stdout.contains("subgroup"), "no capabilities:\n{stdout}");
    assert!(
        stdout.contains("family llama, 30 layers, hidden 576, heads 9 (kv 3), head dim 64, ffn 1536, vocab 49152"),
        "{stdout}"
    );
    assert!(
        stdout.contains("q4_1:") && stdout.contains("q8_0:"),
        "{stdout}"
    );
    // 2 (K and V) x 30 layers x 3 kv heads x 64 x 4 bytes = 45 KiB per token.
    assert!(stdout.contains("45.0 KiB per token"), "{stdout}");
}
