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

/// Gemma 3 270M (18 layers, every 6th full attention, window 512, one KV head of 256): its 15
/// sliding layers keep rings of 512 + 128 (the prefill chunk) = 640 positions, so at the full
/// 32768-token context the f32 KV cache is 15 x 2 x 640 x 256 x 4 + 3 x 2 x 32768 x 256 x 4
/// bytes = 210.75 MiB instead of 18 x 2 x 32768 x 256 x 4 = 1152 MiB.
#[test]
fn gemma3_kv_counts_sliding_rings() {
    let out = Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args(["info", "--model", "gemma3-270m"])
        .output()
        .expect("running vkllm");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "vkllm info failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 2 x 3 full layers x 256 x 4 bytes = 6 KiB per token.
    assert!(stdout.contains("6.0 KiB per token"), "{stdout}");
    assert!(stdout.contains("210.8 MiB at the full context"), "{stdout}");
    assert!(stdout.contains("1152.0 MiB if every layer"), "{stdout}");
}
