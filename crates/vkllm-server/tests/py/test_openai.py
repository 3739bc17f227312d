"""The OpenAI API of `vkllm serve` through the official `openai` client. Greedy answers are
compared with `vkllm run` (the same model and template through the CLI's Session), streams
with whole responses, seeded samples with each other."""

import json
import math
import time

import openai

from harness import KEY, MODEL, URL, check, cli, http, main, metric, token_id, wait_idle

client = openai.OpenAI(base_url=URL + "/v1", api_key=KEY or "none", max_retries=0, timeout=120)
Q = "What is the capital of France?"


def chat(content=Q, **kw):
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], **kw
    )


@check
def models_list_and_retrieve():
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL], ids
    m = client.models.retrieve(MODEL)
    assert (m.id, m.object, m.owned_by) == (MODEL, "model", "vkllm")
    try:
        client.models.retrieve("no-such-model")
        raise AssertionError("expected 404")
    except openai.NotFoundError as e:
        assert e.body["code"] == "model_not_found", e.body


@check
def chat_greedy_equals_the_cli():
    r = chat(max_tokens=20)
    want = cli("run", "--model", "smollm2", "--device", "cpu", "--temperature", "0",
               "--max-tokens", "20", Q)
    c = r.choices[0]
    assert c.message.content == want[:-1], (c.message.content, want)
    assert c.message.role == "assistant" and c.message.tool_calls is None
    assert "Paris" in c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.id.startswith("chatcmpl-") and r.object == "chat.completion"
    assert abs(r.created - time.time()) < 600, r.created
    assert r.model == MODEL and r.system_fingerprint.startswith("fp_vkllm_")
    u = r.usage
    assert u.prompt_tokens > 10 and 0 < u.completion_tokens <= 20
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens


@check
def chat_stream_equals_whole_and_reports_usage():
    whole = chat(max_tokens=16)
    chunks = list(chat(max_tokens=16, stream=True, stream_options={"include_usage": True}))
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content, (text, whole)
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    # The usage chunk comes last, with no choices; the others carry usage null.
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    # Without include_usage there is no usage chunk.
    plain = list(chat(max_tokens=4, stream=True))
    assert all(c.usage is None for c in plain) and plain[-1].choices


@check
def completions_raw_prompt():
    prompt = "The capital of France is"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0)
    want = cli("run", "--model", "smollm2", "--device", "cpu", "--raw", "--temperature", "0",
               "--max-tokens", "8", prompt)
    assert r.choices[0].text == want[:-1], (r.choices[0].text, want)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.usage.completion_tokens == 8 and r.choices[0].finish_reason == "length"
    s = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0,
                                       stream=True))
    assert "".join(c.choices[0].text for c in s) == r.choices[0].text
    e = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0, echo=True)
    assert e.choices[0].text == prompt + r.choices[0].text
    # The default max_tokens is 16 (the OpenAI default).
    d = client.completions.create(model=MODEL, prompt="Once upon a time", temperature=0)
    assert d.usage.completion_tokens <= 16


@check
def max_tokens_and_max_completion_tokens():
    r = chat("Write a long story about a dragon.", max_tokens=3)
    assert (r.usage.completion_tokens, r.choices[0].finish_reason) == (3, "length")
    r = chat("Write a long story about a dragon.", max_completion_tokens=5)
    assert (r.usage.completion_tokens, r.choices[0].finish_reason) == (5, "length")


@check
def stop_strings_cut_the_text():
    full = chat("Write a long story about a dragon.", max_tokens=30, logprobs=True)
    text = full.choices[0].message.content
    toks = [t.token for t in full.choices[0].logprobs.content]
    assert "".join(toks) == text
    # A stop string spanning the boundary between tokens 5 and 6.
    cut = len("".join(toks[:6]))
    stop = text[cut - 2: cut + 2]
    want = text[: text.index(stop)]
    for stream in (False, True):
        if stream:
            chunks = chat("Write a long story about a dragon.", max_tokens=30, stop=[stop, "zzzz"],
                          stream=True)
            got, reasons = "", []
            for c in chunks:
                got += c.choices[0].delta.content or ""
                reasons += [c.choices[0].finish_reason] if c.choices[0].finish_reason else []
            assert (got, reasons) == (want, ["stop"]), (got, want, stop)
        else:
            r = chat("Write a long story about a dragon.", max_tokens=30, stop=stop)
            assert r.choices[0].message.content == want, (r.choices[0].message.content, want)
            assert r.choices[0].finish_reason == "stop"
    p = "The capital of France is"
    base = client.completions.create(model=MODEL, prompt=p, max_tokens=8, temperature=0).choices[0].text
    word = base.split()[1]
    r = client.completions.create(model=MODEL, prompt=p, max_tokens=8, temperature=0, stop=[word])
    assert r.choices[0].text == base[: base.index(word)] and r.choices[0].finish_reason == "stop"


