//! The prefix store of `vkllm serve` (`--prefix-cache-mb`) on the Vulkan device (lavapipe in
//! CI) through the official `anthropic` client (tests/py/test_prefix_store.py): one slot, two
//! conversations taking turns; with the store each turn reads its conversation's previous prompt
//! from it (copied, or shared in place with `--kv-sharing in-place`), without it
//! (`--prefix-cache-mb 0`) nothing is cached.

mod serve_harness;

#[test]
fn conversations_resume_from_the_prefix_store() {
    for (mb, store, sharing) in [
        ("128", "1", "copy"),
        ("128", "1", "in-place"),
        ("0", "0", "in-place"),
    ] {
        let s = serve_harness::Server::start_on(
            None,
            &[
                "--slots",
                "1",
                "--ctx",
                "1024",
                "--prefix-cache-mb",
                mb,
                "--kv-sharing",
                sharing,
            ],
        );
        let env = [("VKLLM_PREFIX_STORE", store), ("VKLLM_KV_SHARING", sharing)];
        s.python_env("test_prefix_store.py", &env);
    }
}

/// `--kv-sharing in-place` on the Vulkan device: chats behind one system prompt on two slots
/// take its KV blocks from each other in place and answer as they do alone
/// (tests/py/test_kv_sharing.py); so do they with `on-demand` KV memory of 32 MiB (SmolLM2's
/// f32 cache takes 46 KB a position: two slots' first 256 rows each), and on the CPU backend
/// (the reference generator's slots, its own pages).
#[test]
fn concurrent_chats_share_kv_blocks_in_place() {
    for (device, extra) in [
        (None, &["--kv-sharing", "in-place"][..]),
        (
            None,
            &["--kv-sharing", "on-demand", "--kv-memory-mb", "32"][..],
        ),
        (Some("cpu"), &["--kv-sharing", "in-place"][..]),
    ] {
        let mut args = vec!["--slots", "2", "--ctx", "512"];
        args.extend_from_slice(extra);
        let s = serve_harness::Server::start_on(device, &args);
        s.python("test_kv_sharing.py");
    }
}

/// On-demand KV memory too small for a prompt, with no idle slot to take it from: the request
/// is answered 503 `kv_memory_full`, and a short one still runs. SmolLM2's f32 cache takes 46
/// KB a position and a slot binds 256 rows at a time: 16 MiB hold 256 rows, not 512.
#[test]
fn a_prompt_past_the_kv_memory_is_a_503() {
    let s = serve_harness::Server::start_on(
        None,
        &[
            "--slots",
            "1",
            "--ctx",
            "1024",
            "--kv-sharing",
            "on-demand",
            "--kv-memory-mb",
            "16",
        ],
    );
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer {}",
        serve_harness::KEY
    );
    let long = "the sky is blue and ".repeat(80);
    let body = format!(r#"{{"model": "smollm2", "prompt": "{long}", "max_tokens": 4}}"#);
    let resp = s.raw(&head, &body);
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(resp.contains("kv_memory_full"), "{resp}");
    let resp = s.raw(
        &head,
        r#"{"model": "smollm2", "prompt": "Hi", "max_tokens": 2, "temperature": 0}"#,
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}\n{}", s.log());
}

/// `--warm-up on` (the default on GPUs; off on lavapipe) runs its requests before the server
/// listens, and the server then answers: 19 short prompts and a long one, capped by `--ctx`.
#[test]
fn warm_up_runs_before_listening() {
    let s =
        serve_harness::Server::start_on(None, &["--slots", "2", "--ctx", "64", "--warm-up", "on"]);
    // The harness returns once it reads `listening on`, and it logs stderr line by line in
    // order: the warm-up's line, written before, is in the log by then.
    let log = s.log();
    assert!(log.contains("vkllm: warm-up: 20 requests"), "{log}");
    let resp = s.raw(
        &format!(
            "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer {}",
            serve_harness::KEY
        ),
        r#"{"model": "smollm2", "prompt": "The sky is", "max_tokens": 4, "temperature": 0}"#,
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
}

/// A 20-turn tool-using agent conversation (tests/py/test_agent_cache.py): from the second turn
/// on only the turn's new tokens are computed, and >= 90% of all prompt tokens are cache hits.
/// On the CPU backend (`VKLLM_SERVE_TEST_DEVICE`): the reuse is the generator's, the same on
/// every backend, and lavapipe took ~230 s for it (a 660-token first turn at ~20 tok/s) where
/// the CPU takes a fraction; the store test above keeps the Vulkan device.
#[test]
fn agent_turns_prefill_only_what_they_add() {
    let s = serve_harness::Server::start(&["--slots", "2", "--ctx", "4096"]);
    s.python("test_agent_cache.py");
}
