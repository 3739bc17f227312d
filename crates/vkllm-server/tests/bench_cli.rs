//! `vkllm bench --depth`: prefill and decode measured after D tokens already in the cache
//! (llama-bench's `-d`), for a dense and a hybrid model from `vkllm synth`, on the Vulkan device
//! (lavapipe in CI): every test appears once per depth with a finite speed, and the JSON says
//! which depths ran; a hybrid adds the restore of a snapshot at the deepest depth; `--profile`
//! without decode tests still profiles a prefill chunk. No timing is asserted.

use std::process::Command;

fn vkllm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vkllm"))
        .args(args)
        .output()
        .expect("running vkllm")
}

/// `vkllm synth --shape SHAPE` into a temporary file (named after `tag`), then `vkllm bench` on
/// it with `args` and `--json`: the JSON report. Both files are removed.
fn bench_json(shape: &str, tag: &str, args: &[&str]) -> serde_json::Value {
    let dir = std::env::temp_dir();
    let model = dir.join(format!("vkllm-bench-{tag}-{}.gguf", std::process::id()));
    let json = dir.join(format!("vkllm-bench-{tag}-{}.json", std::process::id()));
    let m = model.to_str().unwrap();
    let out = vkllm(&["synth", "--shape", shape, "--seed", "2", "-o", m]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut all = vec!["bench", "-m", m, "--json", json.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = vkllm(&all);
    assert!(
        out.status.success(),
        "{tag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("JSON");
    std::fs::remove_file(&model).ok();
    std::fs::remove_file(&json).ok();
    v
}

#[test]
fn depths_add_rows_for_every_test() {
    for shape in ["tiny-qwen3", "tiny-qwen3.5"] {
        let v = bench_json(
            shape,
            shape,
            &[
                "--pp",
                "16",
                "--tg",
                "6",
                "--depth",
                "0,40",
                "--reps",
                "1",
                "--sampling",
                "greedy",
            ],
        );
        assert_eq!(v["meta"]["depths"], serde_json::json!([0, 40]), "{shape}");
        let tests: Vec<(String, f64)> = v["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                (
                    r["test"].as_str().unwrap().to_string(),
                    r["tok_s"].as_f64().unwrap(),
                )
            })
            .collect();
        for want in ["pp16", "pp16 @ d40", "tg6", "tg6 @ d40"] {
            let row = tests.iter().find(|(t, _)| t == want);
            assert!(
                row.is_some_and(|(_, s)| s.is_finite() && *s > 0.0),
                "{shape}: {want} in {tests:?}"
            );
        }
        // The hybrid also times restoring a snapshot at the deepest depth (the prefix
        // cache's hit); a dense model has no recurrent state to restore.
        let restore = tests.iter().find(|(t, _)| t == "restore @ d40");
        match shape {
            "tiny-qwen3.5" => assert!(
                restore.is_some_and(|(_, s)| s.is_finite() && *s > 0.0),
                "{shape}: restore in {tests:?}"
            ),
            _ => assert!(restore.is_none(), "{shape}: {tests:?}"),
        }
    }
}

/// `vkllm bench --kv-sharing in-place`: paged caches, and the decode tests' second sequence
/// takes the first's depth rows in place; every test runs at a finite speed and the JSON says
/// how the cache was shared.
#[test]
fn in_place_sharing_runs_the_decode_tests_at_depth() {
    let v = bench_json(
        "tiny-qwen3",
        "shared",
        &[
            "--pp",
            "16",
            "--tg",
            "6",
            "--depth",
            "0,80",
            "--batch",
            "1,2",
            "--reps",
            "1",
            "--sampling",
            "greedy",
            "--kv-sharing",
            "in-place",
        ],
    );
    assert_eq!(v["meta"]["kv_sharing"], "InPlace");
    let rows = v["rows"].as_array().expect("rows");
    for (test, batch) in [("tg6", 1), ("tg6", 2), ("tg6 @ d80", 1), ("tg6 @ d80", 2)] {
        let row = rows
            .iter()
            .find(|r| r["test"] == test && r["batch"] == batch);
        assert!(
            row.is_some_and(|r| r["tok_s"]
                .as_f64()
                .is_some_and(|s| s.is_finite() && s > 0.0)),
            "{test} x{batch} in {rows:?}"
        );
    }
}

/// `vkllm bench --profile --tg 0`: no decode tests, yet the profile of one prefill chunk comes
/// (it used to be printed only next to a decode step's).
#[test]
fn profile_without_decode_tests_shows_the_prefill_chunk() {
    let v = bench_json(
        "tiny-qwen3",
        "profile",
        &["--pp", "16", "--tg", "0", "--reps", "1", "--profile"],
    );
    assert_eq!(v["profile"].as_array().map(Vec::len), Some(0), "{v}");
    let chunk = v["prefill_profile"].as_array().expect("prefill_profile");
    let dispatches: u64 = chunk.iter().filter_map(|r| r["dispatches"].as_u64()).sum();
    assert!(dispatches > 0, "{chunk:?}");
    assert!(
        chunk.iter().all(|r| r["us"]
            .as_f64()
            .is_some_and(|us| us.is_finite() && us >= 0.0)),
        "{chunk:?}"
    );
    assert!(
        v["prefill_span_us"].as_f64().is_some_and(|s| s > 0.0),
        "{v}"
    );
}
