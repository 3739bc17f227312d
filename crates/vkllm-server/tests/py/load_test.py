"""Load test (by hand, not in CI): N streaming clients for a while against `vkllm serve`.

    python3 load_test.py --bin target/debug/vkllm [--clients 64] [--duration 120] [--device cpu]

starts the server itself (a queue as large as the client count, so any 429/503 is a failure),
runs every client in a loop of streaming chat requests through the official `openai` client
until the duration is over, lets the requests in flight finish, and prints throughput, latency
percentiles, failures and the server's resident memory before and after. `--url URL --pid PID`
uses a running server instead."""

import argparse
import random
import re
import subprocess
import sys
import threading
import time

import openai

PROMPTS = [
    "Name a color.", "Name an animal.", "What is 2+2?", "Say hello to Bob.", "Tell me a joke.",
    "What is the capital of France?", "Give me a word that rhymes with cat.", "Count to five.",
    "What is the opposite of hot?", "Name a fruit.", "Why is the sky blue?", "Say something kind.",
]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def start_server(args):
    cmd = [args.bin, "serve", "--model", args.model, "--device", args.device, "--port", "0",
           "--slots", str(args.slots), "--queue", str(max(args.clients, 1)), "--ctx", str(args.ctx),
           "--quiet"] + args.server_arg
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        sys.stderr.write(line)
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
    raise SystemExit("the server did not start")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="vkllm")
    ap.add_argument("--url")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=120)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra argument for `vkllm serve` (repeatable), e.g. --simple-generator")
    args = ap.parse_args()

    proc = None
    if args.url:
        url, pid = args.url, args.pid
    else:
        proc, url = start_server(args)
        pid = proc.pid
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=900)
    # Warm up (and build the client's chunk types once: that is not thread-safe).
    list(client.chat.completions.create(model=args.model, messages=[{"role": "user", "content": "Hi"}],
                                        max_tokens=2, stream=True))
    rss0 = rss_mib(pid) if pid else float("nan")

    lock = threading.Lock()
    ttft, gaps, e2e, failures = [], [], [], []
    done = {"requests": 0, "tokens": 0}
    t_start = time.time()
    t_end = t_start + args.duration

    def worker(i):
        rng = random.Random(i)
        while time.time() < t_end:
            t0 = time.time()
            first, last, n = None, None, 0
            my_gaps = []
            try:
                stream = client.chat.completions.create(
                    model=args.model, messages=[{"role": "user", "content": rng.choice(PROMPTS)}],
                    max_tokens=args.max_tokens, temperature=0.8, seed=rng.randrange(1 << 30), stream=True,
                    stream_options={"include_usage": True})
                finish = None
                usage = None
                for c in stream:
                    now = time.time()
                    if c.usage:
                        usage = c.usage
                    if not c.choices:
                        continue
                    if c.choices[0].delta.content:
                        if first is None:
                            first = now
                        else:
                            my_gaps.append(now - last)
                        last = now
                    finish = c.choices[0].finish_reason or finish
                assert finish in ("stop", "length"), finish
                assert usage is not None and usage.completion_tokens >= 1
                n = usage.completion_tokens
            except Exception as e:  # every error counts, 429/503 included
                with lock:
                    failures.append(f"{type(e).__name__}: {e}")
                continue
            with lock:
                done["requests"] += 1
                done["tokens"] += n
                e2e.append(time.time() - t0)
                if first is not None:
                    ttft.append(first - t0)
                gaps.extend(my_gaps)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t_start
    rss1 = rss_mib(pid) if pid else float("nan")

    print(f"clients {args.clients}, duration {args.duration:.0f} s (+ drain: {wall:.0f} s in all), "
          f"slots {args.slots}, device {args.device}, max_tokens {args.max_tokens}")
    print(f"requests completed {done['requests']}, failed {len(failures)}")
    print(f"generated tokens {done['tokens']}: {done['tokens'] / wall:.1f} tok/s, "
          f"{done['requests'] / wall:.2f} req/s")
    print(f"time to first token s: p50 {pct(ttft, 50):.2f} p90 {pct(ttft, 90):.2f} p99 {pct(ttft, 99):.2f}")
    print(f"gap between tokens s: p50 {pct(gaps, 50):.3f} p90 {pct(gaps, 90):.3f} p99 {pct(gaps, 99):.3f}")
    print(f"request s: p50 {pct(e2e, 50):.2f} p90 {pct(e2e, 90):.2f} max {max(e2e, default=float('nan')):.2f}")
    print(f"server RSS MiB: before {rss0:.1f}, after {rss1:.1f}")
    for f in failures[:10]:
        print("  failure:", f)
    if proc:
        proc.terminate()
        proc.wait(timeout=30)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
