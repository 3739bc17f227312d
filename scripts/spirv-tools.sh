#!/usr/bin/env bash
# SPIRV-Tools from Debian 13 (2025.1: it validates the cooperative-matrix extension, which
# Debian 12's 2023.1 does not know) unpacked into .cache/spirv-tools, run through Debian 13's
# own loader and libraries; `cargo xtask spirv-val` finds `.cache/spirv-tools/spirv-val`.
# Uses the Debian mirror this machine's apt sources already name.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/spirv-tools
[ -x "$out/spirv-val" ] && exit 0
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
(cd "$a"/debs && apt-get $o download spirv-tools libc6 libstdc++6 libgcc-s1 2>/dev/null)
mkdir -p "$out"/root
for d in "$a"/debs/*.deb; do dpkg-deb -x "$d" "$out"/root; done
lib=$PWD/$out/root/usr/lib/x86_64-linux-gnu
cat > "$out"/spirv-val <<EOS
#!/bin/sh
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$PWD/$out/root/usr/bin/spirv-val" "\$@"
EOS
chmod +x "$out"/spirv-val
"$out"/spirv-val --version | head -1
