#!/usr/bin/env python3
"""Reliability suite for `vkllm serve` (issue #34 item 7), short enough for CI: starts the
server on the CPU backend (`--device` for another) with a tiny synthetic model and short limits, then

  slow-loris     clients that send half a request are dropped after --header-timeout, and
                 /health answers while they hang on;
  idle           connections past --max-connections are answered 503 (JSON) and closed;
  huge prompts   concurrent multi-megabyte prompts get a 4xx with the API's error JSON while
                 /health keeps answering; none is a 5xx, the server lives on, and the memory
                 their preparation took is given back;
  disconnects    streaming clients that vanish after their first chunk free their slots;
  soak           clients sending ordinary requests for --soak seconds: no failed request, and
                 resident memory after the soak within 10% of after the warm-up.

Liveness is checked with generous time-outs; latencies are printed, not asserted. Exit status 0
when every check passes. Standard library only.

  scripts/reliability.py --bin target/debug/vkllm [--soak 20]
"""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def request(port, method, path, body=None, timeout=30):
    """(status, parsed JSON or text, seconds)."""
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    c.request(method, path, body=data, headers=headers)
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = raw.decode(errors="replace")
    return r.status, payload, time.time() - t0


def health(port, timeout=10):
    try:
        s, _, dt = request(port, "GET", "/health", timeout=timeout)
        return s == 200, dt
    except OSError:
        return False, None


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
    return int(m.group(1)) if m else 0


def completion(port, prompt, max_tokens=16, seed=0):
    return request(port, "POST", "/v1/completions",
                   {"model": "m", "prompt": prompt, "max_tokens": max_tokens,
                    "temperature": 0.7, "seed": seed}, timeout=120)


def slow_loris(port, header_timeout):
    socks = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(s)
    ok, dt = health(port)
    check(ok, f"slow-loris: /health answers with 20 half-sent requests open ({dt and dt * 1e3:.1f} ms)")
    time.sleep(header_timeout + 2)
    closed = 0
    for s in socks:
        s.settimeout(5)
        try:
            data = s.recv(4096)
            # Closed, or answered with an error status and then closed.
            closed += data == b"" or data.startswith(b"HTTP/1.1 4")
        except OSError:
            closed += 1
        s.close()
    check(closed == len(socks), f"slow-loris: {closed}/{len(socks)} dropped after the header timeout")


def idle(port, max_conn):
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(max_conn)]
    time.sleep(0.5)
    extra = socket.create_connection(("127.0.0.1", port))
    extra.settimeout(10)
    head = b""
    try:
        while b"\r\n\r\n" not in head:
            chunk = extra.recv(4096)
            if not chunk:
                break
            head += chunk
        head += extra.recv(4096)
    except OSError:
        pass
    extra.close()
    text = head.decode(errors="replace")
    body = text.split("\r\n\r\n", 1)[1] if "\r\n\r\n" in text else ""
    check(text.startswith("HTTP/1.1 503") and '"error"' in body,
          f"idle: connection {max_conn + 1} answered 503 with an error JSON")
    for s in socks:
        s.close()
    time.sleep(0.5)
    ok, _ = health(port)
    check(ok, "idle: /health answers once the idle connections are gone")


def huge_prompts(port, pid):
    big = "lighthouse keeper " * 200_000  # 3.6 MB of text
    results = []
    before = rss_kb(pid)

    def one(i):
        try:
            s, payload, dt = request(port, "POST", "/v1/completions",
                                     {"model": "m", "prompt": big, "max_tokens": 4}, timeout=300)
            results.append((s, payload))
        except OSError as e:
            results.append((0, str(e)))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    time.sleep(0.2)
    lat = []
    while any(t.is_alive() for t in ts):
        ok, dt = health(port, timeout=30)
        lat.append(dt if ok else None)
        time.sleep(0.05)
    for t in ts:
        t.join()
    check(all(v is not None for v in lat),
          f"huge prompts: /health answered {len(lat)} times during them "
          f"(max {max((v for v in lat if v), default=0) * 1e3:.1f} ms)")
    statuses = [s for s, _ in results]
    check(all(400 <= s < 500 for s in statuses) and
          all(isinstance(p, dict) and "error" in p for _, p in results),
          f"huge prompts: each answered 4xx with an error JSON ({statuses})")
    # Preparing them allocates hundreds of MB; it must be given back (at most 10x the bodies
    # stay resident).
    after = rss_kb(pid)
    bodies_kb = 3 * len(big) // 1024
    check(after - before < 10 * bodies_kb,
          f"huge prompts: resident memory {before} kB before, {after} kB after "
          f"(bodies {bodies_kb} kB)")


