#!/usr/bin/env bash
# tests/gpu_check_selftest.sh SRC — bench/gpu-check.sh's own rules, on the CPU,
# in a few seconds (ctest: devcheck_selftest):
#   1. judge, the one rule: 127 is a failure (could not start), never "no
#      GPU"; NO_DEVICE is its own code; a skip passes without a GPU and fails
#      with one; a missing or refused tool is a skip, a spent budget fails
#      every step but a tool's
#   2. a real exit 127 (a program whose shared library is gone) through
#      run_step: a failure, with ldd's "not found" in the step's log
#   3. ctest's output, sanitizer and ncu output read the way the script reads them
#   4. the commit from .carry/commit where there is no .git
#   5. the whole script against fakes (nvidia-smi saying there is a GPU,
#      cmake, ctest and binaries that pass, skip or cannot start): its exit
#      status, its summary, at most 8 files in $OUT, a partial summary while
#      it runs; and its early stop on a CMake older than 3.24
set -uo pipefail
SRC=$(cd "${1:-$(dirname "$0")/..}" && pwd)
T=$(mktemp -d /tmp/gpu-check-selftest.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
FAILED=0
ok() { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; FAILED=$((FAILED + 1)); }
check() { # DESC CMD...: CMD must succeed
  local d=$1
  shift
  if "$@"; then ok "$d"; else bad "$d"; fi
}
has() { grep -qE -- "$2" "$1"; }

# shellcheck source=../bench/gpu-check.sh
source "$SRC/bench/gpu-check.sh" # functions only: main runs when it is executed
set +e
START=$(date +%s)
BUDGET=100

# ---- 1. judge --------------------------------------------------------------------------------
expect() { # HAVE_GPU KIND RC SKIP WANT(pass|fail) VERDICT-REGEX
  local g=$1 k=$2 rc=$3 s=$4 want=$5 re=$6 got
  HAVE_GPU=$g
  if judge "$k" "$rc" "$s"; then got=pass; else got=fail; fi
  if [ "$got" = "$want" ] && echo "$VERDICT" | grep -qE -- "$re"; then
    ok "judge gpu=$g $k rc=$rc skip='$s': $got, $VERDICT"
  else
    bad "judge gpu=$g $k rc=$rc skip='$s': got $got '$VERDICT', want $want /$re/"
  fi
}
check "NO_DEVICE is not 127" [ "$NO_DEVICE" -ne 127 ]
for g in 0 1; do
  for k in gpu core tool; do
    expect $g $k 127 "" fail "could not start \(exit 127"
  done
  expect $g gpu 0 "" pass "^ok$"
  expect $g gpu 124 "" fail "timed out"
  expect $g gpu 1 "" fail "FAILED \(exit 1\)"
  expect $g core "$NOT_BUILT" "" fail "not built"
  expect $g tool "$TOOL_SKIP" "compute-sanitizer not installed" pass "skipped \(compute-sanitizer not installed\)"
  expect $g tool "$TOOL_SKIP" "refused: Device not supported" pass "skipped \(refused"
  expect $g tool "$NO_TIME" "" pass "not run: the 100s budget"
  expect $g gpu "$NO_TIME" "" fail "FAILED: not run: the 100s budget"
  expect $g core "$NO_TIME" "" fail "FAILED: not run"
done
# the skip rule: expected without a GPU, a failure with one
expect 0 gpu 0 "bench_scatter_gpu needs a CUDA device (no CUDA-capable device is detected)" pass "^skipped, no device \(bench_scatter_gpu needs"
expect 1 gpu 0 "bench_scatter_gpu needs a CUDA device (no CUDA-capable device is detected)" fail "^FAILED: skipped on a machine with a GPU"
expect 0 gpu 0 "4 of 9 skipped: test_gpu_kernels test_gpu_ring" pass "^skipped, no device"
expect 1 gpu 0 "4 of 9 skipped: test_gpu_kernels test_gpu_ring" fail "^FAILED: skipped on a machine with a GPU"
expect 0 gpu 0 "tests not built: no cmocka.h" pass "^skipped, no device \(tests not built"
expect 1 gpu 0 "tests not built: no cmocka.h" fail "^FAILED: skipped on a machine with a GPU \(tests not built"
expect 1 core 0 "a SKIP line" fail "^FAILED: skipped on a machine with a GPU"
expect 0 gpu "$NO_DEVICE" "" pass "^skipped, no device$"
expect 1 gpu "$NO_DEVICE" "" fail "^FAILED: not run for want of a GPU"
expect 0 tool "$NO_DEVICE" "" pass "^skipped, no device$"
expect 1 tool 0 "the test skipped under the sanitizer" pass "^skipped \("

# record: a failure sets STATUS and names the step; a pass does not
BODY=$T/body SUM="" STATUS=0 FAILS=()
: >"$BODY"
HAVE_GPU=0
record scatter bench_scatter_gpu gpu 0 "needs a CUDA device"
check "record: a skip without a GPU leaves STATUS 0" [ "$STATUS" -eq 0 ]
HAVE_GPU=1
record scatter bench_scatter_gpu gpu 0 "needs a CUDA device"
check "record: the same skip with a GPU sets STATUS 1" [ "$STATUS" -eq 1 ]
check "record: and names the step" [ "${FAILS[*]}" = bench_scatter_gpu ]
check "record: the summary line says why" has "$BODY" '^scatter +bench_scatter_gpu: FAILED: skipped on a machine with a GPU \(needs a CUDA device\)$'

# ---- 2. a real 127: a binary whose shared library is gone ------------------------------------------
if command -v cc >/dev/null 2>&1; then
  echo 'int cbt_gone(void) { return 0; }' >"$T/gone.c"
  echo 'int cbt_gone(void); int main(void) { return cbt_gone(); }' >"$T/main.c"
  cc -shared -fPIC -o "$T/libcbtgone.so" "$T/gone.c" && cc -o "$T/needs_gone" "$T/main.c" -L"$T" -lcbtgone &&
    rm "$T/libcbtgone.so"
  : >"$T/step.log"
  run_step "needs_gone" 30 "$T/step.log" "$T/needs_gone" >/dev/null
  check "a binary missing its library exits 127 through run_step (RC=$RC)" [ "$RC" -eq 127 ]
  check "its ldd is in the step's log" has "$T/step.log" 'libcbtgone\.so => not found'
  HAVE_GPU=0
  judge gpu "$RC" "" && bad "127 without a GPU passed ($VERDICT)" || ok "127 without a GPU fails: $VERDICT"
else
  echo "SKIP: part 2 (a real 127) needs cc"
fi
: >"$T/step.log"
run_step "no such command" 30 "$T/step.log" "$T/no-such-command" >/dev/null
check "a missing command is 127 too (RC=$RC)" [ "$RC" -eq 127 ]
check "and its log says the binary does not exist" has "$T/step.log" 'no-such-command does not exist'

# ---- 3. reading ctest, compute-sanitizer and ncu ---------------------------------------------------
cat >"$T/ctest.txt" <<'EOF'
    Start 12: test_gpu_ring
1/4 Test #12: test_gpu_ring ....................***Skipped   0.01 sec
2/4 Test #13: test_ring ........................   Passed    0.20 sec
3/4 Test #14: test_gpu_stream ..................***Failed    1.02 sec
4/4 Test #15: test_gpu_kernels .................***Not Run   0.00 sec
EOF
ctest_counts "$T/ctest.txt"
check "ctest: 4 total, 1 passed, 1 skipped, 2 failed" [ "$T_TOTAL/$T_PASS/$T_SKIP/$T_FAIL" = 4/1/1/2 ]
check "ctest: the skipped one named" [ "$T_SKIPPED" = test_gpu_ring ]
check "ctest: the failed ones named" [ "$T_FAILED" = "test_gpu_stream test_gpu_kernels" ]
check "skip_reason reads 'SKIP: why'" [ "$(printf 'x\nSKIP: test_gpu_ring needs a CUDA device (no)\n' | skip_reason)" = "test_gpu_ring needs a CUDA device (no)" ]
check "skip_reason reads 'SKIP why'" [ "$(printf 'SKIP bench: no GPU\n' | skip_reason)" = "bench: no GPU" ]

printf '========= COMPUTE-SANITIZER\n[ PASSED ] 3 test(s).\n========= ERROR SUMMARY: 0 errors\n' >"$T/s"
sanitizer_result "$T/s" 0
check "memcheck 0 errors: passes ($S_NOTE)" [ "$S_RC" -eq 0 ]
printf '========= Invalid __global__ write of size 4 bytes\n========= ERROR SUMMARY: 2 errors\n' >"$T/s"
sanitizer_result "$T/s" 99
check "memcheck 2 errors: fails ($S_NOTE)" [ "$S_RC" -eq 1 ]
printf '========= Error: Device not supported\n' >"$T/s"
sanitizer_result "$T/s" 1
check "sanitizer refused (gVisor): a tool skip ($S_WHY)" [ "$S_RC" -eq "$TOOL_SKIP" ]
printf '========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n' >"$T/s"
sanitizer_result "$T/s" 99
check "racecheck 1 error: fails" [ "$S_RC" -eq 1 ]
printf '========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 2 warnings)\n' >"$T/s"
sanitizer_result "$T/s" 0
check "racecheck 0 errors, 2 warnings: passes ($S_NOTE)" [ "$S_RC" -eq 0 ]
printf 'SKIP: test_gpu_ring needs a CUDA device (unknown error)\n========= ERROR SUMMARY: 0 errors\n' >"$T/s"
sanitizer_result "$T/s" 77
check "a test that finds no device under the sanitizer: a tool skip" [ "$S_RC" -eq "$TOOL_SKIP" ]
printf 'a test failed its 20 ms bound\n========= ERROR SUMMARY: 0 errors\n' >"$T/s"
sanitizer_result "$T/s" 1
check "a test failing its timing under memcheck, 0 errors: passes with a note" [ "$S_RC" -eq 0 ]
printf 'compute-sanitizer: error while loading shared libraries\n' >"$T/s"
sanitizer_result "$T/s" 127
check "the sanitizer itself cannot start: 127" [ "$S_RC" -eq 127 ]

cat >"$T/n" <<'EOF'
==PROF== Connected to process 1234 (bench_scatter_gpu)
==PROF== Profiling "scatter_kernel": 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1234","bench_scatter_gpu","127.0.0.1","scatter_kernel(cbt_kspan, ScatterDev)","1","13","(256, 1, 1)","(1056, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","33,620,000"
"0","1234","bench_scatter_gpu","127.0.0.1","scatter_kernel(cbt_kspan, ScatterDev)","1","13","(256, 1, 1)","(1056, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","byte","33554432"
"0","1234","bench_scatter_gpu","127.0.0.1","scatter_kernel(cbt_kspan, ScatterDev)","1","13","(256, 1, 1)","(1056, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","20000"
EOF
if command -v python3 >/dev/null 2>&1; then
  ncu_result "$T/n" 0
  check "ncu: GB/s from the CSV ($N_LINE)" eval '[ "$N_RC" -eq 0 ] && echo "$N_LINE" | grep -q "= 3358.7 GB/s"'
else
  echo "SKIP: the ncu CSV check needs python3"
fi
printf '==ERROR== Failed to initialize the profiler: LibraryNotLoaded\n' >"$T/n"
ncu_result "$T/n" 1
check "ncu refused (gVisor): a tool skip ($N_WHY)" [ "$N_RC" -eq "$TOOL_SKIP" ]
printf '==WARNING== No kernels were profiled.\n' >"$T/n"
ncu_result "$T/n" 0
check "ncu ran but profiled nothing: fails ($N_WHY)" [ "$N_RC" -eq 1 ]

# ---- 4. the commit without .git ---------------------------------------------------------------------
mkdir -p "$T/tree/.carry"
printf 'commit=0123456789abcdef0123456789abcdef01234567\ndirty=3\nprepared=2026-12-01T10:00:00Z\n' >"$T/tree/.carry/commit"
c=$(commit_line "$T/tree" "$T/tree/.carry")
check "commit from .carry/commit: $c" eval 'echo "$c" | grep -q "^0123456789ab (3 files differed from it at 2026-12-01T10:00:00Z; from .carry/commit"'
rm "$T/tree/.carry/commit"
c=$(commit_line "$T/tree" "$T/tree/.carry")
check "no .git, no .carry/commit: says to run gpu-prepare.sh" eval 'echo "$c" | grep -q "^unknown .*bench/gpu-prepare.sh"'
printf 'commit=unknown\nprepared=2026-12-01T10:00:00Z\n' >"$T/tree/.carry/commit"
c=$(commit_line "$T/tree" "$T/tree/.carry")
check "a .carry/commit saying commit=unknown is named as such, not as missing: $c" \
  eval 'echo "$c" | grep -q "^unknown (no .git in this copy; .carry/commit says commit=unknown, prepared 2026-12-01" && ! echo "$c" | grep -q "no .carry/commit"'

# ---- 5. the whole script against fakes ---------------------------------------------------------------
# A copy of the script in a fake tree; fake nvidia-smi (a GPU), cmake, ctest,
# compute-sanitizer, ncu; fake binaries in the build dir. FAKE_MODE picks what they do.
F=$T/fake
mkdir -p "$F/bin" "$F/tree/bench" "$F/build/bench" "$F/build/tests" "$F/cmocka/usr/include" "$F/cmocka/usr/lib"
cp "$SRC/bench/gpu-check.sh" "$F/tree/bench/"
: >"$F/cmocka/usr/include/cmocka.h"
: >"$F/cmocka/usr/lib/libcmocka.so"
cat >"$F/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
  -L) [ "$FAKE_GPU" = 1 ] && echo "GPU 0: NVIDIA H200 (UUID: GPU-fake)" ;;
  *query*) echo "NVIDIA H200, 580.00, 143771 MiB" ;;
