#!/usr/bin/env bash
# scripts/run-pytest-venv.sh — run a Python test script with the venv's python.
#
#   scripts/run-pytest-venv.sh <script.py> [args...]
#
# The venv is ${CBT_PYVENV:-<repo>/.venv}; scripts/pydeps.sh makes (or
# updates) it when it is missing or stale. When it cannot be made (no
# python3-venv, no network) this prints "SKIP: <why>" and exits 77, which
# ctest reports as skipped. Otherwise the script's own exit status is returned.
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 <script.py> [args...]" >&2
  exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${CBT_PYVENV:-$root/.venv}"

if ! "$root/scripts/pydeps.sh"; then
  echo "SKIP: no Python venv with the pinned test packages (opentelemetry-proto, grpcio, ...) at $venv (scripts/pydeps.sh failed, see above: no python3-venv, or no reachable package index)"
  exit 77
fi
exec "$venv/bin/python" "$@"
