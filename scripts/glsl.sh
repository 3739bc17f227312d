#!/bin/bash
# Compiles the GLSL kernels (shaders/glsl/*.comp) and the GLSL test fixtures
# (crates/vkllm-kernels/tests/data/*.comp) to the SPIR-V checked in beside them. Run after
# editing a .comp file; the build embeds the .spv (vkllm-kernels' GlslKernel), not the source.
# GLSLC picks the compiler (default: .cache/glslc/glslc from scripts/glslc.sh where
# it exists, else glslc on PATH); cooperative matrices need shaderc 2025 or later (Debian 13's glslc), Debian
# 12's stops at plain compute. Kernels on NV cooperative matrix 2 target Vulkan 1.3 (SPIR-V 1.6,
# which the extension needs); the rest Vulkan 1.2 (SPIR-V 1.5: `local_size_x_id` stays a
# WorkgroupSize constant, where 1.6's LocalSizeId would need maintenance4).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${GLSLC:-}" ]; then
    GLSLC=glslc
    [ -x .cache/glslc/glslc ] && GLSLC=.cache/glslc/glslc
fi
command -v "$GLSLC" >/dev/null || { echo "$GLSLC not found (Debian: apt-get install glslc)" >&2; exit 1; }
shopt -s nullglob
for f in shaders/glsl/*.comp crates/vkllm-kernels/tests/data/*.comp; do
    env=vulkan1.2
    grep -q GL_NV_cooperative_matrix2 "$f" && env=vulkan1.3
    "$GLSLC" --target-env=$env -O -o "${f%.comp}.spv" "$f"
    echo "${f%.comp}.spv"
done
