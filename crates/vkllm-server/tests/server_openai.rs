//! The OpenAI API of the real `vkllm serve` binary, through the official `openai` Python client
//! (tests/py/test_openai.py): chat (whole and streamed), completions, stop strings, token
//! limits, seeds, n > 1, logprobs, penalties and logit_bias, tool calls, errors, health and
//! metrics.

mod serve_harness;

#[test]
fn openai_client_against_vkllm_serve() {
    let s = serve_harness::Server::start(&["--slots", "4", "--ctx", "1024"]);
    s.python("test_openai.py");
}
