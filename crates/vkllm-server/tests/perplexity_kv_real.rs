//! KV cache types on a real model through `vkllm perplexity`: SmolLM2-135M (heads of 64, so
//! q8_0 stores its keys rotated) on docs/data/perplexity.txt, `--ctx 256`, on the CPU reference
//! and on the Vulkan device (lavapipe in CI). q8_0 must stay within 0.5% of f16's perplexity
//! (issue #33's target; measured -0.04% on the CPU, docs/quantization.md) on both backends, q8_0
//! keys with q4_0 values within 3% on the CPU, q8_0 keys with tq4 values (rotated, read in place
//! and the attention output rotated back on the GPU) within 3% on both; 4-bit keys centred per
//! channel (the default, `vkllm_models::key_centre`) closer to f16 than stored as they are
//! (`--tune kv_centre=0`) on both, and q4_0 keys with the sink offset at position 0 (the
//! default) closer than without it (`--tune kv_sink=0`). A missing model file fails with the
//! command that fetches it.

use std::path::PathBuf;
use std::process::Command;

fn ppl(model: &PathBuf, kv: &[&str], device: &str) -> f64 {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args(["perplexity", "-m"])
        .arg(model)
        .arg("-f")
        .arg(root.join("docs/data/perplexity.txt"))
        .args(["--ctx", "256", "--device", device])
        .args(kv)
        .output()
        .expect("run vkllm");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{kv:?} on {device}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("PPL = "))
        .unwrap_or_else(|| panic!("{kv:?} on {device}: no PPL line in {stdout}"));
    line["PPL = ".len()..]
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{line}"))
}

fn smollm2() -> PathBuf {
    let model = vkllm_models::fixtures::cache_dir()
        .join("models")
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        model.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        model.display()
    );
    model
}

/// Centring changes what 4-bit keys lose: measured on this text against f16 (CPU / lavapipe),
/// q4_0 +8.9 / +10.9% -> +3.7 / +1.7% (+5.1 / +7.4% without the sink offset; llama.cpp's
/// scale gave +1.3 / +2.5% at a higher KL divergence: 254 tokens move by points), tq4 +5.0 /
/// +5.4% -> +2.4 / +3.2% (docs/quantization.md has the longer text's table).
#[test]
fn centred_4bit_keys_lose_less_than_plain_ones() {
    let model = smollm2();
    for device in ["cpu", "0"] {
        let f16 = ppl(&model, &["--kv-type", "f16"], device);
        for kv in ["q4_0", "tq4"] {
            let centred = ppl(&model, &["--kv-type", kv], device);
            let plain = ppl(&model, &["--kv-type", kv, "--tune", "kv_centre=0"], device);
            eprintln!("{device} {kv}: f16 {f16}, centred {centred}, plain {plain}");
            assert!(
                (centred / f16 - 1.0).abs() < (plain / f16 - 1.0).abs(),
                "{device} {kv}: centred {centred}, plain {plain}, f16 {f16}"
            );
            if kv == "q4_0" {
                let no_sink = ppl(&model, &["--kv-type", kv, "--tune", "kv_sink=0"], device);
                eprintln!("{device} {kv}: without the sink offset {no_sink}");
                assert!(
                    (centred / f16 - 1.0).abs() < (no_sink / f16 - 1.0).abs(),
                    "{device} {kv}: with the sink offset {centred}, without {no_sink}, f16 {f16}"
                );
            }
        }
    }
}

#[test]
fn q8_0_kv_stays_within_half_a_percent_of_f16() {
    let model = smollm2();
    for device in ["cpu", "0"] {
        let f16 = ppl(&model, &["--kv-type", "f16"], device);
        let q8 = ppl(&model, &["--kv-type", "q8_0"], device);
        eprintln!("{device}: f16 {f16}, q8_0 {q8}");
        assert!(
            (q8 / f16 - 1.0).abs() <= 5e-3,
            "{device}: q8_0 {q8} vs f16 {f16}"
        );
        assert!(q8 != f16, "{device}: q8_0 gave f16's perplexity exactly");
        // q8_0 keys with tq4 values: measured -1.1% on the CPU, -0.16% on lavapipe.
        let tq4v = ppl(
            &model,
            &["--kv-type-k", "q8_0", "--kv-type-v", "tq4"],
            device,
        );
        eprintln!("{device}: q8_0/tq4 {tq4v}");
        assert!(
            (tq4v / f16 - 1.0).abs() <= 3e-2 && tq4v != q8,
            "{device}: q8_0/tq4 {tq4v} vs f16 {f16}"
        );
        if device == "cpu" {
            // q8_0 keys with q4_0 values: the 4-bit target, 3% (measured +1.27%).
            let mixed = ppl(
                &model,
                &["--kv-type-k", "q8_0", "--kv-type-v", "q4_0"],
                device,
            );
            assert!(
                (mixed / f16 - 1.0).abs() <= 3e-2 && mixed != q8,
                "q8_0/q4_0 {mixed} vs f16 {f16}"
            );
        }
    }
}