esac
exit 0
EOF
cat >"$F/bin/cmake" <<'EOF'
#!/bin/sh
case "$1" in
  --version) echo "cmake version ${FAKE_CMAKE_VERSION:-3.28.3}" ;;
  --build) echo "[1/1] fake build" ;;
  *) echo "-- cbt: CUDA=ON OTLP=OFF NVTX=ON CUPTI=ON tests=ON sanitize=''" ;;
esac
exit 0
EOF
cat >"$F/bin/ctest" <<'EOF'
#!/bin/sh
b=$2 # ctest --test-dir BUILD ...
mkdir -p "$b/Testing/Temporary"
if [ "$FAKE_MODE" = skip ]; then
  echo "1/2 Test #1: test_gpu_ring ....................***Skipped   0.01 sec"
  echo "SKIP: test_gpu_ring needs a CUDA device (fake)" >"$b/Testing/Temporary/LastTest.log"
else
  echo "1/2 Test #1: test_gpu_ring ....................   Passed    0.01 sec"
  : >"$b/Testing/Temporary/LastTest.log"
fi
echo "2/2 Test #2: test_ring ........................   Passed    0.01 sec"
exit 0
EOF
cat >"$F/bin/compute-sanitizer" <<'EOF'
#!/bin/sh
if [ "$FAKE_MODE" = refused ]; then echo "========= Error: Device not supported"; exit 1; fi
echo "========= ERROR SUMMARY: 0 errors"
exit 0
EOF
cat >"$F/bin/ncu" <<'EOF'
#!/bin/sh
[ "$1" = --version ] && { echo "fake ncu"; exit 0; }
echo "$*" >"$FAKE_NCU_ARGS"
echo '==ERROR== Failed to initialize the profiler: LibraryNotLoaded'
exit 1
EOF
cat >"$F/build/bench/bench_scatter_gpu" <<'EOF'
#!/bin/sh
if [ "$FAKE_MODE" = skip ]; then echo "SKIP: bench_scatter_gpu needs a CUDA device (fake)"; exit 0; fi
echo "SUMMARY scatter retrieve  1 ch: copy 3000.0 GB/s, off 2900.0 GB/s (96.7% of copy), per-launch +0.10%, per-CTA +0.50%"
exit 0
EOF
# the cbt command: demo writes its span, trace and recording files, replay the
# same span and trace files (so the replay step's cmp holds)
cat >"$F/build/cbt" <<'EOF'
#!/bin/sh
cmd=$1; shift
while [ $# -gt 0 ]; do
  case $1 in --spans|--output|--trace-output) echo fake >"$2"; shift ;; esac
  shift
