#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (vkllm serve, llama-server): N concurrent workers
send non-streaming /v1/completions requests for a fixed time or count and report aggregate
completion tokens per second (usage.completion_tokens / wall time) and per-request decode speed.
Standard library only, so it runs on a bare GPU machine.

  loadgen.py --url http://127.0.0.1:8080 --concurrency 16 --requests 3 --max-tokens 128 \
      --temperature 0.8 --top-k 40 --top-p 0.95 --min-p 0.05
"""
import argparse
import json
import threading
import time
import urllib.request


def one(url, body):
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    return out["usage"]["completion_tokens"], time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", help="default: the first of GET /v1/models")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--requests", type=int, default=3, help="per worker")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--min-p", type=float, default=0.05)
    ap.add_argument("--prompt", default="Write a long story about a lighthouse keeper.")
    ap.add_argument("--label", default="")
    ap.add_argument("--json-schema", help="a JSON Schema file: every request asks for it "
                    "(response_format json_schema, structured outputs)")
    a = ap.parse_args()
    schema = None
    if a.json_schema:
        with open(a.json_schema) as f:
            schema = json.load(f)
    if not a.model:
        with urllib.request.urlopen(a.url + "/v1/models", timeout=60) as r:
            a.model = json.load(r)["data"][0]["id"]
    results = []
    lock = threading.Lock()

    def worker(w):
        for i in range(a.requests):
            body = {
                "model": a.model,
                "prompt": a.prompt,
                "max_tokens": a.max_tokens,
                "temperature": a.temperature,
                "top_k": a.top_k,
                "top_p": a.top_p,
                "min_p": a.min_p,
                "seed": 1000 * w + i,
            }
            if schema is not None:
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": "load", "schema": schema}}
            n, dt = one(a.url, body)
            with lock:
                results.append((n, dt))

    # One untimed request first (pipeline warm-up).
    one(a.url, {"model": a.model, "prompt": a.prompt, "max_tokens": 8})
    t0 = time.time()
    ts = [threading.Thread(target=worker, args=(w,)) for w in range(a.concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - t0
    toks = sum(n for n, _ in results)
    per = sorted(n / dt for n, dt in results if dt > 0)
    print(json.dumps({
        "label": a.label, "concurrency": a.concurrency, "requests": len(results),
        "completion_tokens": toks, "wall_s": round(wall, 3),
        "aggregate_tok_s": round(toks / wall, 1),
        "median_request_tok_s": round(per[len(per) // 2], 1) if per else None,
        "sampling": {"temperature": a.temperature, "top_k": a.top_k, "top_p": a.top_p,
                     "min_p": a.min_p},
        "json_schema": a.json_schema,
    }))


if __name__ == "__main__":
    main()
