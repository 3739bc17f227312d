#!/usr/bin/env bash
# Usage: scripts/trixie-unpack.sh OUT BIN PACKAGE...: downloads the Debian 13 (trixie) packages
# (with Debian 13's libc6, libstdc++6 and libgcc-s1) from the Debian mirror this machine's apt
# sources already name, unpacks them into OUT/root, and writes OUT/BIN, which runs
# OUT/root/usr/bin/BIN through Debian 13's own loader and libraries. For the tools newer than
# Debian 12's that the kernels need (scripts/spirv-tools.sh, scripts/glslc.sh).
set -euo pipefail
out=${1:?usage: $0 OUT BIN PACKAGE...}
bin=${2:?usage: $0 OUT BIN PACKAGE...}
shift 2
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
(cd "$a"/debs && apt-get $o download "$@" libc6 libstdc++6 libgcc-s1 2>/dev/null)
mkdir -p "$out"/root
for d in "$a"/debs/*.deb; do dpkg-deb -x "$d" "$out"/root; done
case $out in /*) abs=$out ;; *) abs=$PWD/$out ;; esac
lib=$abs/root/usr/lib/x86_64-linux-gnu
cat > "$out/$bin" <<EOS
#!/bin/sh
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$abs/root/usr/bin/$bin" "\$@"
EOS
chmod +x "$out/$bin"