done
[ "$cmd" = demo ] && echo "trace recording: 1 records, 1 bytes (fake)"
exit 0
EOF
printf '#!/bin/sh\necho publish_on 10 ns\nexit 0\n' >"$F/build/bench/bench_publish"
if [ -x "$T/needs_gone" ]; then
  cp "$T/needs_gone" "$F/build/bench/bench_scatter_cpu.127" # cannot start: its library is gone
fi
printf '#!/bin/sh\necho chunks 16\nexit 0\n' >"$F/build/bench/bench_scatter_cpu"
for t in test_gpu_kernels test_gpu_ring test_gpu_stream test_gpu_cupti; do
  printf '#!/bin/sh\nexit 0\n' >"$F/build/tests/$t"
done
# the nowait step's test: its figures, and the NVTX tool it is given
printf '#!/bin/sh\necho "NOWAIT create on a busy stream: 0.1 ms (nvtx=${NVTX_INJECTION64_PATH:-none})"\nexit 0\n' \
  >"$F/build/tests/test_gpu_nowait"
# the queue step's test: its figures
printf '#!/bin/sh\necho "QUEUE kernel behind a 100 ms spin: cbt.queue_ns 100.2 ms (fake)"\nexit 0\n' \
  >"$F/build/tests/test_gpu_queue"
