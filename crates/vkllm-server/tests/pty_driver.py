#!/usr/bin/env python3
"""Drives a program through a real pseudo-terminal, as a person at a terminal would.

    pty_driver.py SCRIPT.json -- PROGRAM ARGS...

SCRIPT.json is a list of steps:
    {"send": "text"}                      write the text to the terminal (\\r is Enter, \\x03 Ctrl-C)
    {"expect": "regex", "timeout": 60}    wait until the output since the last match matches
    {"eof": true, "timeout": 30}          wait for the program to end

The output is cleaned before matching: ANSI escape sequences and carriage returns are removed.
Prints one JSON object: {"segments": [...], "status": exit status or null, "error": ...}, where
segment i is the cleaned output from the end of the previous match to the end of expect i.
Exits 0 when every step passed, 1 otherwise (the JSON then says which step failed, with the
whole transcript).
"""

import json
import os
import pty
import re
import select
import sys
import time

ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*(\x07|\x1b\\)|\x1b[@-Z\\-_]")


def clean(raw: bytes) -> str:
    return ANSI.sub(b"", raw).replace(b"\r", b"").decode("utf-8", "replace")


def main() -> int:
    sep = sys.argv.index("--")
    steps = json.load(open(sys.argv[1]))
    argv = sys.argv[sep + 1 :]

    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)

    raw = b""
    start = 0  # where the next expect starts looking, in the cleaned text
    segments = []
    status = None

    def read_some(deadline: float) -> bool:
        """Reads what is there (waiting until the deadline); False at end of output."""
        nonlocal raw
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        r, _, _ = select.select([fd], [], [], min(left, 0.2))
        if not r:
            return True
        try:
            data = os.read(fd, 65536)
        except OSError:
            return False
        if not data:
            return False
        raw += data
        return True

    def fail(i, msg):
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except OSError:
            pass
        print(json.dumps({"segments": segments, "status": status, "error": f"step {i}: {msg}",
                          "transcript": clean(raw)}))
        return 1

    for i, step in enumerate(steps):
        if "send" in step:
            os.write(fd, step["send"].encode())
            continue
        deadline = time.monotonic() + step.get("timeout", 60)
        if "expect" in step:
            pat = re.compile(step["expect"], re.S)
            while True:
                text = clean(raw)
                m = pat.search(text, start)
                if m:
                    segments.append(text[start : m.end()])
                    start = m.end()
                    break
                if time.monotonic() > deadline:
                    return fail(i, f"timed out waiting for {step['expect']!r}")
                if not read_some(deadline):
                    text = clean(raw)
                    if not pat.search(text, start):
                        return fail(i, f"output ended before {step['expect']!r}")
        elif step.get("eof"):
            while read_some(deadline):
                if time.monotonic() > deadline:
                    return fail(i, "the program did not end")
            _, st = os.waitpid(pid, 0)
            status = os.waitstatus_to_exitcode(st)
            segments.append(clean(raw)[start:])
    print(json.dumps({"segments": segments, "status": status, "error": None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
