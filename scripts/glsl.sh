#!/bin/bash
# Compiles the GLSL kernels (shaders/glsl/*.comp) and the GLSL test fixtures
# (crates/vkllm-kernels/tests/data/*.comp) to the SPIR-V checked in beside them. Run after
# editing a .comp file; the build embeds the .spv (vkllm-kernels' GlslKernel), not the source.
# GLSLC picks the compiler (default: glslc on PATH); cooperative matrices (GL_KHR_cooperative_matrix)
# need shaderc 2025 or later (Debian 13's glslc), Debian 12's stops at plain compute.
set -euo pipefail
cd "$(dirname "$0")/.."
GLSLC=${GLSLC:-glslc}
command -v "$GLSLC" >/dev/null || { echo "$GLSLC not found (Debian: apt-get install glslc)" >&2; exit 1; }
shopt -s nullglob
for f in shaders/glsl/*.comp crates/vkllm-kernels/tests/data/*.comp; do
    "$GLSLC" --target-env=vulkan1.2 -O -o "${f%.comp}.spv" "$f"
    echo "${f%.comp}.spv"
done
