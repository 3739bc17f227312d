//! Hybrid (Gated DeltaNet) models through the commands users run: a `vkllm synth --shape
//! tiny-qwen3.5` GGUF answered by `vkllm run` and scored by `vkllm perplexity`, on the CPU
//! reference backend and on the Vulkan device (`run` with each decoder), which must agree
//! (greedy text exactly, perplexity to 1e-4), and served by `vkllm serve` on both backends with
//! the same text. The MoE shapes (`tiny-qwen3.6-moe`: hybrid + experts + shared expert,
//! `tiny-qwen3-moe`) give the same greedy text on every device.

mod serve_harness;

use std::path::PathBuf;
use std::process::{Command, Output};

use serve_harness::Server;

fn vkllm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vkllm"))
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `vkllm serve` of `model` as `m`, with `extra` arguments.
fn serve(model: &std::path::Path, extra: &[&str]) -> Server {
    let mut args = vec![
        "--model",
        model.to_str().expect("utf-8 path"),
        "--served-model-name",
        "m",
    ];
    args.extend_from_slice(extra);
    Server::start_args(&args)
}

/// A chat completion through `server` (expected to succeed): the response body.
fn chat(server: &Server, body: &serde_json::Value) -> serde_json::Value {
    let resp = server.raw(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json",
        &body.to_string(),
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    serde_json::from_str(resp.split("\r\n\r\n").nth(1).expect("a body")).expect("JSON")
}

fn synth() -> PathBuf {
    synth_shape("tiny-qwen3.5")
}

/// A fresh file per call: tests run in parallel threads of one process, and two writing the same
/// path would truncate the file the other is loading.
fn synth_shape(shape: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("vkllm-{shape}-{}-{n}.gguf", std::process::id()));
    ok(vkllm()
        .args(["synth", "--shape", shape, "--seed", "5", "-o"])
        .arg(&path)
        .output()
        .expect("running vkllm synth"));
    path
}

/// The devices: the CPU reference, the default Vulkan device (per-token decoding on lavapipe,
/// `--decoder auto`), and its recorded slot decoder.
const DEVICES: [&[&str]; 3] = [&["--device", "cpu"], &[], &["--decoder", "slots"]];

/// Greedy `vkllm run` text of `model` on each of [`DEVICES`].
fn greedy_texts(model: &PathBuf) -> Vec<String> {
    DEVICES
        .iter()
        .map(|d| {
            ok(vkllm()
                .args([
                    "run",
                    "--raw",
                    "--max-tokens",
                    "6",
                    "--temperature",
                    "0",
                    "--model",
                ])
                .arg(model)
                .args(*d)
                .arg("the quick brown fox")
                .output()
                .expect("running vkllm run"))
        })
        .collect()
}

#[test]
fn moe_ggufs_from_synth_agree_on_every_device() {
    for shape in ["tiny-qwen3.6-moe", "tiny-qwen3-moe"] {
        let model = synth_shape(shape);
        let texts = greedy_texts(&model);
        assert!(!texts[0].trim().is_empty(), "{shape}: no text");
        assert_eq!(texts[0], texts[1], "{shape}: cpu vs vulkan");
        assert_eq!(
            texts[0], texts[2],
            "{shape}: cpu vs the vulkan slot decoder"
        );
        std::fs::remove_file(&model).ok();
    }
}

#[test]
fn run_and_perplexity_on_a_hybrid_gguf() {
    let model = synth();
    let texts = greedy_texts(&model);
    assert!(!texts[0].trim().is_empty(), "no text");
    assert_eq!(texts[0], texts[1], "cpu vs vulkan");
    assert_eq!(texts[0], texts[2], "cpu vs the vulkan slot decoder");

    let file = std::env::temp_dir().join(format!("vkllm-tq35-{}.txt", std::process::id()));
    std::fs::write(
        &file,
        "the quick brown fox jumps over the lazy dog ".repeat(12),
    )
    .unwrap();
    let ppl: Vec<f64> = DEVICES[..2]
        .iter()
        .map(|d| {
            let out = ok(vkllm()
                .args(["perplexity", "--ctx", "32", "--model"])
                .arg(&model)
                .arg("--file")
                .arg(&file)
                .args(*d)
                .output()
                .expect("running vkllm perplexity"));
            let v = out
                .split_whitespace()
                .nth(2)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no PPL in {out}"));
            assert!(out.starts_with("PPL = "), "{out}");
            v
        })
        .collect();
    assert!(ppl[0].is_finite() && ppl[0] > 1.0, "{ppl:?}");
    assert!(
        (ppl[0] - ppl[1]).abs() <= 1e-4 * ppl[0],
        "cpu vs vulkan {ppl:?}"
    );
    std::fs::remove_file(&file).ok();

    // `vkllm serve` on both backends (the CPU's reference generator, the device's slot decoder)
    // answers a raw completion with `run`'s text.
    for d in [&["--device", "cpu"][..], &[]] {
        let server = serve(&model, d);
        let body = r#"{"model":"m","prompt":"the quick brown fox","max_tokens":6,"temperature":0}"#;
        let resp = server.raw(
            "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json",
            body,
        );
        assert!(resp.starts_with("HTTP/1.1 200"), "{d:?}: {resp}");
        let json = resp.split("\r\n\r\n").nth(1).expect("a body");
        let v: serde_json::Value = serde_json::from_str(json).expect("JSON");
        let text = v["choices"][0]["text"].as_str().expect("text");
        assert_eq!(text, texts[0].trim_end_matches('\n'), "serve {d:?} vs run");
    }
    std::fs::remove_file(&model).ok();
}

