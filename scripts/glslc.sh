#!/usr/bin/env bash
# glslc from Debian 13 (shaderc 2025.2, glslang 15: GL_NV_cooperative_matrix2, which Debian 12's
# 2023 build does not know) unpacked into .cache/glslc, run through Debian 13's own loader and
# libraries; `scripts/glsl.sh` finds `.cache/glslc/glslc` when no glslc is on PATH.
# Uses the Debian mirror this machine's apt sources already name.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/glslc
[ -x "$out/glslc" ] && exit 0
src=/etc/apt/sources.list.d/debian.sources
a=$(mktemp -d)
trap 'rm -rf "$a"' EXIT
mkdir -p "$a"/lists/partial "$a"/etc "$a"/debs
printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
  "$(awk '/^URIs:/{print $2; exit}' "$src")" > "$a"/etc/trixie.sources
o="-oDir::Etc::SourceList=/dev/null -oDir::Etc::SourceParts=$a/etc -oDir::State::Lists=$a/lists -oAPT::Architecture=amd64"
# shellcheck disable=SC2086
apt-get $o update -qq
# shellcheck disable=SC2086
(cd "$a"/debs && apt-get $o download glslc libshaderc1 libc6 libstdc++6 libgcc-s1 2>/dev/null)
mkdir -p "$out"/root
for d in "$a"/debs/*.deb; do dpkg-deb -x "$d" "$out"/root; done
lib=$PWD/$out/root/usr/lib/x86_64-linux-gnu
cat > "$out"/glslc <<EOS
#!/bin/sh
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$PWD/$out/root/usr/bin/glslc" "\$@"
EOS
chmod +x "$out"/glslc
"$out"/glslc --version | head -1
