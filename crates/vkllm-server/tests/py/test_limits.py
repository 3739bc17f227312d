"""Limits, against a server with one slot, a queue of one and a 3-second time limit: a full
queue is answered 429 in each API's shape, and a request past the time limit ends with 504 (or
an error event in a stream), after which the slot serves again."""

import time

import anthropic
import openai

from harness import KEY, MODEL, URL, check, health, http, main, wait_idle

client = openai.OpenAI(base_url=URL + "/v1", api_key=KEY or "none", max_retries=0, timeout=60)
aclient = anthropic.Anthropic(base_url=URL, api_key=KEY or "none", max_retries=0, timeout=60)
LONG = "Write a very long story about a dragon."


def chat(content, **kw):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], temperature=0, **kw
    )


@check
def a_full_queue_is_429():
    wait_idle()
    running = chat(LONG, max_tokens=1000, stream=True)
    waiting = chat(LONG, max_tokens=1000, stream=True)
    h = health()
    assert (h["running"], h["queued"]) == (1, 1), h
    try:
        chat("Hi", max_tokens=2)
        raise AssertionError("expected 429")
    except openai.RateLimitError as e:
        assert e.status_code == 429 and e.body["code"] == "queue_full", e.body
        assert e.response.headers["retry-after"] == "1"
    try:
        aclient.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
        raise AssertionError("expected 429")
    except anthropic.RateLimitError as e:
        assert e.body["error"]["type"] == "rate_limit_error", e.body
    running.close()
    waiting.close()
    wait_idle(12)


@check
def the_time_limit_ends_requests_and_the_slot_comes_back():
    wait_idle(12)
    t0 = time.time()
    try:
        chat(LONG, max_tokens=1000)
        raise AssertionError("expected 504")
    except openai.APIStatusError as e:
        took = time.time() - t0
        assert e.status_code == 504 and e.body["type"] == "timeout_error", e.body
    print(f"    504 after {took:.1f} s")
    assert 2.9 < took < 6, took
    # Streamed: text first, then an error event.
    t0 = time.time()
    got = ""
    try:
        for c in chat(LONG, max_tokens=1000, stream=True):
            got += c.choices[0].delta.content or ""
        raise AssertionError("expected an error event")
    except openai.APIError as e:
        assert "time limit" in str(e.message), e
    assert got and 2.9 < time.time() - t0 < 6
    wait_idle()
    r = chat("Say hello.", max_tokens=3)
    assert r.usage.completion_tokens >= 1
    assert health()["running"] == 0


@check
def cors_only_when_enabled():
    # This server runs with --cors https://app.example (the others without: no headers there).
    s, _, h = http("OPTIONS", "/v1/chat/completions", key="",
                   headers={"origin": "https://app.example", "access-control-request-method": "POST"})
    assert s == 204 and h["access-control-allow-origin"] == "https://app.example", (s, dict(h))
    assert "authorization" in h["access-control-allow-headers"]
    s, _, h = http("GET", "/v1/models", headers={"origin": "https://app.example"})
    assert s == 200 and h["access-control-allow-origin"] == "https://app.example"


if __name__ == "__main__":
    main()