: >"$F/build/tests/libcbt_nvtx_inject.so"
cp /bin/true "$F/build/tests/test_gpu_stream" # an ELF: the libraries step has one binary to ldd
chmod +x "$F"/bin/* "$F"/build/bench/* "$F"/build/cbt "$F"/build/tests/*

fake_run() { # MODE GPU [VAR=VALUE...]: run the fake tree's script, OUT=$T/out-MODE-GPU; sets FRC
  local mode=$1 gpu=$2
  shift 2
  RUNS=$((${RUNS:-0} + 1))
  FOUT=$T/out-$RUNS-$mode-$gpu
  FTXT=$T/run-$RUNS-$mode-$gpu.txt
  env -u CBT_EXPECT_GPU PATH="$F/bin:/usr/bin:/bin" FAKE_MODE=$mode FAKE_GPU=$gpu OUT="$FOUT" JOBS=1 \
    FAKE_NCU_ARGS="$T/ncu-args" CBT_GPU_DEV_PATHS="$T/no-dev-node" \
    CBT_GPU_BUILD="$F/build" CBT_CMOCKA_DIR="$F/cmocka" CBT_CMAKE="$F/bin/cmake" \
    CBT_COMPUTE_SANITIZER="$F/bin/compute-sanitizer" CBT_NCU="$F/bin/ncu" CBT_GPU_PYTHON=none CBT_GPU_CHECK_BUDGET=120 \
    "$@" bash "$F/tree/bench/gpu-check.sh" >"$FTXT" 2>&1
  FRC=$?
}
nfiles() { find "$1" -type f | wc -l; }

fake_run pass 1
check "fakes pass, GPU: exit 0 (got $FRC)" [ "$FRC" -eq 0 ]
check "fakes pass, GPU: summary finished, exit 0" eval 'has "$FOUT/summary.txt" "^status +finished" && has "$FOUT/summary.txt" "^exit +0$"'
check "fakes pass, GPU: the sanitizer ran (0 errors)" has "$FOUT/summary.txt" '^memcheck +test_gpu_kernels: ok \(0 errors\)'
check "fakes pass, GPU: test_gpu_cupti skipped under the sanitizer, with the reason" has "$FOUT/summary.txt" '^memcheck +test_gpu_cupti: skipped \(not run under compute-sanitizer: CUPTI'
check "fakes pass, GPU: ncu refused is a skip with the reason" has "$FOUT/summary.txt" '^ncu +8-chunk scatter launch: skipped \(refused: .*LibraryNotLoaded'
check "fakes pass, GPU: ncu profiles the 8-chunk retrieve (--chunks 8), one launch" \
  eval 'grep -q -- "--launch-count 1 .*bench_scatter_gpu --quick --chunks 8$" "$T/ncu-args"'
check "fakes pass, GPU: configured with -DCBT_TEST_TIMEOUT=60 (the tests' own TIMEOUT)" has "$FOUT/summary.txt" '^build +.*-DCBT_TEST_TIMEOUT=60'
check "fakes pass, GPU: ctest --timeout 60 too" has "$FOUT/tests.log" 'ctest .*--timeout 60'
check "fakes pass, GPU: the summary is printed last" eval '[ "$(tail -n 1 "$FTXT")" = "exit      0" ]'
check "fakes pass, GPU: <= 8 files in \$OUT ($(nfiles "$FOUT"))" [ "$(nfiles "$FOUT")" -le 8 ]
check "fakes pass, GPU: the nowait step ran test_gpu_nowait" has "$FOUT/summary.txt" '^nowait +test_gpu_nowait .*: ok$'
check "  with the NVTX test tool, its NOWAIT line in the summary" \
  has "$FOUT/summary.txt" '^ +create on a busy stream: 0\.1 ms \(nvtx=.*/libcbt_nvtx_inject\.so\)'
