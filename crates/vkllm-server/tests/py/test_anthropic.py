"""The Anthropic Messages API of `vkllm serve` through the official `anthropic` client."""

import json

import anthropic

from harness import KEY, MODEL, URL, check, cli, http, main

client = anthropic.Anthropic(base_url=URL, api_key=KEY or "none", max_retries=0, timeout=120)
Q = "What is the capital of France?"


def sampling(kw):
    """This client version has no sampling arguments: they go in the body as extra fields."""
    extra = kw.pop("extra_body", {})
    for k in ("temperature", "top_p", "top_k"):
        if k in kw:
            extra[k] = kw.pop(k)
    extra.setdefault("temperature", 0)
    kw["extra_body"] = extra
    return kw


def ask(content=Q, **kw):
    kw.setdefault("max_tokens", 20)
    return client.messages.create(model=MODEL, messages=[{"role": "user", "content": content}], **sampling(kw))


@check
def message_greedy_equals_the_cli():
    m = ask()
    want = cli("run", "--model", "smollm2", "--device", "cpu", "--temperature", "0",
               "--max-tokens", "20", Q)
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL
    assert m.id.startswith("msg_")
    assert len(m.content) == 1 and m.content[0].type == "text"
    assert m.content[0].text == want[:-1], (m.content[0].text, want)
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert m.usage.input_tokens > 10 and 0 < m.usage.output_tokens <= 20


@check
def stream_has_the_event_sequence_and_the_same_text():
    whole = ask(max_tokens=16)
    events = []
    with client.messages.stream(model=MODEL, messages=[{"role": "user", "content": Q}], max_tokens=16,
                                **sampling({})) as s:
        for e in s:
            events.append(e.type)
        final = s.get_final_message()
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    raw = [e for e in events if e in ("message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop")]
    assert raw[0] == "message_start" and raw[1] == "content_block_start"
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"], raw
    assert set(raw[2:-3]) == {"content_block_delta"}


@check
def stop_sequences_and_max_tokens():
    full = ask("Write a long story about a dragon.", max_tokens=30).content[0].text
    stop = full.split()[3]
    m = ask("Write a long story about a dragon.", max_tokens=30, stop_sequences=[stop, "zzzz"])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert m.content[0].text == full[: full.index(stop)]
    m = ask("Write a long story about a dragon.", max_tokens=3)
    assert (m.stop_reason, m.usage.output_tokens) == ("max_tokens", 3)


@check
def system_prompts_and_count_tokens():
    sys_blocks = [{"type": "text", "text": "You answer in one word.", "cache_control": {"type": "ephemeral"}}]
    a = ask(system="You answer in one word.", max_tokens=5)
    b = ask(system=sys_blocks, max_tokens=5)
    assert a.content[0].text == b.content[0].text
    n = client.messages.count_tokens(model=MODEL, system="You answer in one word.",
                                     messages=[{"role": "user", "content": Q}])
    # input_tokens are the prompt tokens computed; the ones taken from a slot's cache are
    # cache_read_input_tokens (b repeated a's prompt, so most of it was cached).
    for m in (a, b):
        u = m.usage
        assert n.input_tokens == u.input_tokens + u.cache_read_input_tokens, u
        assert u.cache_creation_input_tokens == 0, u
    assert b.usage.cache_read_input_tokens == n.input_tokens - 1, b.usage
    # The system message replaces the template's default: fewer or more tokens than without.
    plain = ask(max_tokens=1).usage
    assert client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": Q}]).input_tokens \
        == plain.input_tokens + plain.cache_read_input_tokens
    # Sampling fields are accepted; thinking is accepted (this model's template has no reasoning).
    for thinking in ({"type": "enabled", "budget_tokens": 1024}, {"type": "adaptive"}, {"type": "disabled"}):
        m = client.messages.create(model=MODEL, messages=[{"role": "user", "content": Q}], max_tokens=4,
                                   metadata={"user_id": "tester"}, thinking=thinking, cache_control={"type": "ephemeral"},
                                   output_config={"effort": "low"},
                                   **sampling(dict(temperature=0.7, top_p=0.9, top_k=20)))
        assert m.usage.output_tokens >= 1


