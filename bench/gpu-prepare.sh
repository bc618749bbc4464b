#!/usr/bin/env bash
# bench/gpu-prepare.sh — run HERE (a Debian machine with apt, no GPU needed)
# right before a device call: it makes what bench/gpu-check.sh needs on the
# device machine and cannot fetch there (no package registry, no .git) in
# .carry/, a git-ignored folder the device tool carries (carry: [".carry"]):
#
#   .carry/cmocka/   libcmocka-dev + libcmocka0 (amd64), unpacked with dpkg -x,
#                    their links made plain files, docs dropped (~300 KB); the
#                    tests' framework, used there when the system has no cmocka.h
#   .carry/commit    commit=<git rev-parse HEAD>, dirty=<git status --porcelain |
#                    wc -l>, prepared=<UTC date>, then the porcelain lines: the
#                    summary's "commit" line where .git did not travel
#
#   bash bench/gpu-prepare.sh          (bench/carry-cmocka.sh is the old name)
#
# CBT_CARRY_DIR writes elsewhere (default: .carry in this tree). cmocka comes
# from `apt-get download` (amd64 whatever this machine is); when that fails
# and this machine has both packages installed (amd64), their installed files
# are copied instead, saying so.
# Exit: 0 ready; 3 cmocka could be neither downloaded nor copied (the reason
# is printed: no apt-get, no mirror reachable, not installed); 1 another error.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=${CBT_CARRY_DIR:-$ROOT/.carry}
mkdir -p "$CARRY"
CARRY=$(cd "$CARRY" && pwd)
PKGS=(libcmocka-dev libcmocka0)

# ---- cmocka ---------------------------------------------------------------------------
NEW=$CARRY/cmocka.new
DEBS=$CARRY/debs
rm -rf "$NEW" "$DEBS"
mkdir -p "$NEW" "$DEBS"
FROM=""
WHY=""
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
  WHY="no apt-get/dpkg on this machine"
else
  # the device machine is x86-64: fetch amd64 packages whatever this machine is
  APT=()
  if [ "$(dpkg --print-architecture)" != amd64 ]; then
    mkdir -p /tmp/amd64/partial
    APT=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
    timeout 60 apt-get "${APT[@]}" update -qq >"$DEBS/apt.log" 2>&1 || true
  fi
  if (cd "$DEBS" && timeout 60 apt-get "${APT[@]}" download "${PKGS[@]}") >>"$DEBS/apt.log" 2>&1 ||
    { timeout 60 apt-get "${APT[@]}" update -qq >>"$DEBS/apt.log" 2>&1 &&
      (cd "$DEBS" && timeout 60 apt-get "${APT[@]}" download "${PKGS[@]}") >>"$DEBS/apt.log" 2>&1; }; then
    for f in "$DEBS"/*.deb; do
      dpkg -x "$f" "$NEW"
    done
    FROM="apt-get download: $(cd "$DEBS" && ls -- *.deb | tr '\n' ' ')"
  else
    WHY="apt-get download ${PKGS[*]} failed: $(grep -E '^(E|W):' "$DEBS/apt.log" | tail -n 2 | tr '\n' ' ')"
    # the same files from the packages installed here, if they are (and amd64)
    ok=1
    for p in "${PKGS[@]}"; do
      st=$(dpkg-query -W -f='${db:Status-Status} ${Architecture}' "$p" 2>/dev/null || true)
      [ "$st" = "installed amd64" ] || ok=0
    done
    if [ "$ok" -eq 1 ]; then
      while IFS= read -r f; do
        case $f in /usr/share/doc/*) continue ;; esac
        if [ -f "$f" ] || { [ -L "$f" ] && [ ! -d "$f" ]; }; then
          mkdir -p "$NEW$(dirname "$f")"
          cp -L "$f" "$NEW$f"
        fi
      done < <(dpkg -L "${PKGS[@]}")
      FROM="the installed packages ($WHY): $(dpkg-query -W -f='${Package} ${Version}, ' "${PKGS[@]}" | sed 's/, $//')"
    fi
  fi
fi
rm -rf "$DEBS"
if [ -z "$FROM" ]; then
  rm -rf "$NEW"
  echo "gpu-prepare: cannot carry cmocka: $WHY" >&2
  exit 3
fi
# links become plain files: a carried tree need not keep them
find "$NEW" -type l | while read -r l; do
  cp --remove-destination "$(readlink -f "$l")" "$l"
done
rm -rf "$NEW/usr/share/doc"
if [ -z "$(find "$NEW" -name cmocka.h)" ] || [ -z "$(find "$NEW" -name 'libcmocka.so*' -type f)" ]; then
  echo "gpu-prepare: no cmocka.h or libcmocka.so in what was unpacked ($FROM)" >&2
  exit 1
fi
rm -rf "$CARRY/cmocka"
mv "$NEW" "$CARRY/cmocka"
echo "gpu-prepare: cmocka from $FROM"
echo "gpu-prepare: $(find "$CARRY/cmocka" -name cmocka.h) and $(find "$CARRY/cmocka" -name 'libcmocka.so.0')"

# ---- the Python package's build and test wheels (the device has no network) -------------
# gpu-check.sh builds the cbt package from this tree into a venv of these and
# runs its CUDA stream test (tests/python/test_api.py). Pins as scripts/pytest.sh.
PYWHEELS="scikit-build-core==1.1.2 pytest==9.2.0"
rm -rf "$CARRY/pywheels.new"
# all pure-Python wheels: fetched for each python3 minor the device might run
# (older ones need tomli and exceptiongroup too), so its pip finds its own set
pyok=1
for pv in 3.10 3.11 3.12 3.13; do # pytest 9 needs >= 3.10
  python3 -m pip download -q --only-binary=:all: --python-version "$pv" \
    -d "$CARRY/pywheels.new" $PYWHEELS >/dev/null 2>&1 || pyok=0
done
if [ "$pyok" -eq 1 ]; then
  rm -rf "$CARRY/pywheels"
  mv "$CARRY/pywheels.new" "$CARRY/pywheels"
  echo "gpu-prepare: Python wheels ($PYWHEELS and their dependencies) in $CARRY/pywheels"
else
  rm -rf "$CARRY/pywheels.new"
  echo "gpu-prepare: cannot download the Python wheels ($PYWHEELS): the python step will report it" >&2
fi

# ---- the commit this tree is (.git does not travel) --------------------------------------
top=$(git -C "$ROOT" rev-parse --show-toplevel 2>/dev/null || true)
{
  if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ]; then
    echo "commit=$(git rev-parse HEAD)"
    echo "dirty=$(git status --porcelain | wc -l)"
    echo "prepared=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# git status --porcelain then (the first 100 lines):"
    git status --porcelain | head -n 100
  else
    echo "commit=unknown"
    echo "prepared=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# $ROOT is not a git checkout's top"
  fi
} >"$CARRY/commit.new"
mv "$CARRY/commit.new" "$CARRY/commit"
echo "gpu-prepare: $(head -n 2 "$CARRY/commit" | tr '\n' ' ')-> $CARRY/commit"
echo "gpu-prepare: $(du -sh "$CARRY" | cut -f1) in $CARRY; pass carry: [\".carry\"] to the device run"
