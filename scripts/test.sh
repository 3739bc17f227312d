#!/usr/bin/env bash
# The project's full test suite: formatting, lints, every test. README.md points here.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The libraries' API docs build without broken or private links (crates others depend on).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
cargo test --workspace
# The facade's examples, as a library user runs them (CPU reference backend: quick).
VKLLM_CPU=1 cargo run -q -p vkllm --example generate -- smollm2 "Once upon a time"
cargo run -q -p vkllm --example chat_json -- smollm2
VKLLM_CPU=1 cargo run -q -p vkllm --example batch -- smollm2 | grep Paris
# A host sharing its Vulkan device with a model decoding within 4 ms per 16.6 ms frame.
cargo run -q -p vkllm --example frame_host -- smollm2 --frames 60 --host-elems 65536 | grep "text:.*Paris"
# The server as a library: its routes nested in a host axum app, one request through it.
cargo run -q -p vkllm-server --example embed_axum -- smollm2 | grep Paris
# The server under hostile and heavy clients (slow-loris, idle connections, huge prompts,
# disconnect storms, a short soak) on the CPU backend with a tiny synthetic model.
python3 scripts/reliability.py --bin target/debug/vkllm --soak 20
# The load generator against a CPU server: streaming clients, mixed lengths, TTFT and ITL.
python3 scripts/loadgen.py --spawn target/debug/vkllm --stream --check --concurrency 4 \
    --requests 2 --max-tokens 16,32 --prompt-words 8,64
# Its agent-style mode: two conversations resent each turn must reuse their earlier turns.
python3 scripts/loadgen.py --spawn target/debug/vkllm --check --turns 4 --system-words 60 \
    --turn-words 10 --max-tokens 4 --concurrency 2 >/dev/null
# GPUs decode quantized weights through the int8 matvec by default, lavapipe (a CPU device) does
# not: check its greedy tokens against transformers on a Q4_K/Q6_K model here too.
VKLLM_TUNE=matvec=int8 cargo test -p vkllm-models --test real_models qwen2_5_coder_0_5b_gpu
cargo xtask parity
# Every kernel's SPIR-V passes the Khronos validator for Vulkan 1.3 (drivers other than the ones
# tested may reject or miscompile what one driver tolerates).
cargo xtask spirv-val
# Every library crate packages for a registry (versions on internal dependencies, metadata,
# the shader sources inside vkllm-kernels); --no-verify: the tests above already built them.
cargo package --workspace --exclude xtask --no-verify --allow-dirty --quiet