@check
def seeds_reproduce_and_n_runs_a_batch():
    kw = dict(temperature=1.0, max_tokens=16)
    ra = chat("Tell me a joke.", seed=1234, **kw)
    a = ra.choices[0].message.content
    b = chat("Tell me a joke.", seed=1234, **kw).choices[0].message.content
    assert a == b, (a, b)
    others = {chat("Tell me a joke.", seed=s, **kw).choices[0].message.content for s in (1, 2)}
    assert others - {a}, "other seeds give other samples"
    # n=2: choice i is sampled with seed + i, as a single request with that seed would be.
    r = chat("Tell me a joke.", seed=1234, n=2, **kw)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].message.content == a
    r1 = chat("Tell me a joke.", seed=1235, **kw)
    c1 = r1.choices[0].message.content
    assert r.choices[1].message.content == c1
    assert r.usage.completion_tokens == ra.usage.completion_tokens + r1.usage.completion_tokens
    assert r.usage.prompt_tokens == ra.usage.prompt_tokens
    # n=2 streamed: both indexes appear, each ends once.
    chunks = list(chat("Tell me a joke.", seed=1234, n=2, stream=True, **kw))
    texts = {0: "", 1: ""}
    ends = []
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                ends.append(ch.index)
    assert texts == {0: a, 1: c1} and sorted(ends) == [0, 1]


@check
def logprobs_are_consistent():
    r = chat(max_tokens=8, logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    assert "".join(t.token for t in lp) == r.choices[0].message.content
    for t in lp:
        assert len(t.top_logprobs) == 3
        tops = [x.logprob for x in t.top_logprobs]
        assert tops == sorted(tops, reverse=True) and all(x <= 0 for x in tops)
        assert sum(math.exp(x) for x in tops) <= 1.0 + 1e-5
        # Greedy: the chosen token is the most likely one.
        assert (t.token, t.logprob) == (t.top_logprobs[0].token, t.top_logprobs[0].logprob)
        assert bytes(t.bytes) == t.token.encode()
    r = chat(max_tokens=4, logprobs=True)
    assert all(t.top_logprobs == [] for t in r.choices[0].logprobs.content)
    assert chat(max_tokens=2).choices[0].logprobs is None
    # Legacy completions logprobs.
    c = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=5, temperature=0, logprobs=2)
    l = c.choices[0].logprobs
    assert "".join(l.tokens) == c.choices[0].text and len(l.token_logprobs) == 5
    assert all(len(t) <= 2 for t in l.top_logprobs)
    assert l.text_offset == [sum(len(t) for t in l.tokens[:i]) for i in range(5)]
    # In a stream, every token's logprob arrives.
    s = list(chat(max_tokens=6, logprobs=True, stream=True))
    n = sum(len(c.choices[0].logprobs.content) for c in s if c.choices and c.choices[0].logprobs)
    assert n == 6


@check
def penalties_and_logit_bias():
    hello = token_id("Hello")
    r = chat("Say one word.", max_tokens=3, logit_bias={str(hello): 100})
    assert r.choices[0].message.content.startswith("Hello"), r.choices[0].message.content
    first = chat(max_tokens=1).choices[0].message.content
    banned = token_id(first)
    r = chat(max_tokens=1, logit_bias={str(banned): -100})
    assert r.choices[0].message.content != first
    # Penalties spread the tokens: the most repeated token of a greedy continuation repeats less.
    def most_repeated(**kw):
        r = client.completions.create(model=MODEL, prompt="cat cat cat cat cat cat cat cat", max_tokens=16,
                                      temperature=0, logprobs=0, **kw)
        toks = r.choices[0].logprobs.tokens
        return max(toks.count(t) for t in toks)

    plain = most_repeated()
    assert plain >= 3, plain
    assert most_repeated(frequency_penalty=2.0) < plain
    assert most_repeated(presence_penalty=2.0) < plain
    # Extensions: top_k, min_p, repetition_penalty are accepted; user is accepted.
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": Q}], max_tokens=4, user="tester",
        extra_body={"top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1}, seed=3, temperature=0.7)
    assert r.usage.completion_tokens >= 1


TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]


