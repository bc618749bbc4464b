#!/usr/bin/env bash
# scripts/pydeps.sh — the Python virtual environment cbt's Python-side tests
# use: tests/otlp_decode.py (decodes our OTLP bytes with the official
# opentelemetry-proto package) and the OTLP/gRPC tests' loopback collector
# (tests/grpc_collector.py: grpcio's server with the servicers generated in
# opentelemetry-proto, google.rpc.Status / RetryInfo through grpcio-status).
#
#   scripts/pydeps.sh            create or update the venv, then exit 0
#
# The venv lives at ${CBT_PYVENV:-<repo>/.venv} (ignored by git). It is made
# with `python3 -m venv` (Debian: the python3-venv package) and gets the
# pinned packages below from PyPI.
# A marker file records what was installed, so a second run is a no-op and a
# new pin reinstalls. Exits non-zero, saying why, when python3 or its venv
# module is missing or pip cannot install (no network, no index).
set -euo pipefail

OTLP_PROTO_VERSION=1.45.2 # keep the header of exporter/proto/*.proto in step
# Every package the tests import is pinned, the runtime under them too, so a
# venv made today and one made next month decode with the same code.
# opentelemetry-proto 1.45.2's *_pb2_grpc modules were generated for
# grpcio >= 1.63.2 and its messages take protobuf >= 5, < 8; grpcio-status
# 1.85.3 (google.rpc.Status in grpc-status-details-bin) needs grpcio >= 1.85.3
# and, like googleapis-common-protos 1.76.0 (google.rpc.RetryInfo), protobuf
# >= 6.33.5, < 8. A new pin changes the marker, so the venv is reinstalled.
PINS=(
  "opentelemetry-proto==$OTLP_PROTO_VERSION"
  "protobuf==7.36.2"
  "grpcio==1.85.3"
  "grpcio-status==1.85.3"
  "googleapis-common-protos==1.76.0"
)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${CBT_PYVENV:-$root/.venv}"
want="${PINS[*]}"
marker="$venv/.cbt-pydeps"

if [ -x "$venv/bin/python" ] && grep -qxF "$want" "$marker" 2>/dev/null; then
  exit 0
fi

if ! command -v python3 >/dev/null 2>&1; then
  echo "cbt: python3 is not installed (Debian: sudo apt-get install -y python3 python3-venv)" >&2
  exit 1
fi
# Debian's python3 has the venv module but not ensurepip without python3-venv,
# and `python3 -m venv` then fails: check both.
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "cbt: 'python3 -m venv' is not available: install the python3-venv package" >&2
  echo "  sudo apt-get install -y python3-venv" >&2
  exit 1
fi

# One creator at a time (two build trees may run their tests together).
exec 9>"${TMPDIR:-/tmp}/cbt-pydeps-$(id -u).lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
if [ -x "$venv/bin/python" ] && grep -qxF "$want" "$marker" 2>/dev/null; then
  exit 0 # made while we waited
fi

. "$root/scripts/venv_pins.sh"
cbt_venv_pins "$venv" "$marker" cbt "${PINS[@]}" || exit 1
echo "cbt: Python venv ready: $venv" >&2
