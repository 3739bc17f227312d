#!/usr/bin/env bash
# Binaries for a GPU machine without Rust (../shared/device/README.md): builds them with the
# stripped `device` profile and packs each xz-compressed into .dev/ (the kit's git-ignored
# folder; a run's 64 MiB carry holds the usual set, ~20 MiB). Usage:
#   scripts/device-pack.sh [ITEM...]   here; default: vkllm attn_bench parity gpu_coopmat
#   scripts/device-pack.sh --unpack DIR   there: each .dev/NAME.xz to DIR/NAME, executable
# ITEM: vkllm, an example of vkllm-vk (attn_bench, matvec_bench, matmul_bench, sample_bench),
# parity (vkllm-parity's kernel rows) or a test of vkllm-models (gpu_coopmat, gpu_vs_cpu, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--unpack" ]; then
    dir=${2:?usage: $0 --unpack DIR}
    mkdir -p "$dir"
    for f in .dev/*.xz; do
        name=$(basename "$f" .xz)
        xz -dc "$f" > "$dir/$name"
        chmod +x "$dir/$name"
        echo "$dir/$name"
    done
    exit 0
fi
items=("$@")
[ ${#items[@]} -gt 0 ] || items=(vkllm attn_bench parity gpu_coopmat)
mkdir -p .dev
# The executable a `cargo build/test --no-run --message-format=json` command produced.
executable() {
    "$@" --message-format=json | python3 -c '
import json, sys
exe = [m["executable"] for m in map(json.loads, sys.stdin)
       if m.get("reason") == "compiler-artifact" and m.get("executable")]
print(exe[-1])'
}
for item in "${items[@]}"; do
    case $item in
        vkllm) bin=$(executable cargo build --profile device -p vkllm-server --bin vkllm) ;;
        *_bench) bin=$(executable cargo build --profile device -p vkllm-vk --example "$item") ;;
        parity) bin=$(executable cargo test --profile device -p vkllm-parity --test kernels --no-run) ;;
        *) bin=$(executable cargo test --profile device -p vkllm-models --test "$item" --no-run) ;;
    esac
    xz -T0 -6 -c "$bin" > ".dev/$item.xz"
    echo ".dev/$item.xz ($(du -k ".dev/$item.xz" | cut -f1) KiB) <- $bin"
done
