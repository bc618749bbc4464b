#!/bin/sh
# tests/lmcache/lmct_reader_check.sh — ctest lmct_lmcache_reader:
#   lmct_reader_check.sh WRITER ENV_DIR OUT_FILE
# WRITER (tests/lmct_write_sample.c) writes an LMCT file with cbt's C codec;
# lmct_reader_check.py opens it with LMCache 0.5.6's own TraceReader, from the
# venv and unpacked wheel tests/lmcache/setup_env.sh made under ENV_DIR.
# Makes that environment if missing (setup_env.sh); exits 77 (skipped, with
# the reason) when it cannot.
set -eu
writer="$1" env="$2" out="$3"
py="$env/venv/bin/python"
# the environment, made here if missing (as lmcache_conformance makes it; the
# two share ctest's RESOURCE_LOCK lmcache_env): 77 with its SKIP line when the
# package index cannot be reached
rc=0
bash "$(dirname "$0")/setup_env.sh" "$env" || rc=$?
[ "$rc" -eq 77 ] && exit 77
[ "$rc" -eq 0 ] || { echo "lmct_lmcache_reader: setup_env.sh failed ($rc)" >&2; exit 1; }
if [ ! -x "$py" ] || [ ! -f "$env/whl/lmcache/v1/mp_observability/trace/reader.py" ]; then
  echo "SKIP: lmct_lmcache_reader: no LMCache 0.5.6 environment at $env (tests/lmcache/setup_env.sh makes it; lmcache_conformance runs it)"
  exit 77
fi
if ! "$py" -c 'import msgspec' 2>/dev/null; then
  echo "SKIP: lmct_lmcache_reader: msgspec is not installed in $env/venv"
  exit 77
fi
n=$("$writer" "$out" 25)
exec "$py" "$(dirname "$0")/lmct_reader_check.py" "$env/whl" "$out" "$n"
