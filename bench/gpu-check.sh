#!/usr/bin/env bash
# bench/gpu-check.sh — the one-shot device check: build cbt for the H200
# (Release, sm_90), run the GPU tests, the scatter and L2-load benchmark, the
# host publish benchmark and the CPU scatter benchmark, log each step to $OUT,
# and print a short summary LAST. docs/gpu-script.md says how to run it with
# the device tool and how to record what it prints.
#
#   bash bench/gpu-check.sh
#
# Environment:
#   OUT                    where the logs go (default: a new temp dir); at most
#                          8 files are written there
#   JOBS                   build parallelism (default: nproc)
#   CBT_GPU_BUILD          build directory (default: build-gpu)
#   CBT_GPU_CHECK_BUDGET   seconds for the whole script (default 450); each
#                          step's timeout is cut to what is left
#   CBT_CMOCKA_DIR         an unpacked cmocka tree (dpkg -x of libcmocka-dev and
#                          libcmocka0; bench/carry-cmocka.sh makes .carry/cmocka,
#                          used by default when present and the system has none)
#   CBT_GPU_TESTS_REGEX    ctest -R regex (default: gpu|cuda|kernel|ring: the GPU
#                          tests, plus the cheap kernel-reference and ring tests)
#
# Without a GPU it still configures, builds and runs what it can; the GPU
# tests and benchmark report themselves skipped and the script exits 0.
# Exit status: non-zero when the build fails, a test fails, or a benchmark
# reports a correctness failure or a CUDA error (missed targets do not count).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
BUILD=${CBT_GPU_BUILD:-build-gpu}
BUDGET=${CBT_GPU_CHECK_BUDGET:-450}
TESTS_REGEX=${CBT_GPU_TESTS_REGEX:-gpu|cuda|kernel|ring}
if [ -z "${OUT:-}" ]; then
  OUT=$(mktemp -d /tmp/cbt-gpu-check.XXXXXX)
fi
mkdir -p "$OUT"
START=$(date +%s)
STATUS=0

say() { echo "[gpu-check $(($(date +%s) - START))s] $*"; }
elapsed() { echo $(($(date +%s) - START)); }

# step_limit CAP: seconds a step may take: CAP, cut to what is left of the
# budget (minus 20 s for the summary); 0 when too little is left to start it.
step_limit() {
  local left=$((BUDGET - $(elapsed) - 20))
  if [ "$left" -lt 15 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# run_step NAME CAP LOG CMD... — run CMD under timeout, output to LOG; sets RC
# (124: timed out, 125: not started for lack of time) and SECS.
run_step() {
  local name=$1 cap=$2 log=$3
  shift 3
  local lim t0
  lim=$(step_limit "$cap")
  if [ "$lim" -eq 0 ]; then
    echo "not run: the time budget (${BUDGET}s) is spent" >>"$log"
    say "$name: NOT RUN (time budget spent)"
    RC=125
    SECS=0
    return 0
  fi
  t0=$(date +%s)
  say "$name (limit ${lim}s) ..."
  RC=0
  { echo "\$ $*"; echo; } >>"$log"
  timeout -k 10 "$lim" "$@" >>"$log" 2>&1 || RC=$?
  SECS=$(($(date +%s) - t0))
  if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
    echo "TIMEOUT after ${lim}s" >>"$log"
    say "$name: TIMED OUT after ${lim}s"
  elif [ "$RC" -ne 0 ]; then
    say "$name: exit $RC (${SECS}s); the end of $(basename "$log"):"
    tail -n 30 "$log" | sed 's/^/    /'
  else
    say "$name: ok (${SECS}s)"
  fi
}

# ---- 1. the machine ---------------------------------------------------------------
DEVLOG=$OUT/device.log
: >"$DEVLOG"
HAVE_GPU=0
DEVICE="none"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm), $(nproc) CPUs"
  if git -C "$ROOT" rev-parse --short HEAD >/dev/null 2>&1; then
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD) ($(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) files differ from it)"
  else
    echo "commit: unknown (no .git in this copy of the tree)"
  fi
  echo
} >>"$DEVLOG"
if command -v nvidia-smi >/dev/null 2>&1; then
  if timeout 30 nvidia-smi -L >>"$DEVLOG" 2>&1 && grep -q '^GPU [0-9]' "$DEVLOG"; then
    HAVE_GPU=1
    # read-only queries: nothing here changes the card's settings
    DEVICE=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total \
      --format=csv,noheader 2>/dev/null | head -n 1 || true)
    [ -n "$DEVICE" ] || DEVICE=$(grep -m1 '^GPU 0' "$DEVLOG" | sed 's/^GPU 0: //')
    timeout 30 nvidia-smi >>"$DEVLOG" 2>&1 || true
  else
    echo "nvidia-smi found no GPU" >>"$DEVLOG"
  fi
