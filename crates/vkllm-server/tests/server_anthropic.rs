//! The Anthropic Messages API of the real `vkllm serve` binary, through the official
//! `anthropic` Python client (tests/py/test_anthropic.py): messages (whole and streamed with
//! Anthropic's event sequence), stop sequences, system prompts, count_tokens, tool use,
//! errors, models.

mod serve_harness;

#[test]
fn anthropic_client_against_vkllm_serve() {
    let s = serve_harness::Server::start(&["--slots", "4", "--ctx", "1024"]);
    s.python("test_anthropic.py");
}
