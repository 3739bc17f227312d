#!/usr/bin/env python3
"""How long a long prompt stalls the streams already generating (chunked prefill, vkllm serve
--prefill-chunk; llama-server's batching): N workers stream /v1/completions; after --delay
seconds one more request arrives with a prompt of about --long-words words. Reports the gaps
between the streams' chunks before it arrived and while it was prefilled (until its answer),
and its own time to answer. Standard library only, so it runs on a bare GPU machine.

  stall.py --url http://127.0.0.1:8080 --streams 15 --max-tokens 512 --long-words 6000
"""
import argparse
import json
import threading
import time
import urllib.error
import urllib.request


def post(url, body):
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        return urllib.request.urlopen(req, timeout=1200)
    except urllib.error.HTTPError as e:
        raise SystemExit(f"HTTP {e.code}: {e.read().decode(errors='replace')}")


def gaps(times, lo, hi):
    """Gaps between consecutive chunk times that overlap [lo, hi) (a stall that ends after the
    long request was answered counts)."""
    return [b - a for a, b in zip(times, times[1:]) if a < hi and b > lo]


def pct(v, q):
    if not v:
        return None
    v = sorted(v)
    return round(1e3 * v[min(len(v) - 1, int(q * len(v)))], 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", help="default: the first of GET /v1/models")
    ap.add_argument("--streams", type=int, default=15)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--delay", type=float, default=3.0)
    ap.add_argument("--long-words", type=int, default=6000)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    if not a.model:
        with urllib.request.urlopen(a.url + "/v1/models", timeout=60) as r:
            a.model = json.load(r)["data"][0]["id"]
    times = [[] for _ in range(a.streams)]

    def stream(i):
        body = {"model": a.model, "prompt": f"Story {i}: once upon a time",
                "max_tokens": a.max_tokens, "temperature": 0.8, "seed": i, "stream": True}
        with post(a.url, body) as r:
            for line in r:
                line = line.strip()
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    times[i].append(time.time())

    ts = [threading.Thread(target=stream, args=(i,)) for i in range(a.streams)]
    for t in ts:
        t.start()
    time.sleep(a.delay)
    words = " ".join(f"w{k % 97}" for k in range(a.long_words))
    t_long = time.time()
    with post(a.url, {"model": a.model, "prompt": words, "max_tokens": 1}) as r:
        usage = json.load(r).get("usage", {})
    t_done = time.time()
    for t in ts:
        t.join()
    unfinished = sum(1 for tt in times if not tt or tt[-1] < t_done)
    before = [g for tt in times for g in gaps(tt, 0, t_long)]
    during = [g for tt in times for g in gaps(tt, t_long, t_done)]
    print(json.dumps({
        "label": a.label, "streams": a.streams,
        "long_prompt_tokens": usage.get("prompt_tokens"),
        "long_answer_s": round(t_done - t_long, 3),
        "gap_ms_before": {"p50": pct(before, 0.5), "p99": pct(before, 0.99),
                          "max": pct(before, 1.0)},
        "gap_ms_during": {"p50": pct(during, 0.5), "p99": pct(during, 0.99),
                          "max": pct(during, 1.0)},
        "chunks": sum(len(t) for t in times),
        "streams_done_before_the_answer": unfinished,
    }))


if __name__ == "__main__":
    main()
