#!/bin/sh
# tests/lmcache/lmct_reader_check.sh — ctest lmct_lmcache_reader:
#   lmct_reader_check.sh WRITER ENV_DIR OUT_FILE
# WRITER (tests/lmct_write_sample.c) writes an LMCT file with cbt's C codec;
# lmct_reader_check.py opens it with LMCache 0.5.6's own TraceReader, from the
# venv and unpacked wheel tests/lmcache/setup_env.sh made under ENV_DIR.
# And ctest lmct_lmcache_recordings:
#   lmct_reader_check.sh --recordings ENV_DIR DIR CBT_VERSION
# LMCache's TraceReader and `lmcache trace info` on every recording cbt's
# recorder left in DIR (record_replay, test_recorder: each with a .count).
# Makes that environment if missing (setup_env.sh); exits 77 (skipped, with
# the reason) when it cannot.
set -eu
test=lmct_lmcache_reader
if [ "$1" = "--recordings" ]; then
  test=lmct_lmcache_recordings
  shift
  env="$1" rdir="$2" version="$3"
else
  writer="$1" env="$2" out="$3"
fi
py="$env/venv/bin/python"
# the environment, made here if missing (as lmcache_conformance makes it; the
# two share ctest's RESOURCE_LOCK lmcache_env): 77 with its SKIP line when the
# package index cannot be reached
rc=0
# (its SKIP line names this test)
said=$(bash "$(dirname "$0")/setup_env.sh" "$env") || rc=$?
[ -z "$said" ] || printf '%s\n' "$said" | sed "s/^SKIP: lmcache_conformance:/SKIP: $test:/"
[ "$rc" -eq 77 ] && exit 77
[ "$rc" -eq 0 ] || { echo "$test: setup_env.sh failed ($rc)" >&2; exit 1; }
if [ ! -x "$py" ] || [ ! -f "$env/whl/lmcache/v1/mp_observability/trace/reader.py" ]; then
  echo "SKIP: $test: no LMCache 0.5.6 environment at $env (tests/lmcache/setup_env.sh makes it; lmcache_conformance runs it)"
  exit 77
fi
if ! "$py" -c 'import msgspec' 2>/dev/null; then
  echo "SKIP: $test: msgspec is not installed in $env/venv"
  exit 77
fi
if [ "$test" = lmct_lmcache_recordings ]; then
  exec "$py" "$(dirname "$0")/lmct_reader_check.py" --recordings "$env/whl" "$rdir" "$version"
fi
n=$("$writer" "$out" 25)
exec "$py" "$(dirname "$0")/lmct_reader_check.py" "$env/whl" "$out" "$n"