check "fakes pass, GPU: the queue step ran test_gpu_queue" has "$FOUT/summary.txt" '^queue +test_gpu_queue .*: ok$'
check "  its QUEUE line in the summary" has "$FOUT/summary.txt" '^ +kernel behind a 100 ms spin: cbt\.queue_ns 100\.2 ms \(fake\)'

fake_run skip 1
check "a GPU test and the bench skip ON A GPU machine: exit 1 (got $FRC)" [ "$FRC" -eq 1 ]
check "  the tests line says skipped on a machine with a GPU" has "$FOUT/summary.txt" '^tests +.*: FAILED: skipped on a machine with a GPU \(1 of 2 skipped: test_gpu_ring'
check "  the bench line says so too" has "$FOUT/summary.txt" '^scatter +bench_scatter_gpu: FAILED: skipped on a machine with a GPU \(bench_scatter_gpu needs a CUDA device'
check "  the exit line names them" has "$FOUT/summary.txt" '^exit +1 \(failed: .*bench_scatter_gpu'

fake_run skip 0
check "the same skips WITHOUT a GPU: exit 0 (got $FRC)" [ "$FRC" -eq 0 ]
check "  the bench is skipped, no device" has "$FOUT/summary.txt" '^scatter +bench_scatter_gpu: skipped, no device \(bench_scatter_gpu needs a CUDA device'
check "  the nowait step too" has "$FOUT/summary.txt" '^nowait +test_gpu_nowait .*: skipped, no device$'
check "  the queue step too" has "$FOUT/summary.txt" '^queue +test_gpu_queue .*: skipped, no device$'
check "  the demo and the tools too" eval 'has "$FOUT/summary.txt" "^demo +cbt demo --gpu: skipped, no device$" && has "$FOUT/summary.txt" "^racecheck +test_gpu_kernels: skipped, no device$"'