/// `--kv-type f16` keeps the attention layers' keys and values of a hybrid model as f16 (no
/// longer ignored): `run` answers on every device and says nothing about the flag, and `bench`
/// measures with it.
#[test]
fn f16_kv_cache_on_a_hybrid_gguf() {
    let model = synth_shape("tiny-qwen3.6-moe");
    for d in DEVICES {
        let out = vkllm()
            .args(["run", "--raw", "--max-tokens", "4", "--temperature", "0"])
            .args(["--kv-type", "f16", "--model"])
            .arg(&model)
            .args(d)
            .arg("the quick brown fox")
            .output()
            .expect("running vkllm run");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        let text = ok(out);
        assert!(!text.trim().is_empty(), "{d:?}: no text");
        assert!(!err.contains("ignored"), "{d:?}: {err}");
    }
    let out = ok(vkllm()
        .args([
            "bench",
            "--pp",
            "8",
            "--tg",
            "4",
            "--reps",
            "1",
            "--kv-type",
            "f16",
            "--model",
        ])
        .arg(&model)
        .output()
        .expect("running vkllm bench"));
    assert!(out.contains("kv f16") && out.contains("| tg4"), "{out}");
    std::fs::remove_file(&model).ok();
}

/// Qwen3.5/3.6's own template (the built-in one: the synth file carries none) writes tools in
/// its XML form; a forced call through `vkllm serve` is constrained to that form and to the
/// tool's schema, and comes back as OpenAI `tool_calls` with typed arguments, even from random
/// weights.
#[test]
fn forced_tool_calls_in_qwen35s_xml_form() {
    let model = synth_shape("tiny-qwen3.6-moe");
    let server = serve(&model, &["--device", "cpu"]);
    let body = serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": "Weather in Oslo for two days?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "enum": ["Oslo", "Bergen"]},
                "note": {"type": "string", "maxLength": 12},
                "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                "required": ["city", "days"]}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        // The tiny synthetic vocabulary spells the tags nearly byte by byte.
        "max_tokens": 300,
        "temperature": 0.7,
        "seed": 3,
        "chat_template_kwargs": {"enable_thinking": false},
    });
    let v = chat(&server, &body);
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let call = &choice["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{v}");
    let args: serde_json::Value =
        serde_json::from_str(call["arguments"].as_str().expect("arguments")).expect("JSON");
    assert!(
        ["Oslo", "Bergen"].contains(&args["city"].as_str().unwrap_or("")),
        "{args}"
    );
    if let Some(note) = args.get("note") {
        assert!(
            note.as_str().is_some_and(|n| n.chars().count() <= 12),
            "{args}"
        );
    }
    let days = args["days"].as_i64().expect("an integer");
    assert!((1..=7).contains(&days), "{args}");
    drop(server);
    std::fs::remove_file(&model).ok();
}

/// Three chats behind one system prompt through `vkllm serve` (one slot) on both backends: the
/// first computes its prompt, the second computes its prompt or starts from the first's tail
/// mark (and is marked where it leaves the first's prefix, unless that is within 16 tokens of
/// where it started), the third reads most of the shared system prompt from a mark, reported in
/// `usage.prompt_tokens_details.cached_tokens`; with `--recurrent-marks 0` (the device's slot
/// decoder) nothing is reused.
#[test]
fn chats_behind_one_system_prompt_reuse_its_mark() {
    let model = synth();
    let system = "You are a terse assistant for a shipping company. Answer in one short line, \
                  never ask questions back, and keep every number exactly as given.";
    for (device, marks) in [("cpu", "4"), ("0", "4"), ("0", "0")] {
        let server = serve(
            &model,
            &[
                "--device",
                device,
                "--slots",
                "1",
                "--recurrent-marks",
                marks,
            ],
        );
        let mut cached = Vec::new();
        for user in [
            "Where is parcel 17?",
            "Cancel order 4.",
            "Track box 9 please.",
        ] {
            let body = serde_json::json!({
                "model": "m",
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": user}],
                "max_tokens": 3,
                "temperature": 0,
                "chat_template_kwargs": {"enable_thinking": false},
            });
            let v = chat(&server, &body);
            let u = &v["usage"];
            let hit = u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0);
            cached.push((hit, u["prompt_tokens"].as_u64().expect("prompt_tokens")));
        }
        eprintln!("{device}/{marks}: (cached, prompt) tokens {cached:?}");
        // The tiny synthetic vocabulary spells the system prompt nearly byte by byte.
        let (first, second, third) = (cached[0], cached[1], cached[2]);
        assert_eq!(first.0, 0, "{device}/{marks}: {cached:?}");
        if marks == "0" {
            assert_eq!((second.0, third.0), (0, 0), "{device}/{marks}: {cached:?}");
        } else {
            // The second starts from the first's tail mark (`TAIL_MARK` tokens before its end)
            // where that lies in the shared prefix, else computes its prompt.
            let tail = vkllm_engine::TAIL_MARK as u64;
            assert!(
                second.0 == 0 || second.0 + tail == first.1,
                "{device}/{marks}: {cached:?}"
            );
            assert!(
                third.0 as usize >= system.len() / 2 && third.0 < third.1,
                "{device}/{marks}: {cached:?}"
            );
        }
        drop(server);
    }
    std::fs::remove_file(&model).ok();
}
