#!/usr/bin/env bash
# SPIRV-Tools from Debian 13 (2025.1: it validates the cooperative-matrix extension, which
# Debian 12's 2023.1 does not know) unpacked into .cache/spirv-tools, run through Debian 13's
# own loader and libraries (scripts/trixie-unpack.sh); `cargo xtask spirv-val` finds
# `.cache/spirv-tools/spirv-val`.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/spirv-tools
[ -x "$out/spirv-val" ] && exit 0
scripts/trixie-unpack.sh "$out" spirv-val spirv-tools
"$out"/spirv-val --version | head -1