# no GPU found: nvidia-smi lists none, nothing under /dev
fake_run skip 0 CBT_EXPECT_GPU=1
check "CBT_EXPECT_GPU=1 and no GPU found: exit 1 (got $FRC)" [ "$FRC" -eq 1 ]
check "  a clear summary line" has "$FOUT/summary.txt" '^gpu +FAILED: CBT_EXPECT_GPU=1 \(a device machine\) but no GPU found: nvidia-smi -L listed no GPU'
check "  the exit line names it" has "$FOUT/summary.txt" '^exit +1 \(failed: no GPU found with CBT_EXPECT_GPU=1'
fake_run skip 1 CBT_EXPECT_GPU=1
check "CBT_EXPECT_GPU=1 with a GPU found: no such line" eval '! has "$FOUT/summary.txt" "CBT_EXPECT_GPU=1"'
# nvidia-smi fails (or is missing) but the device node is there: a GPU
printf '#!/bin/sh\nexit 9\n' >"$F/bin/nvidia-smi.broken"
chmod +x "$F/bin/nvidia-smi.broken"
mv "$F/bin/nvidia-smi" "$F/bin/nvidia-smi.ok"
mv "$F/bin/nvidia-smi.broken" "$F/bin/nvidia-smi"
: >"$T/fake-nvidia0"
fake_run skip 0 CBT_GPU_DEV_PATHS="$T/fake-nvidia0"
check "nvidia-smi exits 9 but a device node exists: a GPU machine, so the skips fail (exit $FRC)" [ "$FRC" -eq 1 ]
check "  the device line names the node and nvidia-smi's failure" has "$FOUT/summary.txt" "^device +a GPU by $T/fake-nvidia0 \(nvidia-smi -L exited 9"
check "  the bench's skip fails" has "$FOUT/summary.txt" '^scatter +bench_scatter_gpu: FAILED: skipped on a machine with a GPU'
fake_run skip 0 CBT_EXPECT_GPU=1
check "nvidia-smi exits 9, no node, CBT_EXPECT_GPU=1: exit 1 saying why (got $FRC)" \
  eval '[ "$FRC" -eq 1 ] && has "$FOUT/summary.txt" "^gpu +FAILED: CBT_EXPECT_GPU=1 .*nvidia-smi -L exited 9"'