@check
def prompt_cache_reported_in_usage():
    """A conversation resent with one more turn reads its earlier turns from the slot's cache:
    whole and streamed messages report them as cache_read_input_tokens."""
    turn1 = [{"role": "user", "content": "Name three colours of the rainbow, vkllm cache check."}]
    first = client.messages.create(model=MODEL, messages=turn1, max_tokens=8, **sampling({}))
    n1 = client.messages.count_tokens(model=MODEL, messages=turn1).input_tokens
    assert first.usage.input_tokens + first.usage.cache_read_input_tokens == n1
    turn2 = turn1 + [{"role": "assistant", "content": first.content[0].text},
                     {"role": "user", "content": "And two more?"}]
    n2 = client.messages.count_tokens(model=MODEL, messages=turn2).input_tokens
    with client.messages.stream(model=MODEL, messages=turn2, max_tokens=4, **sampling({})) as st:
        final = st.get_final_message()
    u = final.usage
    assert u.cache_read_input_tokens >= n1 - 1, (u, n1)
    assert u.input_tokens + u.cache_read_input_tokens == n2, (u, n2)


TOOLS = [{
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]


@check
def tool_use_round_trip():
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = client.messages.create(model=MODEL, messages=msgs, tools=TOOLS, max_tokens=40,
                               tool_choice={"type": "tool", "name": "get_weather"}, **sampling({}))
    assert m.stop_reason == "tool_use", m
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and uses[0].id.startswith("toolu_")
    assert uses[0].input == {"city": "Paris"}, uses[0].input
    # Streamed: a tool_use block with its input as JSON deltas.
    with client.messages.stream(model=MODEL, messages=msgs, tools=TOOLS, max_tokens=40,
                                tool_choice={"type": "any"}, **sampling({})) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [b.input for b in final.content if b.type == "tool_use"] == [{"city": "Paris"}]
    assert "input_json" in kinds or "content_block_delta" in kinds
    # The result goes back as a tool_result block; the model answers from it.
    result = json.dumps({"city": "Paris", "sky": "sunny", "temperature_c": 22})
    back = msgs + [
        {"role": "assistant", "content": m.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": result}]},
    ]
    a = client.messages.create(model=MODEL, messages=back, tools=TOOLS, max_tokens=30, **sampling({}))
    text = "".join(b.text for b in a.content if b.type == "text")
    print("    answer with the tool result:", repr(text))
    assert a.stop_reason in ("end_turn", "max_tokens") and ("sunny" in text or "22" in text), a


@check
def errors_have_the_anthropic_shape():
    if KEY:
        bad = anthropic.Anthropic(base_url=URL, api_key="wrong-key", max_retries=0)
        try:
            bad.messages.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2)
            raise AssertionError("expected 401")
        except anthropic.AuthenticationError as e:
            assert e.body["error"]["type"] == "authentication_error", e.body
    try:
        client.messages.create(model="claude-nope", messages=[{"role": "user", "content": "x"}], max_tokens=2)
        raise AssertionError("expected 404")
    except anthropic.NotFoundError as e:
        assert e.body["type"] == "error" and e.body["error"]["type"] == "not_found_error"
    for kw in [dict(extra_body={"temperature": 1.5}), dict(extra_body={"frobnicate": 1}),
               dict(output_config={"format": {"type": "json_schema", "schema": {"type": "nope"}}}),
               dict(messages=[{"role": "user", "content": "hello " * 3000}])]:
        args = dict(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2)
        args.update(kw)
        try:
            client.messages.create(**args)
            raise AssertionError(f"expected 400 for {list(kw)}")
        except anthropic.BadRequestError as e:
            assert e.body["error"]["type"] == "invalid_request_error", e.body
    s, body, _ = http("POST", "/v1/messages", {"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert s == 400 and "max_tokens" in body["error"]["message"], body
    s, body, _ = http("POST", "/v1/messages", raw=b"{")
    assert s == 400 and body["type"] == "error"


@check
def models_in_the_anthropic_shape():
    page = client.models.list()
    assert [m.id for m in page.data] == [MODEL]
    assert page.data[0].type == "model"


if __name__ == "__main__":
    main()
