#!/usr/bin/env bash
# The main job on a fresh machine: a real model answering a prompt on the GPU.
#
#   scripts/quickstart.sh "Why is the sky blue?"      (extra arguments go to `vkllm run`)
#
# 1. If no Vulkan device is visible and this is Debian 12 run as root, installs Mesa's software
#    Vulkan driver (lavapipe) from bookworm-backports and says so. On other distributions install
#    your GPU's Vulkan driver, or Mesa's software driver (Fedora: mesa-vulkan-drivers; Arch:
#    vulkan-swrast; Ubuntu: mesa-vulkan-drivers), then rerun.
# 2. Fetches the default model (SmolLM2-135M-Instruct, GGUF) into the cache, once.
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

scripts/fetch-models.sh smollm2 >&2
exec cargo run --release -q -p vkllm-server -- run "$@"