@check
def tool_calls_round_trip():
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("required", named):
        r = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice=choice,
                                           temperature=0, max_tokens=40)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert c.message.content is None and len(c.message.tool_calls) == 1
        call = c.message.tool_calls[0]
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"}, call.function.arguments
    # Streamed: the call arrives as a tool_calls delta.
    chunks = list(client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice=named,
                                                 temperature=0, max_tokens=40, stream=True))
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(deltas) == 1 and deltas[0].index == 0 and deltas[0].function.name == "get_weather"
    assert json.loads(deltas[0].function.arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # The result goes back; the model answers from it.
    result = json.dumps({"city": "Paris", "sky": "sunny", "temperature_c": 22})
    back = msgs + [r.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": result}]
    r2 = client.chat.completions.create(model=MODEL, messages=back, tools=TOOLS, temperature=0, max_tokens=30)
    assert r2.choices[0].finish_reason in ("stop", "length") and r2.choices[0].message.tool_calls is None
    answer = r2.choices[0].message.content
    print("    answer with the tool result:", repr(answer))
    assert "sunny" in answer or "22" in answer, answer
    # tool_choice none: plain text, no calls.
    r3 = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice="none",
                                        temperature=0, max_tokens=10)
    assert r3.choices[0].message.tool_calls is None and r3.choices[0].finish_reason != "tool_calls"


@check
def errors_have_the_openai_shape():
    s, body, _ = http("POST", "/v1/chat/completions", raw=b"{not json")
    assert s == 400 and body["error"]["type"] == "invalid_request_error" and body["error"]["code"] == "invalid_json"
    try:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        raise AssertionError("expected 404")
    except openai.NotFoundError as e:
        assert e.body["code"] == "model_not_found" and e.body["param"] == "model"
    long_prompt = "hello " * 3000
    try:
        chat(long_prompt, max_tokens=4)
        raise AssertionError("expected 400")
    except openai.BadRequestError as e:
        assert e.body["code"] == "context_length_exceeded", e.body
    if KEY:
        c = openai.OpenAI(base_url=URL + "/v1", api_key="wrong-key", max_retries=0)
        try:
            c.models.list()
            raise AssertionError("expected 401")
        except openai.AuthenticationError as e:
            assert e.status_code == 401 and e.body["code"] == "invalid_api_key"
        s, body, _ = http("GET", "/v1/models", key="")
        assert s == 401 and body["error"]["type"] == "authentication_error", (s, body)
        s, body, _ = http("GET", "/v1/models", key="", headers={"x-api-key": KEY})
        assert s == 200, (s, body)
    for kw, param in [
        (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}),
         "response_format"),
        (dict(temperature=5), "temperature"),
        (dict(top_logprobs=2), "top_logprobs"),
        (dict(extra_body={"frobnicate": 1}), "frobnicate"),
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
    ]:
        try:
            chat(max_tokens=2, **kw)
            raise AssertionError(f"expected 400 for {kw}")
        except openai.BadRequestError as e:
            assert e.body["param"] == param, (kw, e.body)
    s, body, _ = http("POST", "/v1/chat/completions", raw=b"x" * (5 << 20))
    assert s == 413 and body["error"]["type"] == "invalid_request_error", (s, body)
    s, body, _ = http("GET", "/v1/nothing")
    assert s == 404 and "error" in body
    # CORS is off unless --cors: no headers, and preflights are not answered.
    s, _, h = http("GET", "/v1/models", headers={"origin": "https://evil.example"})
    assert s == 200 and "access-control-allow-origin" not in h
    s, _, h = http("OPTIONS", "/v1/chat/completions", key="", headers={"origin": "https://evil.example"})
    assert s in (401, 405) and "access-control-allow-origin" not in h, s


@check
def prompt_cache_reported_in_usage():
    """The same prompt sent again is read from the slot that holds it: usage reports the cached
    tokens (every prompt token but the last, whose logits are recomputed), whole and streamed,
    and the Prometheus counters count them."""
    wait_idle()
    hits0, queries0 = metric("vkllm_prefix_cache_hit_tokens_total"), metric("vkllm_prefix_cache_queries_tokens_total")
    content = "Spell the word cache backwards, then forwards. (prompt cache check)"
    first = chat(content, max_tokens=4)
    again = chat(content, max_tokens=4)
    p = again.usage.prompt_tokens
    assert again.usage.prompt_tokens_details.cached_tokens == p - 1, again.usage
    assert first.usage.prompt_tokens_details.cached_tokens < p - 1, first.usage
    chunks = list(chat(content, max_tokens=4, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == p - 1, chunks[-1].usage
    wait_idle()
    hits = metric("vkllm_prefix_cache_hit_tokens_total") - hits0
    queries = metric("vkllm_prefix_cache_queries_tokens_total") - queries0
    assert queries == 3 * p, (queries, p)
    assert hits == first.usage.prompt_tokens_details.cached_tokens + 2 * (p - 1), (hits, p)


@check
def health_and_metrics():
    wait_idle()
    s, h, _ = http("GET", "/health", key="")
    assert s == 200 and h["status"] == "ok" and h["model"] == MODEL
    s, text, hdrs = http("GET", "/metrics")
    assert s == 200 and hdrs["content-type"].startswith("text/plain")
    for name in ("vkllm_requests_queued", "vkllm_kv_usage_ratio", "vkllm_time_to_first_token_seconds_bucket",
                 "vkllm_time_per_output_token_seconds_count", "vkllm_generated_tokens_total"):
        assert name in text, name
    assert metric("vkllm_generated_tokens_total") > 50
    assert metric("vkllm_http_requests_total", '{endpoint="/v1/chat/completions",status="200"}') > 10
    assert metric("vkllm_requests_running") == 0


if __name__ == "__main__":
    main()
