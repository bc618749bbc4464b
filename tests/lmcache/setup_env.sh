#!/usr/bin/env bash
# tests/lmcache/setup_env.sh — the environment the LMCache conformance test runs
# in, made once and cached: a venv with the OpenTelemetry SDK, LMCache 0.5.6's
# pure-Python files unpacked from its wheel (docs/lmcache-0.5.6.md §5), and
# LMCache 0.5.7's from the lmcache-cli 0.5.7rc3.dev0 pre-release wheel (pure
# Python; its lmcache/ is the 0.5.7 code) into ENVDIR/whl-0.5.7.
#
#   tests/lmcache/setup_env.sh ENVDIR      (ctest passes <build>/lmcache-env)
#
# Makes ENVDIR/venv ($CBT_PYTHON3 -m venv, default python3, as scripts/pydeps.sh
# does) with msgspec, opentelemetry-api and -sdk at the versions §5 ran, downloads
# lmcache==0.5.6 with `pip download --no-deps` (the wheel is cp311 x86_64;
# only its .py/.pyi files are used, so any python3 can read them), checks the
# wheel's sha256 against the one §5 names, and unpacks the .py/.pyi files into
# ENVDIR/whl. A marker records what was made: a second run is a no-op, a new
# pin remakes it. One maker at a time (flock).
#
# Exit: 0 ready; 77 with "SKIP: lmcache_conformance: <reason>" when PyPI (or
# the configured index) cannot be reached or python3 has no venv module;
# 1 for any other failure (a download that is not the pinned wheel, pip
# failing against a reachable index, ...).
set -uo pipefail

LMCACHE_VERSION=0.5.6
LMCACHE_WHEEL_SHA256=14530ff72b96056e894c9b8dc70c10d019e7802799bbfde9cec298700b799194
LMCACHE057_PKG=lmcache-cli==0.5.7rc3.dev0
LMCACHE057_WHEEL=lmcache_cli-0.5.7rc3.dev0-py3-none-any.whl
LMCACHE057_WHEEL_SHA256=b5a93fe0ad8c81c8b2387f329c904f781274366a88d0ce25878b3eeee74f5b6c
PIP_PINS="msgspec==0.23.0 opentelemetry-api==1.40.0 opentelemetry-sdk==1.40.0"

py="${CBT_PYTHON3:-python3}" # ctest passes the interpreter CMake found

skip() { echo "SKIP: lmcache_conformance: $*"; exit 77; }
die() { echo "lmcache_conformance: setup failed: $*" >&2; exit 1; }

[ $# -eq 1 ] || { echo "usage: $0 ENVDIR" >&2; exit 2; }
env_dir="$1"
venv="$env_dir/venv"
whl="$env_dir/whl"
marker="$env_dir/.ready"
whl057="$env_dir/whl-0.5.7"
want="lmcache==$LMCACHE_VERSION sha256=$LMCACHE_WHEEL_SHA256 $LMCACHE057_PKG sha256=$LMCACHE057_WHEEL_SHA256 $PIP_PINS"

ready() { [ -x "$venv/bin/python" ] && [ -f "$whl/lmcache/v1/mp_observability/event.py" ] &&
          [ -f "$whl057/lmcache/v1/mp_observability/event.py" ] &&
          [ "$(cat "$marker" 2>/dev/null)" = "$want" ]; }
ready && exit 0

command -v "$py" >/dev/null 2>&1 || skip "$py is not installed"
"$py" -c 'import venv, ensurepip' >/dev/null 2>&1 ||
  skip "'python3 -m venv' is not available (Debian: the python3-venv package)"

mkdir -p "$env_dir" || die "cannot create $env_dir"
exec 9>"$env_dir/.lock"
command -v flock >/dev/null 2>&1 && flock 9
ready && exit 0 # made while we waited

# Is the package index reachable at all? Asked only after pip failed, so that
# a reachable index with a failing install is a failure, not a skip.
index_unreachable() {
  "$venv/bin/python" "$(dirname "${BASH_SOURCE[0]}")/index_unreachable.py"
}

rm -rf "$venv" "$whl" "$whl057" "$marker"
echo "lmcache_conformance: creating $venv" >&2
"$py" -m venv "$venv" || { rm -rf "$venv"; die "'$py -m venv $venv' failed"; }
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

dl="$env_dir/dl"
rm -rf "$dl"
echo "lmcache_conformance: pip download --no-deps lmcache==$LMCACHE_VERSION" >&2
if ! "${pip[@]}" download -q --no-deps --timeout 15 --retries 1 -d "$dl" \
       --only-binary=:all: --platform manylinux_2_28_x86_64 --python-version 3.11 \
       --implementation cp --abi cp311 "lmcache==$LMCACHE_VERSION"; then
  why="$(index_unreachable)" && { rm -rf "$venv"; skip "the package index cannot be reached ($why)"; }
  die "pip could not download lmcache==$LMCACHE_VERSION from a reachable index"
fi
wheel="$(ls "$dl"/lmcache-"$LMCACHE_VERSION"-*.whl 2>/dev/null | head -1)"
[ -n "$wheel" ] || die "pip download left no lmcache wheel in $dl"
got="$(sha256sum "$wheel" | cut -d' ' -f1)"
[ "$got" = "$LMCACHE_WHEEL_SHA256" ] ||
  die "$wheel has sha256 $got, not the $LMCACHE_WHEEL_SHA256 of docs/lmcache-0.5.6.md"

echo "lmcache_conformance: unpacking the wheel's Python files into $whl" >&2
"$venv/bin/python" - "$wheel" "$whl" <<'EOF' || die "cannot unpack $wheel"
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("lmcache/") and n.endswith((".py", ".pyi"))]
    z.extractall(dest, names)
EOF

echo "lmcache_conformance: pip download --no-deps $LMCACHE057_PKG" >&2
if ! "${pip[@]}" download -q --no-deps --timeout 15 --retries 1 -d "$dl" "$LMCACHE057_PKG"; then
  why="$(index_unreachable)" && { rm -rf "$venv" "$whl"; skip "the package index cannot be reached ($why)"; }
  die "pip could not download $LMCACHE057_PKG from a reachable index"
fi
wheel057="$dl/$LMCACHE057_WHEEL"
[ -f "$wheel057" ] || die "pip download left no $LMCACHE057_WHEEL in $dl"
got="$(sha256sum "$wheel057" | cut -d' ' -f1)"
[ "$got" = "$LMCACHE057_WHEEL_SHA256" ] ||
  die "$wheel057 has sha256 $got, not the pinned $LMCACHE057_WHEEL_SHA256"
"$venv/bin/python" - "$wheel057" "$whl057" <<'EOF' || die "cannot unpack $wheel057"
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("lmcache/") and n.endswith((".py", ".pyi"))]
    z.extractall(dest, names)
EOF

echo "lmcache_conformance: pip install $PIP_PINS" >&2
# shellcheck disable=SC2086
if ! "${pip[@]}" install -q --timeout 15 --retries 1 $PIP_PINS; then
  why="$(index_unreachable)" && { rm -rf "$venv" "$whl" "$whl057"; skip "the package index cannot be reached ($why)"; }
  die "pip could not install $PIP_PINS from a reachable index"
fi
printf '%s\n' "$want" >"$marker"
echo "lmcache_conformance: environment ready: $env_dir" >&2
