#!/bin/bash
# Compiles the GLSL kernels (shaders/glsl/*.comp) and the GLSL test fixtures
# (crates/vkllm-kernels/tests/data/*.comp) to the SPIR-V checked in beside them. Run after
# editing a .comp file; the build embeds the .spv (vkllm-kernels' GlslKernel), not the source.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v glslc >/dev/null || { echo "glslc not found (Debian: apt-get install glslc)" >&2; exit 1; }
shopt -s nullglob
for f in shaders/glsl/*.comp crates/vkllm-kernels/tests/data/*.comp; do
    glslc --target-env=vulkan1.2 -O -o "${f%.comp}.spv" "$f"
    echo "${f%.comp}.spv"
done