mv "$F/bin/nvidia-smi" "$F/bin/nvidia-smi.broken"
fake_run skip 0 CBT_GPU_DEV_PATHS="$T/fake-nvidia0"
check "nvidia-smi not installed but a device node exists: a GPU machine (exit $FRC)" \
  eval '[ "$FRC" -eq 1 ] && has "$FOUT/summary.txt" "^device +a GPU by .*nvidia-smi not installed"'
mv "$F/bin/nvidia-smi.ok" "$F/bin/nvidia-smi"
# a GPU test that PASSED where no GPU was found: a contradiction, a failure
fake_run pass 0
check "test_gpu_ring passed with no GPU found: exit 1 (got $FRC)" [ "$FRC" -eq 1 ]
check "  the tests line says CONTRADICTION" has "$FOUT/summary.txt" '^tests +.*FAILED \(exit 1\).*CONTRADICTION: test_gpu_ring passed but no GPU was found'

fake_run refused 1
check "the sanitizer refuses the device: a skip, exit 0 (got $FRC)" [ "$FRC" -eq 0 ]
check "  with its reason, once for every binary" eval '[ "$(grep -c "skipped (refused: Error: Device not supported" "$FOUT/summary.txt")" -eq 4 ]'

fake_run pass 1 CBT_CMOCKA_DIR="$T/nowhere"
check "tests not built (no cmocka) ON A GPU machine: exit 1 (got $FRC)" [ "$FRC" -eq 1 ]
check "  the tests line says why" has "$FOUT/summary.txt" '^tests +.*FAILED: skipped on a machine with a GPU \(tests not built: no cmocka.h'

