//! `vkllm perplexity` on a safetensors fixture (byte tokens, CPU), plain and quantized at load,
//! and with an f16 KV cache: the printed PPL and error are those of `vkllm_models::perplexity`
//! on the same tokens; `--kl-against` prints `divergence_kv`'s figures.

use std::process::Command;

use vkllm_models::fixtures::fixtures_dir;
use vkllm_models::perplexity::{divergence_kv, perplexity_kv};
use vkllm_models::{Checkpoint, CpuBackend, KvType, QuantScheme};

#[test]
fn cli_prints_the_library_result() {
    let text = "The keeper climbed the stairs to wind the clockwork and trim the wick, \
                then wrote the weather in the log book before the sun came up again.\n"
        .repeat(3);
    let file = std::env::temp_dir().join(format!("vkllm-ppl-cli-{}.txt", std::process::id()));
    std::fs::write(&file, &text).unwrap();
    let dir = fixtures_dir().join("llama");
    let ck = Checkpoint::open(&dir).unwrap();
    let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
    let runs = [
        (None, KvType::F32),
        (Some(QuantScheme::Q8_0), KvType::F32),
        (Some(QuantScheme::Q4_K_M), KvType::F32),
        (None, KvType::F16),
    ];
    let mut f32_ppl = None;
    for (quant, kv) in runs {
        let mut b = CpuBackend::new();
        let model = vkllm_models::AnyModel::from(ck.load(quant, &mut b, 64).unwrap());
        let want = perplexity_kv(&model, &mut b, &tokens, 96, None, kv, &mut |_, _, _| {}).unwrap();
        match (quant, kv) {
            (None, KvType::F32) => f32_ppl = Some(want.ppl),
            (None, KvType::F16) => {
                // f16 keys and values: the same text scores slightly differently.
                let base = f32_ppl.expect("the f32 run came first");
                assert!(
                    want.ppl != base && (want.ppl / base - 1.0).abs() < 1e-2,
                    "{}",
                    want.ppl
                );
            }
            _ => {}
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vkllm"));
        cmd.args([
            "perplexity",
            "--device",
            "cpu",
            "--byte-tokens",
            "--ctx",
            "96",
        ])
        .arg("--model")
        .arg(&dir)
        .arg("--file")
        .arg(&file);
        if let Some(q) = quant {
            cmd.args(["--quant", q.name()]);
        }
        cmd.args(["--kv-type", kv.name()]);
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expect = format!(
            "PPL = {:.4} +/- {:.5} ({} tokens scored",
            want.ppl, want.stderr, want.count
        );
        assert!(
            stdout.starts_with(&expect),
            "{quant:?} {kv:?}: {stdout} (want {expect})"
        );
    }
    std::fs::remove_file(&file).ok();
}

#[test]
fn kl_against_prints_the_divergence() {
    let text =
        "Tide tables pinned by the door, the ferry left at six and came back at nine.\n".repeat(3);
    let file = std::env::temp_dir().join(format!("vkllm-kld-cli-{}.txt", std::process::id()));
    std::fs::write(&file, &text).unwrap();
    let dir = fixtures_dir().join("llama");
    let ck = Checkpoint::open(&dir).unwrap();
    let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
    let mut b = CpuBackend::new();
    let model = vkllm_models::AnyModel::from(ck.load(None, &mut b, 64).unwrap());
    let want = divergence_kv(
        &model,
        &mut b,
        &tokens,
        64,
        None,
        KvType::F16.into(),
        KvType::F32.into(),
        &mut |_, _, _| {},
    )
    .unwrap();
    assert!(want.mean_kl > 0.0);
    let out = Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args([
            "perplexity",
            "--device",
            "cpu",
            "--byte-tokens",
            "--ctx",
            "64",
        ])
        .args(["--kv-type", "f16", "--kl-against", "f32", "--model"])
        .arg(&dir)
        .arg("--file")
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        format!("PPL = {:.4} +/- {:.5}", want.test.ppl, want.test.stderr),
        format!("reference (f32) PPL = {:.4}", want.reference.ppl),
        format!(
            "KLD = {:.6} +/- {:.6} nats per token; same top token {:.2}%",
            want.mean_kl,
            want.kl_stderr,
            want.same_top * 100.0
        ),
    ] {
        assert!(stdout.contains(&line), "{stdout} (want {line})");
    }
    std::fs::remove_file(&file).ok();
}
