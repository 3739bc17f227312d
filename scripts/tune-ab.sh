#!/usr/bin/env bash
# A/B of two tuning settings through `vkllm bench` on one GGUF, alternated (A B A B ...) in one
# process start each so that clocks and warm-up affect both alike; prints each test's median
# tok/s under A and B and B's ratio. Usage: scripts/tune-ab.sh MODEL.gguf A B [rounds]
# [-- bench flags, replacing the defaults below]; A and B are `--tune` specs (`attn_cm2_qscale=0`,
# `attn_cm2_qscale=1,attn_cm2_tile=64x64`). VKLLM names the binary (default: vkllm on PATH).
set -euo pipefail
bin=${VKLLM:-vkllm}
usage="usage: $0 MODEL.gguf TUNE_A TUNE_B [rounds] [-- bench flags]"
model=${1:?$usage}
a=${2:?$usage}
b=${3:?$usage}
shift 3
rounds=2
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    rounds=$1
    shift
fi
[ "${1:-}" = "--" ] && shift
flags=(--pp 200,512 --tg 0 --depth 0,8192 --reps 2 --sampling greedy)
if [ $# -gt 0 ]; then
    flags=("$@")
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
    for side in a b; do
        spec=$a
        [ "$side" = b ] && spec=$b
        "$bin" bench -m "$model" "${flags[@]}" --tune "$spec" --json "$out/$side$r.json" >&2
    done
done
python3 - "$out" "$rounds" "$a" "$b" <<'PY'
import json, statistics, sys
out, rounds, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
key = lambda r: (r["test"], r["batch"], r["sampling"])
runs = {s: [json.load(open(f"{out}/{s}{i}.json")) for i in range(1, rounds + 1)] for s in "ab"}
tok = {s: {} for s in "ab"}
for s in "ab":
    for run in runs[s]:
        for r in run["rows"]:
            tok[s].setdefault(key(r), []).append(r["tok_s"])
print(f"{runs['a'][0]['meta']['gpu']}, {rounds} rounds; A: {a}  B: {b}")
print(f"{'test':<20} {'batch':>5} {'A tok/s':>10} {'B tok/s':>10} {'B/A':>7}")
for k, va in tok["a"].items():
    vb = tok["b"].get(k)
    if vb:
        ma, mb = statistics.median(va), statistics.median(vb)
        print(f"{k[0]:<20} {k[1]:>5} {ma:>10.1f} {mb:>10.1f} {mb / ma:>7.3f}")
PY
