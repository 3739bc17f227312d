"""Concurrency through the official clients: 16 streaming clients at once (each answer equal to
the same request made alone), and clients that disconnect mid-stream freeing their slots.
Run against a server with 4 slots and a queue of at least 16."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai

from harness import KEY, MODEL, URL, check, health, main, metric, wait_idle

client = openai.OpenAI(base_url=URL + "/v1", api_key=KEY or "none", max_retries=0, timeout=300)
PROMPTS = ["Name a color.", "Name an animal.", "What is 2+2?", "Say hello to Bob."]


def chat(content, **kw):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], temperature=0, **kw
    )


@check
def sixteen_streaming_clients_all_complete_correctly():
    wait_idle()
    alone = {p: chat(p, max_tokens=12).choices[0].message.content for p in PROMPTS}
    # One stream first: the client builds its chunk types lazily, which is not thread-safe.
    list(chat(PROMPTS[0], max_tokens=1, stream=True))
    peak = {"running": 0, "queued": 0}
    done = threading.Event()

    def watch():
        while not done.is_set():
            h = health()
            peak["running"] = max(peak["running"], h["running"])
            peak["queued"] = max(peak["queued"], h["queued"])
            time.sleep(0.05)

    def one(i):
        p = PROMPTS[i % len(PROMPTS)]
        text, finish = "", []
        for c in chat(p, max_tokens=12, stream=True):
            text += c.choices[0].delta.content or ""
            finish += [c.choices[0].finish_reason] if c.choices[0].finish_reason else []
        return p, text, finish

    w = threading.Thread(target=watch)
    w.start()
    t0 = time.time()
    try:
        with ThreadPoolExecutor(16) as ex:
            results = list(ex.map(one, range(16)))
    finally:
        done.set()
        w.join()
    print(f"    16 clients in {time.time() - t0:.1f} s; peak running {peak['running']}, queued {peak['queued']}")
    for p, text, finish in results:
        assert text == alone[p], (p, text, alone[p])
        assert len(finish) == 1 and finish[0] in ("stop", "length")
    # Every slot was used at once, and the rest waited in the queue.
    assert peak["running"] == 4 and peak["queued"] >= 1, peak


@check
def disconnecting_clients_free_their_slots():
    wait_idle()
    cancelled0 = metric("vkllm_sequences_finished_total", '{reason="cancelled"}')
    streams = [chat("Write a very long story about a dragon.", max_tokens=1000, stream=True) for _ in range(4)]
    # A fifth waits in the queue for a slot.
    queued = chat("Write a very long story about a cat.", max_tokens=1000, stream=True)
    for s in streams:
        it = iter(s)
        for _ in range(3):
            next(it)
    assert health()["running"] == 4 and health()["queued"] == 1
    t0 = time.time()
    for s in streams:
        s.close()
    # Running requests end at the next decode step; the queued one now takes a slot.
    while health()["running"] > 1 and time.time() - t0 < 5:
        time.sleep(0.02)
    freed = time.time() - t0
    print(f"    four slots freed {freed:.2f} s after the clients left")
    assert freed < 3, health()
    queued.close()
    took = wait_idle(12)
    print(f"    the queued-then-started one ended {took:.2f} s after its client left")
    assert metric("vkllm_sequences_finished_total", '{reason="cancelled"}') == cancelled0 + 5
    # The slots are back: a new request runs at once.
    t0 = time.time()
    r = chat("Say hello.", max_tokens=4)
    assert r.usage.completion_tokens >= 1 and time.time() - t0 < 10


if __name__ == "__main__":
    main()
