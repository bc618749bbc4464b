#!/usr/bin/env bash
# tests/lmcache/run.sh — the lmcache_conformance ctest entry: make (or reuse)
# the cached environment, then compare cbt's spans with LMCache 0.5.6's.
#
#   tests/lmcache/run.sh CBT ENVDIR [conformance.py flags: --report, --seed S, ...]
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
exec "$env_dir/venv/bin/python" "$here/conformance.py" --cbt "$cbt" \
  --wheel-root "$env_dir/whl" --workdir "$run_dir" "$@"
