#!/usr/bin/env bash
# scripts/fuzz.sh — build and run the libFuzzer targets, with ASan + UBSan, each
# for a bounded time: tests/fuzz_traceparent.c (W3C trace-context extraction,
# host/trace/context.c) and tests/fuzz_jsonl_in.c (the JSON-lines reader of
# `cbt replay`, cli/jsonl_in.c) and tests/fuzz_grpc_status.c (what an
# OTLP/gRPC answer hands the exporter: grpc-status-details-bin's
# google.rpc.Status and RetryInfo, header lines, frames, exporter/otlp_grpc.c)
# and tests/fuzz_lmct_reader.c (the LMCT
# reader, host/record/lmct.c) and tests/fuzz_replay.c (a whole replay of a
# fuzzed recording, host/record/replay.c; both skipped, saying so, without
# msgpack-c). Exits non-zero when a fuzzer finds a crash
# or an invariant violation; prints "SKIP: ..." and exits 0 when clang or
# libFuzzer is missing (scripts/deps.sh installs both; make test repeats the
# SKIP line at its end).
#
#   scripts/fuzz.sh            20 s per target, two targets at a time
#   FUZZ_JOBS=1 scripts/fuzz.sh   one at a time
#   FUZZ_SECONDS=120 scripts/fuzz.sh
#   CLANG=clang-14 scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_BUDGET="${FUZZ_SECONDS:-20}"
CC_FUZZ="${CLANG:-clang}"

if ! command -v "$CC_FUZZ" >/dev/null 2>&1; then
  echo "SKIP: fuzz: $CC_FUZZ not found (as root, scripts/deps.sh fuzz installs it)"
  exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/cbt-fuzz.XXXXXX")"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# libFuzzer and the sanitizer runtimes present? (clang without compiler-rt's
# runtimes, Debian's libclang-rt-N-dev, fails here)
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
  > "$work/probe.c"
if ! "$CC_FUZZ" -fsanitize=fuzzer,address,undefined "$work/probe.c" -o "$work/probe" >/dev/null 2>&1; then
  echo "SKIP: fuzz: $CC_FUZZ cannot link -fsanitize=fuzzer,address,undefined (libFuzzer missing; as root, scripts/deps.sh fuzz installs it)"
  exit 0
fi

# run_target NAME MAX_LEN SOURCES...: build tests/NAME.c with SOURCES, run it
# on $work/NAME-corpus for SECONDS_BUDGET; on a finding print it and exit 1
# Targets run FUZZ_JOBS at a time (default 2: each is one single-threaded
# process, and make test runs this last, with nothing else on the machine),
# each for SECONDS_BUDGET; results are printed in order once all have ended.
FUZZ_JOBS="${FUZZ_JOBS:-2}"
targets=()

# fuzz_one NAME MAX_LEN CORPUS — one target's run; its exit status in
# $work/NAME.rc, its output in $work/NAME.log
fuzz_one() {
  local name="$1" max_len="$2" corpus="$3" rc=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$work/$name" -max_total_time="$SECONDS_BUDGET" -max_len="$max_len" -timeout=10 \
      -artifact_prefix="$work/$name-" -print_final_stats=1 "$corpus" > "$work/$name.log" 2>&1 || rc=$?
  echo "$rc" > "$work/$name.rc"
}

run_target() {
  local name="$1" max_len="$2"
  shift 2
  "$CC_FUZZ" -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -Ihost -I. "tests/$name.c" "$@" -lm -o "$work/$name"
  while [ "$(jobs -rp | wc -l)" -ge "$FUZZ_JOBS" ]; do wait -n || true; done
  echo "fuzz: running $work/$name for ${SECONDS_BUDGET}s"
  fuzz_one "$name" "$max_len" "$corpus" &
  targets+=("$name")
}

# every target's result, in order; exit 1 when one failed
report() {
  wait
  local failed=0 name rc
  for name in "${targets[@]}"; do
    rc=$(cat "$work/$name.rc" 2>/dev/null || echo 1)
    if [ "$rc" = 0 ]; then
      tail -n 12 "$work/$name.log" | grep -E 'stat::number_of_executed_units|Done' || true
      echo "fuzz: $name OK (no crash in ${SECONDS_BUDGET}s)"
    else
      tail -n 60 "$work/$name.log"
      for f in "$work/$name"-crash-* "$work/$name"-leak-* "$work/$name"-timeout-*; do
        [ -e "$f" ] || continue
        echo "fuzz: reproducer $f:"; od -c "$f" | head -20
      done
      echo "fuzz: $name FAILED (exit $rc)"
      failed=1
    fi
  done
  [ "$failed" = 0 ] || exit 1
}

corpus="$work/fuzz_traceparent-corpus"
mkdir -p "$corpus"
seed() { printf '%s' "$2" > "$corpus/$1"; }
seed valid01 '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
seed valid00 '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00'
seed valid03 '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03'
seed state '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01|rojo=00f067aa0ba902b7,congo=t61rcWkgMzE'
seed ff 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
seed upper '00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01'
seed zero '00-00000000000000000000000000000000-00f067aa0ba902b7-01'
seed long '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-010'
seed flags '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09'
seed badstate $'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01|a=\x01'
seed empty ''
run_target fuzz_traceparent 1024 host/trace/context.c host/core/status.c

