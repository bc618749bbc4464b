#!/usr/bin/env bash
# bench/carry-cmocka.sh — run HERE (a machine with Debian's apt) before a
# device run: fetch cmocka (libcmocka-dev + libcmocka0) as .deb files and
# unpack them into .carry/cmocka, a git-ignored folder the device tool can
# carry (carry: [".carry"]). bench/gpu-check.sh uses .carry/cmocka when the
# device has no cmocka.h of its own (or CBT_CMOCKA_DIR points elsewhere), so
# the tests build there too. About 200 KB.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.carry/cmocka
DEBS=.carry/debs
rm -rf "$DEST" "$DEBS"
mkdir -p "$DEST" "$DEBS"

# the device machine is x86-64: fetch amd64 packages whatever this machine is
APT=()
if [ "$(dpkg --print-architecture)" != amd64 ]; then
  mkdir -p /tmp/amd64/partial
  APT=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
  apt-get "${APT[@]}" update -qq
fi
if ! (cd "$DEBS" && apt-get "${APT[@]}" download libcmocka-dev libcmocka0); then
  apt-get "${APT[@]}" update -qq
  (cd "$DEBS" && apt-get "${APT[@]}" download libcmocka-dev libcmocka0)
fi
for f in "$DEBS"/*.deb; do
  dpkg -x "$f" "$DEST"
done
rm -rf "$DEBS"
# links become plain files: a carried tree need not keep them
find "$DEST" -type l | while read -r l; do
  cp --remove-destination "$(readlink -f "$l")" "$l"
done
rm -rf "$DEST/usr/share/doc"
echo "carry-cmocka: $(find "$DEST" -name 'cmocka.h') and $(find "$DEST" -name 'libcmocka.so.0')"
echo "carry-cmocka: $(du -sh .carry | cut -f1) in .carry; pass carry: [\".carry\"] to the device run"