def disconnects(port):
    for i in range(12):
        s = socket.create_connection(("127.0.0.1", port))
        body = json.dumps({"model": "m", "prompt": f"tell me a story {i}", "max_tokens": 400,
                           "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        s.settimeout(30)
        try:
            s.recv(1024)
        except OSError:
            pass
        s.close()
    freed = False
    for _ in range(120):
        s, payload, _ = request(port, "GET", "/health")
        if s == 200 and payload.get("running") == 0 and payload.get("queued") == 0:
            freed = True
            break
        time.sleep(0.5)
    check(freed, "disconnects: every slot is free again after 12 dropped streams")
    s, payload, _ = completion(port, "after the storm", 8)
    check(s == 200 and payload["usage"]["completion_tokens"] > 0,
          "disconnects: an ordinary request is served afterwards")


def soak(port, pid, seconds, clients):
    failures = []
    done = threading.Event()
    counts = [0] * clients

    def client(i):
        k = 0
        while not done.is_set():
            try:
                s, payload, _ = completion(port, f"client {i} request {k}: " + "word " * (k % 50),
                                           max_tokens=8 + k % 24, seed=k)
                if s != 200:
                    failures.append((s, payload))
            except OSError as e:
                failures.append((0, str(e)))
            k += 1
            counts[i] += 1

    # Warm-up: every client concurrently for a fifth of the soak (the server's thread arenas
    # and buffers reach their working size), then the reference resident size.
    warm = threading.Event()

    def warm_client(i):
        k = 0
        while not warm.is_set():
            completion(port, f"warm-up {i} {k} " + "word " * (k % 50), 8 + k % 24, seed=k)
            k += 1

    ws = [threading.Thread(target=warm_client, args=(i,)) for i in range(clients)]
    for t in ws:
        t.start()
    time.sleep(max(seconds / 5, 2))
    warm.set()
    for t in ws:
        t.join()
    base = rss_kb(pid)
    ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in ts:
        t.start()
    time.sleep(seconds)
    done.set()
    for t in ts:
        t.join()
    after = rss_kb(pid)
    check(not failures, f"soak: {sum(counts)} requests from {clients} clients, "
          f"{len(failures)} failed {failures[:2]}")
    check(after <= base * 1.10,
          f"soak: resident memory {base} kB after warm-up, {after} kB after the soak "
          f"({100.0 * (after - base) / max(base, 1):+.1f}%)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/debug/vkllm")
    ap.add_argument("--soak", type=float, default=20.0, help="seconds")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--device", default="cpu",
                    help="the server's --device (cpu in CI; 0 for the first Vulkan device)")
    a = ap.parse_args()
    header_timeout, max_conn = 2, 48
    tmp = tempfile.mkdtemp(prefix="vkllm-reliability-")
    model = os.path.join(tmp, "tiny.gguf")
    subprocess.run([a.bin, "synth", "--shape", "tiny-llama", "--seed", "1", "-o", model],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    srv = subprocess.Popen(
        [a.bin, "serve", "--model", model, "--device", a.device, "--served-model-name", "m",
         "--port", "0", "--slots", "4", "--ctx", "512", "--quiet",
         "--header-timeout", str(header_timeout), "--body-timeout", "5",
         "--max-connections", str(max_conn), "--max-body-bytes", str(8 << 20)],
        stderr=subprocess.PIPE, text=True)
    port = None
    for line in srv.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("vkllm serve did not start")
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
    try:
        slow_loris(port, header_timeout)
        idle(port, max_conn)
        huge_prompts(port, srv.pid)
        disconnects(port)
        soak(port, srv.pid, a.soak, a.clients)
        check(srv.poll() is None, "the server is still running")
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    if FAILS:
        sys.exit(f"{len(FAILS)} reliability check(s) failed")
    print("all reliability checks pass")


if __name__ == "__main__":
    main()
