"""A 20-turn tool-using agent conversation through the official `anthropic` client, driven the
way agent clients drive it: one long system prompt and the same tool definitions every turn,
the whole history (tool_use and tool_result blocks) resent each turn. From the second turn on
the server computes only what the turn added: the previous turn's whole prompt is reported as
cache_read_input_tokens, and over the conversation at least 90% of the prompt tokens are read
from the cache (the prefix cache issue's hit-rate target; its 4,000-token system prompt is
~800 here to keep the CPU run short, which makes the target harder to reach). The server's
Prometheus counters agree with the usage fields."""

import anthropic

from harness import KEY, MODEL, URL, check, main, metric

client = anthropic.Anthropic(base_url=URL, api_key=KEY or "none", max_retries=0, timeout=600)
SYSTEM = "You are a coding agent working in a Rust repository.\n" + "".join(
    f"Rule {i}: before editing src/module_{i}.rs read it, keep its public API, run the tests.\n"
    for i in range(20))
TOOLS = [{
    "name": "read_file",
    "description": "Read a file of the repository.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                     "required": ["path"]},
}]
TURNS = 20


@check
def each_turn_prefills_only_what_it_added():
    hits0 = metric("vkllm_prefix_cache_hit_tokens_total")
    queries0 = metric("vkllm_prefix_cache_queries_tokens_total")
    msgs = [{"role": "user", "content": "Find where the frame budget is checked."}]
    prev = 0
    cached = total_all = 0
    for k in range(TURNS):
        m = client.messages.create(model=MODEL, system=SYSTEM, tools=TOOLS, messages=msgs,
                                   max_tokens=2, extra_body={"temperature": 0})
        u = m.usage
        print(f"turn {k}: {u.input_tokens} computed, {u.cache_read_input_tokens} cached", flush=True)
        total = u.input_tokens + u.cache_read_input_tokens
        assert not u.cache_creation_input_tokens, u
        if k == 0:
            assert total > 600, u
        else:
            assert total > prev, (k, u, prev)
            # The previous prompt is a prefix of this one: all of it comes from the cache, so
            # what is computed is what this turn added.
            assert u.cache_read_input_tokens >= prev, (k, u, prev)
            assert u.input_tokens <= total - prev, (k, u, prev)
        prev = total
        cached += u.cache_read_input_tokens
        total_all += total
        msgs += [
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": f"toolu_{k:02d}", "name": "read_file",
                 "input": {"path": f"m{k}.rs"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{k:02d}",
                 "content": f"fn f() -> u32 {{ {k} }}"}]},
        ]
    rate = cached / total_all
    print(f"hit rate {rate:.3f} ({cached} of {total_all} prompt tokens)", flush=True)
    assert rate >= 0.9, (cached, total_all)
    assert metric("vkllm_prefix_cache_hit_tokens_total") - hits0 == cached
    assert metric("vkllm_prefix_cache_queries_tokens_total") - queries0 == total_all


if __name__ == "__main__":
    main()
