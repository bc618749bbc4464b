#!/bin/sh
# tests/lmcache/lmct_reader_check.sh — LMCache's own readers and cbt's LMCT
# files, in both trace schemas (1: LMCache 0.5.6, 2: 0.5.7):
#   lmct_reader_check.sh WRITER ENV_DIR OUT_FILE          (ctest lmct_lmcache_reader)
# WRITER (tests/lmct_write_sample.c) writes an LMCT file with cbt's C codec
# in each schema; lmct_reader_check.py opens it with that LMCache's own
# TraceReader, and the other LMCache's reader must refuse it.
#   lmct_reader_check.sh --recordings ENV_DIR DIR CBT_VERSION
# (ctest lmct_lmcache_recordings) LMCache's TraceReader and `lmcache trace
# info` on every recording cbt's recorder left in DIR (record_replay,
# test_recorder: each with a .count), each by the LMCache of its schema.
#   lmct_reader_check.sh --storage WRITER ENV_DIR OUT_DIR
# (ctest lmct_lmcache_schemas) the other way: LMCache's own encoders write
# level "storage" files (lmct_storage_sample.py) and cbt's reader (WRITER
# --read) reads each in its schema, and refuses the same content under the
# other number and LMCache pull request #4871's "schema 2" (ObjectKey
# cache_salt), naming what it found.
# The venv and the unpacked wheels come from tests/lmcache/setup_env.sh
# (made here if missing); exits 77 (skipped, with the reason) when it cannot.
set -eu
test=lmct_lmcache_reader
mode=sample
case "$1" in
  --recordings) test=lmct_lmcache_recordings mode=recordings; shift
                env="$1" rdir="$2" version="$3" ;;
  --storage) test=lmct_lmcache_schemas mode=storage; shift
             writer="$1" env="$2" out="$3" ;;
  *) writer="$1" env="$2" out="$3" ;;
esac
py="$env/venv/bin/python"
here=$(dirname "$0")
# the environment, made here if missing (as lmcache_conformance makes it; the
# tests share ctest's RESOURCE_LOCK lmcache_env): 77 with its SKIP line when the
# package index cannot be reached
rc=0
said=$(bash "$here/setup_env.sh" "$env") || rc=$?
[ -z "$said" ] || printf '%s\n' "$said" | sed "s/^SKIP: lmcache_conformance:/SKIP: $test:/"
[ "$rc" -eq 77 ] && exit 77
[ "$rc" -eq 0 ] || { echo "$test: setup_env.sh failed ($rc)" >&2; exit 1; }
w056="$env/whl" w057="$env/whl-0.5.7"
for w in "$w056" "$w057"; do
  if [ ! -x "$py" ] || [ ! -f "$w/lmcache/v1/mp_observability/trace/reader.py" ]; then
    echo "SKIP: $test: no LMCache environment at $env ($w; tests/lmcache/setup_env.sh makes it)"
    exit 77
  fi
done
if ! "$py" -c 'import msgspec' 2>/dev/null; then
  echo "SKIP: $test: msgspec is not installed in $env/venv"
  exit 77
fi
check="$here/lmct_reader_check.py"
case $mode in
recordings)
  "$py" "$check" --recordings "$w056" "$rdir" "$version"
  exec "$py" "$check" --recordings "$w057" "$rdir" "$version" ;;
sample)
  n=$("$writer" "$out" 25 1)
  "$py" "$check" "$w056" "$out" "$n"
  "$py" "$check" --refuses "$w057" "$out"
  n=$("$writer" "$out.2" 25 2)
  "$py" "$check" "$w057" "$out.2" "$n"
  exec "$py" "$check" --refuses "$w056" "$out.2" ;;
storage)
  mkdir -p "$out"
  fail=0
  # expect FILE PATTERN: cbt's reader says PATTERN (stdout, or stderr when it refuses)
  expect() {
    got=$("$writer" --read "$1" 2>&1) || true
    case "$got" in
      *"$2"*) echo "$test: $(basename "$1"): $got" ;;
      *) echo "$test: $(basename "$1"): expected '$2', cbt's reader said: $got" >&2; fail=1 ;;
    esac
  }
  sample() { "$py" "$here/lmct_storage_sample.py" "$@" >/dev/null; }
  sample "$w056" "$out/s1.lct"
  expect "$out/s1.lct" "schema lmcache-0.5.6 records 6"
  sample "$w057" "$out/s2.lct"
  expect "$out/s2.lct" "schema lmcache-0.5.7 records 6"
  # 0.5.6's content under 2: its submit_prefetch_task has skip_l2
  sample "$w056" "$out/s1-as-2.lct" --as-schema 2
  expect "$out/s1-as-2.lct" "submit_prefetch_task with skip_l2"
  # 0.5.7's content under 1: MemoryTags filters in the PrefetchTaskSpec
  sample "$w057" "$out/s2-as-1.lct" --as-schema 1
  expect "$out/s2-as-1.lct" "allowed_l1/l2_memory_tags is LMCache 0.5.7's"
  # the other "2": ObjectKey with cache_salt
  sample "$w057" "$out/pr4871.lct" --as-pr4871
  expect "$out/pr4871.lct" "cache_salt (LMCache pull request #4871's schema 2)"
  sample "$w056" "$out/pr4871-on-056.lct" --as-pr4871 --as-schema 2
  expect "$out/pr4871-on-056.lct" "LMCache pull request #4871"
  exit $fail ;;
esac
