//! The prefix store of `vkllm serve` (`--prefix-cache-mb`) on the Vulkan device (lavapipe in
//! CI) through the official `anthropic` client (tests/py/test_prefix_store.py): one slot, two
//! conversations taking turns; with the store each turn reads its conversation's previous prompt
//! from it, without it (`--prefix-cache-mb 0`) nothing is cached.

mod serve_harness;

#[test]
fn conversations_resume_from_the_prefix_store() {
    for (mb, store) in [("128", "1"), ("0", "0")] {
        let s = serve_harness::Server::start_on(
            None,
            &["--slots", "1", "--ctx", "1024", "--prefix-cache-mb", mb],
        );
        s.python_env("test_prefix_store.py", &[("VKLLM_PREFIX_STORE", store)]);
    }
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