else
  echo "nvidia-smi: not installed" >>"$DEVLOG"
fi
NVCC=""
if [ -x /usr/local/cuda/bin/nvcc ]; then
  NVCC=/usr/local/cuda/bin/nvcc
elif command -v nvcc >/dev/null 2>&1; then
  NVCC=$(command -v nvcc)
fi
NVCC_VER="none"
if [ -n "$NVCC" ]; then
  NVCC_VER=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p' | head -n 1)
  { echo; "$NVCC" --version; } >>"$DEVLOG" 2>&1 || true
fi
{ echo; cmake --version | head -n 1; } >>"$DEVLOG" 2>&1 || true
say "device: $DEVICE; nvcc: $NVCC_VER; jobs: $JOBS; logs: $OUT"

# ---- 2. cmocka: the system's, a carried tree, or none (tests left out) -------------
CMOCKA="none"
CMOCKA_ARGS=(-DCBT_BUILD_TESTS=OFF)
CMOCKA_LIBDIR=""
use_cmocka_tree() { # DIR -> 0 when it holds cmocka.h and libcmocka.so*
  local d=$1 inc="" lib="" i l
  for i in "$d/usr/include" "$d/include"; do
    [ -f "$i/cmocka.h" ] && { inc=$i; break; }
  done
  for l in "$d"/usr/lib/*/libcmocka.so "$d"/usr/lib/libcmocka.so "$d"/lib/libcmocka.so \
           "$d"/usr/lib/*/libcmocka.so.0 "$d"/lib/libcmocka.so.0; do
    [ -f "$l" ] && { lib=$l; break; }
  done
  [ -n "$inc" ] && [ -n "$lib" ] || return 1
  CMOCKA_ARGS=(-DCBT_BUILD_TESTS=ON "-DCMOCKA_INCLUDE_DIR=$inc" "-DCMOCKA_LIBRARY=$lib")
  CMOCKA_LIBDIR=$(dirname "$lib")
}
if [ -n "${CBT_CMOCKA_DIR:-}" ]; then
  d=$(cd "$CBT_CMOCKA_DIR" 2>/dev/null && pwd || echo "$CBT_CMOCKA_DIR")
  if use_cmocka_tree "$d"; then CMOCKA="carried ($CBT_CMOCKA_DIR)"; else
    say "CBT_CMOCKA_DIR=$CBT_CMOCKA_DIR holds no cmocka.h + libcmocka.so: tests left out"
  fi
elif echo '#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>' | cc -E -x c - >/dev/null 2>&1; then
  CMOCKA="system"
  CMOCKA_ARGS=(-DCBT_BUILD_TESTS=ON -UCMOCKA_INCLUDE_DIR -UCMOCKA_LIBRARY)
elif [ -d "$ROOT/.carry/cmocka" ] && use_cmocka_tree "$ROOT/.carry/cmocka"; then
  CMOCKA="carried (.carry/cmocka)"
fi
if [ "$CMOCKA" = "none" ]; then
  say "cmocka.h not found: the tests are left out of the build (run bench/carry-cmocka.sh here and carry .carry)"
fi

# ---- 3. configure and build ---------------------------------------------------------
GEN=()
KEEP_GOING=(-k)
if command -v ninja >/dev/null 2>&1; then
  GEN=(-G Ninja)
  KEEP_GOING=(-k 0)
  # an existing build dir made by another generator cannot switch
  if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD/CMakeCache.txt"; then
    GEN=()
    KEEP_GOING=(-k)
  fi
fi
CUDA_OPT=OFF
[ -n "$NVCC" ] && CUDA_OPT=ON
CONFLOG=$OUT/configure.log
: >"$CONFLOG"
run_step configure 150 "$CONFLOG" cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCBT_WITH_CUDA=$CUDA_OPT -DCBT_WITH_OTLP=OFF \
  -DCBT_WITH_CUPTI=AUTO -DCBT_BUILD_BENCH=ON "${CMOCKA_ARGS[@]}"
