//! Structured outputs of the real `vkllm serve` binary through the official clients
//! (tests/py/test_structured.py): JSON mode, JSON Schema (pydantic `parse`), Lark and regex
//! grammars, forced tool calls against their schemas, Anthropic `output_config.format`, bad
//! schemas, and constrained requests mixed with free ones.

mod serve_harness;

#[test]
fn structured_outputs_through_the_official_clients() {
    let s = serve_harness::Server::start(&["--slots", "16", "--ctx", "1024"]);
    s.python("test_structured.py");
}
