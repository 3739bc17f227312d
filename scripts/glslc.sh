#!/usr/bin/env bash
# glslc from Debian 13 (shaderc 2025.2, glslang 15: GL_NV_cooperative_matrix2, which Debian 12's
# 2023 build does not know) unpacked into .cache/glslc, run through Debian 13's own loader and
# libraries (scripts/trixie-unpack.sh); `scripts/glsl.sh` uses `.cache/glslc/glslc` when it is
# there.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/glslc
[ -x "$out/glslc" ] && exit 0
scripts/trixie-unpack.sh "$out" glslc glslc libshaderc1
"$out"/glslc --version | head -1
