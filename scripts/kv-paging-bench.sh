#!/usr/bin/env bash
# Decode over paged KV against contiguous KV (issue #31: >= 97% at 1 and 16 streams): `vkllm
# bench` on one GGUF with --kv-sharing copy, then in-place (paged caches; at a depth the
# sequences after the first read the first one's depth rows in place), and the decode rows side
# by side. Usage: scripts/kv-paging-bench.sh MODEL.gguf [bench flags, replacing the defaults
# below]; VKLLM names the binary (default: vkllm on PATH).
set -euo pipefail
bin=${VKLLM:-vkllm}
model=${1:?usage: $0 MODEL.gguf [bench flags]}
shift
flags=(--pp 512 --tg 128 --batch 1,16 --depth 0,8192 --reps 2 --sampling greedy)
if [ $# -gt 0 ]; then
    flags=("$@")
fi
out=$(mktemp -d)
for mode in copy in-place; do
    "$bin" bench -m "$model" "${flags[@]}" --kv-sharing "$mode" --json "$out/$mode.json" >&2
done
python3 - "$out/copy.json" "$out/in-place.json" <<'PY'
import json, sys
copy, paged = (json.load(open(p)) for p in sys.argv[1:3])
print(f"in place: {paged['meta']['kv_sharing']}")
key = lambda r: (r["test"], r["batch"], r["sampling"])
base = {key(r): r for r in copy["rows"]}
print(f"{'test':<16} {'batch':>5} {'copy tok/s':>11} {'in place':>11} {'ratio':>7}")
for r in paged["rows"]:
    c = base.get(key(r))
    if c and r["test"].startswith("tg"):
        print(f"{r['test']:<16} {r['batch']:>5} {c['tok_s']:>11.1f} {r['tok_s']:>11.1f} "
              f"{r['tok_s'] / c['tok_s']:>7.3f}")
PY
rm -rf "$out"
