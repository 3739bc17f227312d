#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (vkllm serve, llama-server): N concurrent workers
send /v1/completions requests and report, as one JSON line, aggregate completion tokens per
second (usage.completion_tokens / wall time), per-request decode speed, errors, and with
--stream the time to first token and the inter-token latency (p50 / p99, from the server-sent
chunks). Prompt and answer lengths can be a mix (comma-separated lists, taken round-robin per
request). Standard library only, so it runs on a bare GPU machine.

  loadgen.py --url http://127.0.0.1:8080 --concurrency 16 --requests 3 --max-tokens 128 \\
      --temperature 0.8 --top-k 40 --top-p 0.95 --min-p 0.05 [--stream] \\
      [--prompt-words 16,256,2000 --max-tokens 64,256]
  loadgen.py --spawn target/debug/vkllm --stream --check ...   # a CPU `vkllm serve` of a tiny
      synthetic model started (and stopped) here; --check fails on errors or missing figures
  loadgen.py --turns 20 --system-words 3000 --turn-words 150 --max-tokens 32 ...
      # agent-style conversations (the prefix cache): each turn resends the whole conversation
      # plus new words; per turn the prompt and cached tokens (usage.prompt_tokens_details) and
      # the time to first token, against the TTFT of a fresh prompt of one turn's size
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

WORDS = ("the lighthouse keeper watched the long grey sea while storms gathered over the "
         "northern cliffs and ships passed far from the rocks").split()


def prompt_of(words, base):
    """`base` (or, for a word count, that many words of a fixed text)."""
    if words is None:
        return base
    return " ".join(WORDS[i % len(WORDS)] for i in range(words))


def post(url, body):
    return urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )


def one(url, body):
    """A non-streaming request: (completion tokens, seconds, None, [])."""
    t0 = time.time()
    with urllib.request.urlopen(post(url, body), timeout=600) as r:
        out = json.load(r)
    return out["usage"]["completion_tokens"], time.time() - t0, None, []


