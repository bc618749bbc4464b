#!/usr/bin/env bash
# tests/lmcache/run.sh — the lmcache_conformance ctest entry: make (or reuse)
# the cached environment, then compare cbt's spans with LMCache 0.5.6's (or
# 0.5.7rc3's with --lmcache-version 0.5.7).
#
#   tests/lmcache/run.sh CBT ENVDIR [conformance.py flags: --lmcache-version V,
#                                    --report, --seed S, ...]
#
# ENVDIR is <build>/lmcache-env (setup_env.sh makes it once); the run's files
# go to ENVDIR/../lmcache-run. Exit: conformance.py's (0 no unexpected
# difference, 1 differences or a failed selftest, 2 the harness could not
# run), or setup_env.sh's 77 (SKIP: no package index) or 1.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 CBT ENVDIR [flags]" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cbt="$1" env_dir="$2"
shift 2
"$here/setup_env.sh" "$env_dir" || exit $?
run_dir="$(dirname "$env_dir")/lmcache-run"
mkdir -p "$run_dir"
wheel_root="$env_dir/whl" # 0.5.6; 0.5.7's files are in whl-0.5.7
prev=""
for a in "$@"; do
  [ "$prev" = "--lmcache-version" ] && [ "$a" = "0.5.7" ] && wheel_root="$env_dir/whl-0.5.7"
  prev="$a"
done
exec "$env_dir/venv/bin/python" "$here/conformance.py" --cbt "$cbt" \
  --wheel-root "$wheel_root" --workdir "$run_dir" "$@"