corpus="$work/fuzz_jsonl_in-corpus"
mkdir -p "$corpus"
seed event '{"type": "mp.store.start", "ts_ns": 1700000000123456789, "session": "req-1", "pair": 0, "meta": {"device": "cuda:0", "engine_id": 1, "model_name": "meta-llama/Llama-3.1-8B-Instruct", "ratio": 0.5, "success": false}}'
seed escapes '["\u00e9\ud83d\ude00\/\"\\\b\f\n\r\t", "a\u0000b", -0, 1e-400, 9223372036854775808]'
seed nested '{"a": [[{"b": {}}], [], null, true, false]}'
seed bad '{"a": 1,}'
seed empty ''
run_target fuzz_jsonl_in 4096 cli/jsonl_in.c

corpus="$work/fuzz_grpc_status-corpus"
mkdir -p "$corpus"
# google.rpc.Status{code 8, message, details [Any{RetryInfo{1 s 2 ns}}]}
seed retryinfo $'\x08\x08\x12\x09slow down\x1a\x32\x0a\x28type.googleapis.com/google.rpc.RetryInfo\x12\x06\x0a\x04\x08\x01\x10\x02'
seed details 'grpc-status-details-bin: CAgSCXNsb3cgZG93bhoyCih0eXBlLmdvb2dsZWFwaXMuY29tL2dvb2dsZS5ycGMuUmV0cnlJbmZvEgYKBAgBEAI'
seed message 'grpc-message: slow%20down%zz'
seed frame $'\x00\x00\x00\x00\x03abc'
seed empty ''
run_target fuzz_grpc_status 2048 exporter/otlp_grpc.c -lz

if printf '#include <msgpack.h>\nint main(void){return 0;}\n' | "$CC_FUZZ" -x c - -lmsgpackc -o "$work/mp" >/dev/null 2>&1; then
  corpus="$work/fuzz_lmct_reader-corpus"
  mkdir -p "$corpus"
  if [ -n "${CBT_LMCT_SEED:-}" ] && [ -f "$CBT_LMCT_SEED" ]; then cp "$CBT_LMCT_SEED" "$corpus/sample"; fi
  seed empty ''
  seed hdr $'\x00\x00\x00\x05\x81\xa1\x61\xc4\x00'
  run_target fuzz_lmct_reader 4096 host/record/lmct.c host/record/lmct_schema.c host/core/status.c -lmsgpackc

  # a whole replay: the library's host sources on the CPU backend (no CUDA,
  # OTLP, NVTX or CUPTI), with a build_config.h saying so; seeded with a real
  # recording when a built `cbt` is at hand
  mkdir -p "$work/include/cbt"
  sed -e 's/@PROJECT_VERSION_MAJOR@/0/; s/@PROJECT_VERSION_MINOR@/1/; s/@PROJECT_VERSION_PATCH@/0/' \
      -e 's/@CBT_ABI_VERSION@/0/; s/@PROJECT_VERSION@/0.1.0/' \
      -e 's/#cmakedefine01 CBT_HAVE_MSGPACK/#define CBT_HAVE_MSGPACK 1/' \
      -e 's/#cmakedefine01 \(CBT_HAVE_[A-Z]*\)/#define \1 0/' \
      cmake/build_config.h.in > "$work/include/cbt/build_config.h"
  corpus="$work/fuzz_replay-corpus"
  mkdir -p "$corpus"
  cli="${CBT_BUILD:-build}/cbt"
  if [ -x "$cli" ]; then
    "$cli" demo --cpu --requests 3 --concurrency 1 --trees 0 --slowest 0 --spans "$work/seed.jsonl" \
      --output "$work/seed.json" --trace-level gpu --trace-output "$corpus/mp" >/dev/null 2>&1 || true
    "$cli" demo --cacheblend --requests 2 --trees 0 --slowest 0 --spans "$work/seed.jsonl" \
      --output "$work/seed.json" --trace-level gpu --trace-output "$corpus/cb" >/dev/null 2>&1 || true
  fi
  seed empty ''
  lib=$(ls host/core/*.c host/spans/*.c host/util/*.c host/builders/*.c host/trace/*.c host/record/*.c | grep -v record_none.c)
  run_target fuzz_replay 65536 -I"$work/include" $lib host/streams/stream.c host/streams/cuda_marks.c \
    host/streams/stream_cuda_none.c host/device/devclock.c host/device/ring.c \
    host/device/kernel_spans.c host/device/ring_cuda_none.c host/device/cupti_none.c \
    instr/kernel_span_cpu.c -lmsgpackc -lpthread
else
  echo "SKIP: fuzz: fuzz_lmct_reader: msgpack-c not found (msgpack.h, -lmsgpackc: libmsgpack-dev)"
  echo "SKIP: fuzz: fuzz_replay: msgpack-c not found (msgpack.h, -lmsgpackc: libmsgpack-dev)"
fi

report
