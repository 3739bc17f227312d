"""Shared helpers for the server tests: the server's address and key come from the
environment the Rust test sets (VKLLM_URL, VKLLM_KEY, VKLLM_BIN); each check is a function
registered with @check, run in order by main(); any failure makes the exit status 1."""

import json
import os
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request

URL = os.environ.get("VKLLM_URL", "http://127.0.0.1:8080")
KEY = os.environ.get("VKLLM_KEY", "")
BIN = os.environ.get("VKLLM_BIN", "vkllm")
MODEL = os.environ.get("VKLLM_MODEL_ID", "smollm2")

_checks = []


def check(fn):
    _checks.append(fn)
    return fn


def main():
    only = sys.argv[1:]
    failed = ran = 0
    for fn in _checks:
        if only and fn.__name__ not in only:
            continue
        ran += 1
        t0 = time.time()
        try:
            fn()
            print(f"ok   {fn.__name__} ({time.time() - t0:.1f} s)", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__} ({time.time() - t0:.1f} s)", flush=True)
            traceback.print_exc()
    print(f"{ran - failed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


def http(method, path, body=None, headers=None, key=KEY, raw=None):
    """A raw request: (status, parsed JSON body or text, response headers)."""
    h = {"content-type": "application/json"}
    if key:
        h["authorization"] = f"Bearer {key}"
    h.update(headers or {})
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(URL + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, text, hdrs = r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        status, text, hdrs = e.code, e.read().decode(), e.headers
    try:
        return status, json.loads(text), hdrs
    except ValueError:
        return status, text, hdrs


def health():
    return http("GET", "/health")[1]


def wait_idle(timeout=10.0):
    """Waits until no request is running or queued; returns the seconds it took."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        h = health()
        if h["running"] == 0 and h["queued"] == 0:
            return time.time() - t0
        time.sleep(0.05)
    raise AssertionError(f"server not idle after {timeout} s: {health()}")


def cli(*args):
    """Runs the vkllm binary; returns its stdout."""
    out = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def token_id(text):
    """The single token id of `text` under the served model's tokenizer."""
    ids = json.loads(cli("tokenize", "--model", "smollm2", "--no-special", text))
    assert len(ids) == 1, (text, ids)
    return ids[0]


def metric(name, labels=""):
    """The value of one metric line in /metrics (0 when absent)."""
    _, text, _ = http("GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(name + labels + " ") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