CONF_RC=$RC
TESTS_DROPPED=0
if [ "$CONF_RC" -ne 0 ] && [ "$CONF_RC" -ne 124 ] && [ "$CMOCKA" != "none" ]; then
  # one broken test must not cost the benchmarks: configure again without tests
  say "configure failed with the tests in; again without them"
  echo "==== configure again with -DCBT_BUILD_TESTS=OFF ====" >>"$CONFLOG"
  run_step "configure (no tests)" 120 "$CONFLOG" cmake -S . -B "$BUILD" -DCBT_BUILD_TESTS=OFF
  CONF_RC=$RC
  TESTS_DROPPED=1
  STATUS=1
fi
FEATURES=$(grep -m1 'cbt: CUDA=' "$CONFLOG" | sed 's/.*cbt: //' || true)

BUILDLOG=$OUT/build.log
: >"$BUILDLOG"
BUILD_RC=125
BUILD_SECS=0
if [ "$CONF_RC" -eq 0 ]; then
  run_step build 330 "$BUILDLOG" cmake --build "$BUILD" -j "$JOBS" -- "${KEEP_GOING[@]}"
  BUILD_RC=$RC
  BUILD_SECS=$SECS
else
  echo "not run: configure failed" >>"$BUILDLOG"
fi
[ "$CONF_RC" -eq 0 ] && [ "$BUILD_RC" -eq 0 ] || STATUS=1

# ---- 4. the GPU tests ---------------------------------------------------------------
TESTLOG=$OUT/tests.log
: >"$TESTLOG"
T_PASS=0 T_FAIL=0 T_SKIP=0 T_TOTAL=0
TESTS_NOTE=""
if [ "$CMOCKA" = "none" ]; then
  TESTS_NOTE="not built: no cmocka.h (carry it: bench/carry-cmocka.sh)"
  echo "$TESTS_NOTE" >>"$TESTLOG"
elif [ "$TESTS_DROPPED" -eq 1 ]; then
  TESTS_NOTE="not built: configure failed with the tests in (see configure.log); built without them"
  echo "$TESTS_NOTE" >>"$TESTLOG"
elif [ "$CONF_RC" -ne 0 ]; then
  TESTS_NOTE="not run: configure failed"
else
  export LD_LIBRARY_PATH="${CMOCKA_LIBDIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  run_step "tests (ctest -R '$TESTS_REGEX')" 180 "$TESTLOG" ctest --test-dir "$BUILD" \
    -R "$TESTS_REGEX" --output-on-failure --timeout 150
  T_TOTAL=$(grep -cE 'Test +#[0-9]+:' "$TESTLOG" || true)
  T_PASS=$(grep -E 'Test +#[0-9]+:' "$TESTLOG" | grep -cE ' Passed +[0-9.]+ sec' || true)
  T_SKIP=$(grep -E 'Test +#[0-9]+:' "$TESTLOG" | grep -c 'Skipped' || true)
  T_FAIL=$((T_TOTAL - T_PASS - T_SKIP))
  if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then TESTS_NOTE="TIMED OUT"; STATUS=1; fi
  if [ "$RC" -eq 125 ]; then TESTS_NOTE="not run (time budget)"; fi
  if [ "$T_TOTAL" -eq 0 ] && [ "$RC" -ne 125 ]; then TESTS_NOTE="no test matched '$TESTS_REGEX'"; fi
  [ "$T_FAIL" -eq 0 ] || STATUS=1
  if [ "$RC" -ne 0 ] && [ "$RC" -ne 125 ] && [ "$T_FAIL" -eq 0 ]; then
    T_FAIL=1
    STATUS=1
  fi
fi

# ---- 5. benchmarks --------------------------------------------------------------------
bench() { # NAME CAP ARGS... -> BRC, log $OUT/NAME.log
  local name=$1 cap=$2
  shift 2
  local log=$OUT/$name.log bin=$BUILD/bench/$name
  : >"$log"
  if [ ! -x "$bin" ]; then
    echo "not built: $bin is missing (see build.log)" >>"$log"
    say "$name: NOT BUILT"
    BRC=126
    return 0
  fi
  run_step "$name" "$cap" "$log" "$bin" "$@"
  BRC=$RC
}
bench bench_scatter_gpu 240
GPU_RC=$BRC
bench bench_publish 90 --quick
PUB_RC=$BRC
bench bench_scatter_cpu 120 --quick
CPU_RC=$BRC
# the main job on the GPU: requests whose retrieves and stores run the CUDA
# kernels, kernel spans joined from the device ring. Its output goes to the
# end of tests.log ($OUT holds at most 8 files).
DEMO_LOG=$TESTLOG
if [ "$HAVE_GPU" -ne 1 ]; then
  DEMO_RC=127 # nothing to run it on
  echo "cbt demo --gpu: not run, no GPU" >>"$DEMO_LOG"