if [ -f "$F/build/bench/bench_scatter_cpu.127" ]; then
  mv "$F/build/bench/bench_scatter_cpu" "$F/build/bench/bench_scatter_cpu.ok"
  mv "$F/build/bench/bench_scatter_cpu.127" "$F/build/bench/bench_scatter_cpu"
  fake_run pass 0
  check "a bench that cannot start (127) WITHOUT a GPU: exit 1, not 'skipped (no GPU)' (got $FRC)" [ "$FRC" -eq 1 ]
  check "  the line says could not start" has "$FOUT/summary.txt" '^cpu ref +bench_scatter_cpu --quick: FAILED: could not start \(exit 127'
  check "  its log has the ldd" has "$FOUT/bench_scatter_cpu.log" 'libcbtgone\.so => not found'
  mv "$F/build/bench/bench_scatter_cpu" "$F/build/bench/bench_scatter_cpu.127"
  mv "$F/build/bench/bench_scatter_cpu.ok" "$F/build/bench/bench_scatter_cpu"
fi

# a partial summary while it runs: a bench that sleeps, the run killed (-9)
# from outside while it sleeps, as a whole-call timeout would
printf '#!/bin/sh\necho chunks 16\nsleep 15\n' >"$F/build/bench/bench_scatter_cpu"
FOUT=$T/out-killed
env -u CBT_EXPECT_GPU PATH="$F/bin:/usr/bin:/bin" FAKE_MODE=pass FAKE_GPU=1 OUT="$FOUT" JOBS=1 CBT_GPU_BUILD="$F/build" \
  CBT_GPU_DEV_PATHS="$T/no-dev-node" \
  CBT_CMOCKA_DIR="$F/cmocka" CBT_CMAKE="$F/bin/cmake" CBT_COMPUTE_SANITIZER=none CBT_NCU=none CBT_GPU_PYTHON=none \
  bash "$F/tree/bench/gpu-check.sh" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  grep -q 'while "bench_scatter_cpu --quick" ran' "$FOUT/summary.txt" 2>/dev/null &&
    grep -q 'chunks 16' "$FOUT/bench_scatter_cpu.log" 2>/dev/null && break
  sleep 0.1
done
exec 3>&2 2>/dev/null # not bash's "Killed" line
kill -KILL "$pid"
wait "$pid"
exec 2>&3 3>&-
check "a run killed mid-step leaves a partial summary naming the running step" \
  has "$FOUT/summary.txt" '^status +PARTIAL, .* while "bench_scatter_cpu --quick" ran'
check "  with the finished steps' lines" has "$FOUT/summary.txt" '^publish +bench_publish --quick: ok'
check "  and their logs" has "$FOUT/bench_publish.log" 'publish_on'
check "  and the running step's output so far" has "$FOUT/bench_scatter_cpu.log" 'chunks 16'
printf '#!/bin/sh\necho chunks 16\nexit 0\n' >"$F/build/bench/bench_scatter_cpu"

fake_run pass 1 FAKE_CMAKE_VERSION=3.22.1
check "CMake 3.22 (< 3.24): stops early, exit 2 (got $FRC)" [ "$FRC" -eq 2 ]
check "  the summary says the project needs >= 3.24" has "$FOUT/summary.txt" '^cmake +STOPPED: the project needs CMake >= 3.24 .*3\.22\.1'
check "  nothing was configured" eval '[ ! -s "$FOUT/configure.log" ]'

if [ "$FAILED" -ne 0 ]; then
  echo "gpu_check_selftest: $FAILED checks FAILED"
  exit 1
fi
echo "gpu_check_selftest: every check passed"