def one_stream(url, body, details=None):
    """A streaming request: (completion tokens, seconds, time to first text, gaps between text
    chunks); `details` (a dict), when given, receives the final usage and the answer's text."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    answer = []
    t0 = time.time()
    first, last, gaps, chunks, tokens, usage = None, None, [], 0, None, None
    with urllib.request.urlopen(post(url, body), timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if "error" in ev:
                raise RuntimeError(ev["error"])
            if ev.get("usage"):
                usage = ev["usage"]
                tokens = usage["completion_tokens"]
            text = "".join(c.get("text") or "" for c in ev.get("choices", []))
            if text:
                answer.append(text)
                now = time.time()
                if first is None:
                    first = now - t0
                else:
                    gaps.append(now - last)
                last = now
                chunks += 1
    n = tokens if tokens is not None else chunks
    if details is not None:
        details.update(usage=usage or {}, text="".join(answer))
    return n, time.time() - t0, first, gaps


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return round(1e3 * xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))], 2)


def spawn(binary):
    """A CPU `vkllm serve` of a tiny synthetic model on a free port: (process, url)."""
    tmp = tempfile.mkdtemp(prefix="vkllm-loadgen-")
    model = os.path.join(tmp, "tiny.gguf")
    subprocess.run([binary, "synth", "--shape", "tiny-llama", "--seed", "1", "-o", model],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    srv = subprocess.Popen(
        [binary, "serve", "--model", model, "--device", "cpu", "--served-model-name", "m",
         "--port", "0", "--slots", "4", "--ctx", "1024", "--quiet"],
        stderr=subprocess.PIPE, text=True)
    for line in srv.stderr:
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
            return srv, m.group(1)
    sys.exit("vkllm serve did not start")


def run_workers(worker, n):
    """`worker(0)` ... `worker(n - 1)` on threads of their own; returns when all are done."""
    ts = [threading.Thread(target=worker, args=(w,)) for w in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--spawn", metavar="VKLLM", help="start `VKLLM serve` (CPU, tiny synthetic "
                    "model) for the run instead of using --url")
    ap.add_argument("--model", help="default: the first of GET /v1/models")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--requests", type=int, default=3, help="per worker")
    ap.add_argument("--max-tokens", type=ints, default=[128],
                    help="answer length(s), comma-separated: a mix taken round-robin")
    ap.add_argument("--prompt-words", type=ints, default=None,
                    help="prompt length(s) in words, comma-separated (default: --prompt)")
    ap.add_argument("--stream", action="store_true",
                    help="streaming requests: time to first token and inter-token latency")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--min-p", type=float, default=0.05)
    ap.add_argument("--prompt", default="Write a long story about a lighthouse keeper.")
    ap.add_argument("--label", default="")
    ap.add_argument("--json-schema", help="a JSON Schema file: every request asks for it "
                    "(response_format json_schema, structured outputs)")
    ap.add_argument("--check", action="store_true",
                    help="exit non-zero on any error or a missing figure (with --turns: also "
                    "when a later turn reuses nothing)")
    ap.add_argument("--turns", type=int, default=0,
                    help="agent-style conversations of this many turns (--concurrency of them, "
                    "--requests ignored), streaming; reports each turn's cached tokens and TTFT")
    ap.add_argument("--system-words", type=int, default=3000,
                    help="with --turns: the system prompt every conversation starts with")
    ap.add_argument("--turn-words", type=int, default=150,
                    help="with --turns: the words each turn adds (besides the answer)")
    a = ap.parse_args()
    srv = None
    if a.spawn:
        srv, a.url = spawn(a.spawn)
    try:
        report = conversations(a) if a.turns else run(a)
    finally:
        if srv is not None:
            srv.terminate()
            srv.wait(timeout=30)
    print(json.dumps(report))
    if a.check and a.turns:
        later = [t for c in report["conversations"] for t in c if t["turn"] > 1]
        bad = (report["errors"] > 0 or not later or report["baseline_ttft_ms"] is None
               or any(t["cached_tokens"] <= 0 or t["ttft_ms"] is None for t in later))
        if bad:
            sys.exit("loadgen --turns check failed")
    elif a.check:
        bad = report["errors"] > 0 or report["completion_tokens"] <= 0
        if a.stream:
            bad = bad or report["ttft_ms"]["p50"] is None or report["itl_ms"]["p50"] is None
        if bad:
            sys.exit("loadgen check failed")


def run(a):
    schema = None
    if a.json_schema:
        with open(a.json_schema) as f:
            schema = json.load(f)
    if not a.model:
        with urllib.request.urlopen(a.url + "/v1/models", timeout=60) as r:
            a.model = json.load(r)["data"][0]["id"]
    send = one_stream if a.stream else one
    results, errors = [], []
    lock = threading.Lock()
    words = a.prompt_words or [None]

    def worker(w):
        for i in range(a.requests):
            k = w * a.requests + i
            body = {
                "model": a.model,
                "prompt": prompt_of(words[k % len(words)], a.prompt),
                "max_tokens": a.max_tokens[k % len(a.max_tokens)],
                "temperature": a.temperature,
                "top_k": a.top_k,
                "top_p": a.top_p,
                "min_p": a.min_p,
                "seed": 1000 * w + i,
            }
            if schema is not None:
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": "load", "schema": schema}}
            try:
                r = send(a.url, body)
                with lock:
                    results.append(r)
            except Exception as e:  # counted and reported, the load goes on
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")

    # One untimed request first (pipeline warm-up).
    one(a.url, {"model": a.model, "prompt": a.prompt, "max_tokens": 8})
    t0 = time.time()
    run_workers(worker, a.concurrency)
    wall = time.time() - t0
    toks = sum(n for n, _, _, _ in results)
    per = sorted(n / dt for n, dt, _, _ in results if dt > 0)
    ttft = [f for _, _, f, _ in results if f is not None]
    itl = [g for _, _, _, gs in results for g in gs]
    report = {
        "label": a.label, "concurrency": a.concurrency, "requests": len(results),
        "completion_tokens": toks, "wall_s": round(wall, 3),
        "aggregate_tok_s": round(toks / wall, 1),
        "median_request_tok_s": round(per[len(per) // 2], 1) if per else None,
        "errors": len(errors), "error_samples": errors[:3],
        "stream": a.stream,
        "prompt_words": a.prompt_words, "max_tokens": a.max_tokens,
        "sampling": {"temperature": a.temperature, "top_k": a.top_k, "top_p": a.top_p,
                     "min_p": a.min_p},
        "json_schema": a.json_schema,
    }
    if a.stream:
        report["ttft_ms"] = {"p50": pct(ttft, 0.5), "p99": pct(ttft, 0.99)}
        report["itl_ms"] = {"p50": pct(itl, 0.5), "p99": pct(itl, 0.99)}
    return report


def words_at(n, salt):
    """`n` words of the fixed text, starting at a place chosen by `salt`, led by the salt
    itself so that two salts never share a prefix."""
    k = len(WORDS)
    return f"[{salt}] " + " ".join(WORDS[(i + 7 * salt) % k] for i in range(n))


def conversations(a):
    """--turns: each of --concurrency conversations starts with the same system prompt and
    resends the whole conversation each turn (earlier prompts, answers, then --turn-words new
    words), like an agent loop on a completions API. The baseline is the TTFT of fresh prompts
    framed as a turn (nothing to reuse; one-token answers), taken before the conversations.
    With --max-tokens 1 a turn adds only its words (a random-weight model's answers re-tokenize
    into many more tokens than were generated)."""
    if not a.model:
        with urllib.request.urlopen(a.url + "/v1/models", timeout=60) as r:
            a.model = json.load(r)["data"][0]["id"]
    sampling = {"temperature": a.temperature, "top_k": a.top_k, "top_p": a.top_p,
                "min_p": a.min_p}
    one(a.url, {"model": a.model, "prompt": a.prompt, "max_tokens": 8})
    base, base_tokens = [], []
    # Two untimed fresh prompts first (pipelines for the shape), then five timed; each framed
    # as a turn is, so that it is as long as what a later turn computes.
    for i in range(7):
        body = dict(sampling, model=a.model, max_tokens=1, seed=i,
                    prompt=f"User: {words_at(a.turn_words, 900_000 + i)}\nAssistant:")
        d = {}
        ttft = one_stream(a.url, body, d)[2]
        if i >= 2:
            base.append(ttft)
            base_tokens.append(d["usage"].get("prompt_tokens"))
    system = "System: " + words_at(a.system_words, 0) + "\n"
    lock = threading.Lock()
    convs, errors = [[] for _ in range(a.concurrency)], []

    def worker(w):
        prompt = system
        for t in range(1, a.turns + 1):
            prompt += f"User: {words_at(a.turn_words, 1000 * (w + 1) + t)}\nAssistant:"
            body = dict(sampling, model=a.model, prompt=prompt, seed=1000 * w + t,
                        max_tokens=a.max_tokens[(t - 1) % len(a.max_tokens)])
            d = {}
            try:
                n, dt, first, _ = one_stream(a.url, body, d)
            except Exception as e:  # counted and reported; this conversation stops
                why = e.read().decode(errors="replace")[:300] if hasattr(e, "read") else ""
                with lock:
                    errors.append(f"turn {t}: {type(e).__name__}: {e} {why}")
                return
            u = d["usage"]
            cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            convs[w].append({"turn": t, "prompt_tokens": u.get("prompt_tokens"),
                             "cached_tokens": cached, "completion_tokens": n,
                             "ttft_ms": None if first is None else round(1e3 * first, 2)})
            prompt += d["text"] + "\n"

    t0 = time.time()
    run_workers(worker, a.concurrency)
    later = [t for c in convs for t in c if t["turn"] > 1]
    prompt_sum = sum(t["prompt_tokens"] or 0 for t in later)
    ttfts = [t["ttft_ms"] / 1e3 for t in later if t["ttft_ms"] is not None]
    b50 = pct([b for b in base if b is not None], 0.5)
    return {
        "label": a.label, "turns": a.turns, "concurrency": a.concurrency,
        "system_words": a.system_words, "turn_words": a.turn_words,
        "max_tokens": a.max_tokens, "sampling": sampling, "wall_s": round(time.time() - t0, 3),
        "baseline_ttft_ms": b50,
        "baseline_prompt_tokens": base_tokens,
        "later_turns": {
            "hit_rate": round(sum(t["cached_tokens"] for t in later) / prompt_sum, 4)
            if prompt_sum else None,
            "computed_tokens_p50": sorted(
                (t["prompt_tokens"] or 0) - t["cached_tokens"] for t in later
            )[len(later) // 2] if later else None,
            "ttft_ms": {"p50": pct(ttfts, 0.5), "p99": pct(ttfts, 0.99)},
            "ttft_over_baseline_p50": round(pct(ttfts, 0.5) / b50, 3)
            if ttfts and b50 else None,
        },
        "errors": len(errors), "error_samples": errors[:3],
        "conversations": convs,
    }


if __name__ == "__main__":
    main()