elif [ -x "$BUILD/cbt" ]; then
  { echo; echo "==== cbt demo --gpu ===="; } >>"$DEMO_LOG"
  run_step "cbt demo --gpu" 90 "$DEMO_LOG" "$BUILD/cbt" demo --gpu --requests 64 --trees 1 \
    --slowest 2 --output /tmp/cbt-demo-trace.json --spans /tmp/cbt-demo-spans.jsonl
  DEMO_RC=$RC
else
  echo "not built: $BUILD/cbt" >>"$DEMO_LOG"
  DEMO_RC=126
fi
for rc in $GPU_RC $PUB_RC $CPU_RC $DEMO_RC; do
  case $rc in 0 | 125 | 127) ;; *) STATUS=1 ;; esac
done

# ---- 6. the summary, last -------------------------------------------------------------
verdict() { # RC LOG
  case $1 in
    0) if grep -q '^SKIP' "$2"; then echo "skipped ($(grep -m1 '^SKIP' "$2" | sed 's/^SKIP: *//' | cut -c1-100))"; else echo ok; fi ;;
    124 | 137) echo "TIMED OUT" ;;
    125) echo "not run (time budget)" ;;
    127) echo "skipped (no GPU)" ;;
    126) echo "NOT BUILT" ;;
    1) echo "FAILED: correctness (exit 1)" ;;
    *) echo "FAILED (exit $1)" ;;
  esac
}
SUM=$OUT/summary.txt
{
  echo "==================== cbt gpu-check summary ===================="
  echo "date      $(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed)s of a ${BUDGET}s budget"
  echo "commit    $(grep -m1 '^commit:' "$DEVLOG" | sed 's/^commit: //')"
  if [ "$HAVE_GPU" -eq 1 ]; then
    echo "device    $DEVICE"
  else
    echo "device    none: no GPU here, so the GPU tests and bench_scatter_gpu skip"
  fi
  echo "build     $BUILD, Release, sm_90, nvcc $NVCC_VER; ${FEATURES:-configure failed}; cmocka: $CMOCKA"
  if [ "$CONF_RC" -ne 0 ]; then
    echo "          configure FAILED (exit $CONF_RC): configure.log"
  elif [ "$BUILD_RC" -eq 0 ]; then
    echo "          built in ${BUILD_SECS}s with -j$JOBS"
  else
    echo "          build $(verdict "$BUILD_RC" "$BUILDLOG"): it built what it could; see build.log"
  fi
  if [ -n "$TESTS_NOTE" ] && [ "$T_TOTAL" -eq 0 ]; then
    echo "tests     $TESTS_NOTE"
  else
    echo "tests     ctest -R '$TESTS_REGEX': $T_PASS passed, $T_FAIL failed, $T_SKIP skipped (of $T_TOTAL)${TESTS_NOTE:+; $TESTS_NOTE}"
    grep -E 'Test +#[0-9]+:' "$TESTLOG" | sed -E 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: +/          /; s/ \.{2,}\** */ /' || true
  fi
  echo "scatter   bench_scatter_gpu: $(verdict "$GPU_RC" "$OUT/bench_scatter_gpu.log")"
  grep '^SUMMARY ' "$OUT/bench_scatter_gpu.log" | sed 's/^SUMMARY /          /' || true
  echo "publish   bench_publish --quick: $(verdict "$PUB_RC" "$OUT/bench_publish.log")"
  grep -E '^(publish_on|publish_off|harvester  )' "$OUT/bench_publish.log" | sed -E 's/^/          /; s/ +\(.*//' || true
  echo "demo      cbt demo --gpu: $(verdict "$DEMO_RC" "$TESTLOG")"
  grep -E '^(requests|KV moved)' "$TESTLOG" | tail -2 | sed 's/^/          /' || true
  echo "cpu ref   bench_scatter_cpu --quick: $(verdict "$CPU_RC" "$OUT/bench_scatter_cpu.log")"
  grep -E '^chunks|^ +16 |^target' "$OUT/bench_scatter_cpu.log" | sed 's/^/          /' || true
  echo "logs      $OUT: $(find "$OUT" -maxdepth 1 -type f -printf '%f\n' | sort | tr '\n' ' ')"
  echo "exit      $STATUS"
} >"$SUM"
echo
cat "$SUM"
exit "$STATUS"
