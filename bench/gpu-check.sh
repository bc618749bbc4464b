#!/usr/bin/env bash
# bench/gpu-check.sh — the one-shot device check: build cbt for the H200
# (Release, sm_90), run the GPU tests, the no-wait check of the CUDA paths
# (test_gpu_nowait, step "nowait"), a kernel queued behind a long one
# (test_gpu_queue, step "queue"), the scatter and L2-load benchmark, the
# GPU demo, the host benchmarks, then compute-sanitizer (memcheck, racecheck)
# over the GPU tests and ncu over one 8-chunk scatter launch; log each step to $OUT as
# it goes and keep $OUT/summary.txt up to date after every step (a timeout of
# the whole call leaves a partial one). The summary is printed LAST.
# docs/gpu-script.md says how to prepare (bench/gpu-prepare.sh), how to run it
# with the device tool and how to record what it prints.
#
#   bash bench/gpu-check.sh
#
# Environment:
#   OUT                    where the logs go (default: a new temp dir); 8 files
#                          at most are written there (the device tool returns 8)
#   JOBS                   build parallelism (default: nproc)
#   CBT_GPU_BUILD          build directory (default: build-gpu)
#   CBT_GPU_CHECK_BUDGET   seconds for the whole script (default 400); each
#                          step's timeout is cut to what is left
#   CBT_CARRY_DIR          what bench/gpu-prepare.sh made (default: .carry):
#                          cmocka/ (used when the system has no cmocka.h) and
#                          commit (read when .git did not travel)
#   CBT_CMOCKA_DIR         an unpacked cmocka tree to use instead (dpkg -x of
#                          libcmocka-dev and libcmocka0)
#   CBT_GPU_TESTS_REGEX    ctest -R regex (default: gpu|cuda|kernel|ring: the GPU
#                          tests, plus the cheap kernel-reference and ring tests)
#   CBT_CMAKE              the cmake to use (default: the first >= 3.24 found)
#   CBT_EXPECT_GPU         1: this machine has a GPU (the device command sets it):
#                          finding none is a FAILURE, not a dry run
#   CBT_GPU_DEV_PATHS      where a GPU shows when nvidia-smi fails (default:
#                          /dev/nvidia0 /proc/driver/nvidia/gpus/*; the selftest's hook)
#   CBT_COMPUTE_SANITIZER, CBT_NCU   the tools' paths (default: found on PATH or
#                          in /usr/local/cuda); "none" leaves the step out
#   CBT_GPU_PYTHON         the python3 that builds the cbt package for its CUDA
#                          stream test (default python3, from the wheels
#                          gpu-prepare.sh carried in .carry/pywheels); "none"
#                          leaves the step out (the selftest's fakes)
#
# Exit status: 0 when every step passed; 1 when one failed; 2 when it stopped
# before building (no CMake >= 3.24). The rule, one function (judge, below):
# a failure is a build or test failure, a timeout, a step that could not
# start (127: command or shared library not found; its ldd is logged), a
# benchmark's correctness or CUDA error, a memcheck/racecheck error, and, ON A
# MACHINE WITH A GPU, any skip: a GPU test skipped (ctest "Skipped" or a
# "SKIP:" line), a benchmark's SKIP line, the tests not built. Without a GPU
# (a dry run) those skips are expected and pass as "skipped, no device".
# Missed performance targets are printed as MISSED and do not fail it; a tool
# that is missing or refuses the device (gVisor: "Device not supported") is
# reported skipped with the reason. A GPU is present when nvidia-smi -L lists
# one, or (nvidia-smi missing, failing, timing out) /dev/nvidia0 or
# /proc/driver/nvidia/gpus/* exists; with CBT_EXPECT_GPU=1 finding none fails
# the run, and so does a test_gpu_* that passed where no GPU was found (a
# contradiction: the detection is wrong). bash tests/gpu_check_selftest.sh checks
# these rules; tests/gpu_check_dryrun.sh runs the whole script without a GPU.
set -euo pipefail

# ---- a step's RC: the command's exit status, or one of these (not run) --------------
NO_DEVICE=200 # not run: this machine has no GPU (127 used to mean this; it no longer does)
NOT_BUILT=201 # not run: its binary was not built
NO_TIME=202   # not run: the time budget was spent
TOOL_SKIP=203 # an optional tool is missing, refused the device, or timed out: not judged
# 124/137: timed out; 126: cannot execute; 127: could not start (not found, or a
# shared library missing, e.g. libcudart.so.13): always a FAILURE
CMAKE_MIN=3.24
MAX_OUT_FILES=8

START=${START:-$(date +%s)}
HAVE_GPU=${HAVE_GPU:-0}
BUDGET=${CBT_GPU_CHECK_BUDGET:-400}
STATUS=0
FINISHED=0
CURRENT=""
SUM=""
BODY=""
VERDICT=""
FAILS=()

elapsed() { echo $(($(date +%s) - START)); }
say() { echo "[gpu-check $(elapsed)s] $*"; }
trim() { tr -d '\r' | sed -E 's/^ *==[A-Z]+== *//; s/^[= ]*//; s/[[:space:]]+/ /g' | cut -c1-"${1:-140}"; }

# judge KIND RC SKIP — THE rule: sets VERDICT, returns 0 (passes) or 1 (fails).
#   KIND  gpu: the GPU tests, bench_scatter_gpu, the demo (they need the device)
#         core: configure, build, libraries, host benchmarks
#         tool: compute-sanitizer, ncu (optional: missing or refused = skipped)
#   RC    the step's exit status, or NO_DEVICE / NOT_BUILT / NO_TIME / TOOL_SKIP
#   SKIP  why the step skipped itself (its SKIP line, ctest "Skipped", tests not
#         built); empty when it did not
judge() {
  local kind=$1 rc=$2 skip=${3:-}
  case $rc in
  0)
    if [ -z "$skip" ]; then
      VERDICT=ok
    elif [ "$kind" = tool ]; then
      VERDICT="skipped ($skip)"
    elif [ "$HAVE_GPU" -eq 1 ]; then
      VERDICT="FAILED: skipped on a machine with a GPU ($skip)"
      return 1
    else
      VERDICT="skipped, no device ($skip)"
    fi
    ;;
  "$NO_DEVICE")
    if [ "$HAVE_GPU" -eq 1 ]; then
      VERDICT="FAILED: not run for want of a GPU on a machine with one${skip:+ ($skip)}"
      return 1
    fi
    VERDICT="skipped, no device${skip:+ ($skip)}"
    ;;
  "$TOOL_SKIP")
    VERDICT="skipped (${skip:-not available})"
    if [ "$kind" != tool ]; then VERDICT="FAILED: $VERDICT"; return 1; fi
    ;;
  "$NO_TIME")
    VERDICT="not run: the ${BUDGET}s budget was spent"
    if [ "$kind" != tool ]; then VERDICT="FAILED: $VERDICT"; return 1; fi
    ;;
  "$NOT_BUILT") VERDICT="FAILED: not built${skip:+ ($skip)}"; return 1 ;;
  124 | 137) VERDICT="FAILED: timed out"; return 1 ;;
  126) VERDICT="FAILED: cannot execute (exit 126; ldd in the log)"; return 1 ;;
  127) VERDICT="FAILED: could not start (exit 127: a command or a shared library not found; ldd in the log)"; return 1 ;;
  *) VERDICT="FAILED (exit $rc)"; return 1 ;;
  esac
  return 0
}

# sum_add LINE... — add lines to the summary's body (kept outside $OUT)
sum_add() {
  [ -n "$BODY" ] || return 0
  local l
  for l in "$@"; do
    [ -z "$l" ] || printf '%s\n' "$l" >>"$BODY"
  done
}

# record TAG LABEL KIND RC SKIP [NOTE] — judge one step, count a failure, add its
# line to the summary and rewrite summary.txt
record() {
  local tag=$1 label=$2 kind=$3 rc=$4 skip=${5:-} note=${6:-} ok=1
  judge "$kind" "$rc" "$skip" || ok=0
  if [ -n "$note" ]; then
    if [ "$ok" -eq 1 ] && [ "$VERDICT" = ok ]; then VERDICT="ok ($note)"; else VERDICT="$VERDICT; $note"; fi
  fi
  if [ "$ok" -eq 0 ]; then
    STATUS=1
    FAILS+=("$label")
  fi
  sum_add "$(printf '%-9s %s: %s' "$tag" "$label" "$VERDICT")"
  write_summary
  return 0
}

# write_summary — summary.txt as far as the script has got (rewritten after
# every step, so a whole-call timeout still leaves one)
write_summary() {
  [ -n "$SUM" ] || return 0
  {
    echo "==================== cbt gpu-check summary ===================="
    if [ "$FINISHED" -eq 1 ]; then
      echo "status    finished in $(elapsed)s of a ${BUDGET}s budget"
    else
      echo "status    PARTIAL, written at $(elapsed)s of a ${BUDGET}s budget${CURRENT:+ while \"$CURRENT\" ran}: the script did not finish (yet)"
    fi
    echo "date      $DATE_START"
    echo "commit    $COMMIT"
    if [ "$HAVE_GPU" -eq 1 ]; then
      echo "device    $DEVICE"
    else
      echo "device    none: no GPU here (a dry run), so the GPU tests, bench_scatter_gpu, the demo and the tools skip"
    fi
    cat "$BODY"
    if [ "$FINISHED" -eq 1 ]; then
      local files n
      files=$(find "$OUT" -maxdepth 1 -type f -printf '%f\n' | sort | tr '\n' ' ')
      n=$(find "$OUT" -type f | wc -l)
      if [ "$n" -gt "$MAX_OUT_FILES" ]; then
        echo "logs      $OUT: $n files, MORE than the $MAX_OUT_FILES the device tool returns: $files"
      else
        echo "logs      $OUT: $n files: $files"
      fi
      if [ "$STATUS" -eq 0 ]; then
        echo "exit      0"
      else
        echo "exit      $STATUS (failed: ${FAILS[*]:-})"
      fi
    fi
  } >"$SUM"
}

# step_limit CAP: seconds a step may take: CAP, cut to what is left of the
# budget (minus 20 s for the summary); 0 when too little is left to start it.
step_limit() {
  local left=$((BUDGET - $(elapsed) - 20))
  if [ "$left" -lt 15 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# log_ldd LOG BIN — what BIN links against and where it looks (a failing step's log)
log_ldd() {
  local log=$1 bin=$2
  case $bin in */*) ;; *) bin=$(command -v "$bin" 2>/dev/null || echo "$bin") ;; esac
  {
    echo
    echo "==== ldd $bin (the step failed) ===="
    if [ -f "$bin" ]; then
      ldd "$bin" 2>&1 || true
      readelf -d "$bin" 2>/dev/null | grep -E 'NEEDED|RUNPATH|RPATH' || true
      echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    else
      echo "$bin does not exist"
    fi
  } >>"$log"
}

# run_step NAME CAP LOG [--bin BIN] CMD... — CMD under timeout, its output
# appended to LOG (STEP_OFF: LOG's size before it, for step_text); sets RC and
# SECS (RC=NO_TIME when the budget is spent). A failing step gets the ldd of
# BIN (default: CMD's first word) appended to LOG.
run_step() {
  local name=$1 cap=$2 log=$3
  shift 3
  local bin=""
  if [ "${1:-}" = --bin ]; then
    bin=$2
    shift 2
  fi
  [ -n "$bin" ] || bin=$1
  STEP_OFF=$(stat -c %s "$log" 2>/dev/null || echo 0)
  local lim t0
  lim=$(step_limit "$cap")
  if [ "$lim" -eq 0 ]; then
    echo "not run: the time budget (${BUDGET}s) is spent" >>"$log"
    say "$name: NOT RUN (time budget spent)"
    RC=$NO_TIME
    SECS=0
    return 0
  fi
  CURRENT=$name
  write_summary
  t0=$(date +%s)
  say "$name (limit ${lim}s) ..."
  RC=0
  { echo "\$ $*"; echo; } >>"$log"
  timeout -k 10 "$lim" "$@" >>"$log" 2>&1 </dev/null || RC=$?
  SECS=$(($(date +%s) - t0))
  CURRENT=""
  if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
    echo "TIMEOUT after ${lim}s" >>"$log"
    say "$name: TIMED OUT after ${lim}s"
  elif [ "$RC" -ne 0 ]; then
    say "$name: exit $RC (${SECS}s); the end of $(basename "$log"):"
    tail -n 30 "$log" | sed 's/^/    /'
  else
    say "$name: ok (${SECS}s)"
  fi
  if [ "$RC" -ne 0 ]; then log_ldd "$log" "$bin"; fi
  return 0
}

# step_text LOG — what the last run_step appended to LOG
step_text() { tail -c +$((STEP_OFF + 1)) "$1"; }

# skip_reason — the first SKIP line on stdin ("SKIP: why" or "SKIP why"), reason only
skip_reason() { grep -m1 -E '^SKIP[: ]' | sed -E 's/^SKIP:? *//' | trim 120 || true; }

# ctest_counts FILE — from ctest's output: T_TOTAL T_PASS T_SKIP T_FAIL and the
# names of the skipped (T_SKIPPED) and failed (T_FAILED) tests
ctest_counts() {
  local lines
  lines=$(grep -E '^ *[0-9]+/[0-9]+ +Test +#[0-9]+: ' "$1" || true)
  T_TOTAL=0 T_PASS=0 T_SKIP=0 T_FAIL=0 T_SKIPPED="" T_FAILED=""
  [ -n "$lines" ] || return 0
  T_TOTAL=$(printf '%s\n' "$lines" | wc -l)
  T_PASS=$(printf '%s\n' "$lines" | grep -cE ' Passed +[0-9.]+ sec' || true)
  T_SKIP=$(printf '%s\n' "$lines" | grep -c 'Skipped' || true)
  T_FAIL=$((T_TOTAL - T_PASS - T_SKIP))
  local name='s/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: +([^ ]+) .*/\1/'
  T_SKIPPED=$(printf '%s\n' "$lines" | grep 'Skipped' | sed -E "$name" | tr '\n' ' ' | sed 's/ $//' || true)
  T_FAILED=$(printf '%s\n' "$lines" | grep -vE ' Passed +[0-9.]+ sec|Skipped' | sed -E "$name" | tr '\n' ' ' | sed 's/ $//' || true)
}

# sanitizer_result FILE RC — compute-sanitizer's output and exit status to
# S_RC (for judge), S_WHY (a skip's reason) and S_NOTE
sanitizer_result() {
  local f=$1 rc=$2 line n w
  S_RC=0 S_WHY="" S_NOTE=""
  # the sanitizer's own lines begin with "========="
  if line=$(grep -m1 -E '^=+ .*(Device not supported|Failed to initialize|Unable to (create|initialize)|not supported on this|CUDA_ERROR_NOT_SUPPORTED)' "$f"); then
    S_RC=$TOOL_SKIP
    S_WHY="refused: $(echo "$line" | trim 100)"
    return 0
  fi
  case $rc in
  124 | 137) S_RC=$TOOL_SKIP; S_WHY="timed out under the sanitizer: not judged"; return 0 ;;
  126 | 127) S_RC=$rc; return 0 ;;
  esac
  if line=$(grep -m1 -E 'RACECHECK SUMMARY: ' "$f"); then
    n=$(echo "$line" | sed -nE 's/.*\(([0-9]+) errors?.*/\1/p')
    w=$(echo "$line" | sed -nE 's/.*, ([0-9]+) warnings?\).*/\1/p')
  else
    n=$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) errors?.*/\1/p' "$f" | tail -n 1)
    w=""
  fi
  if [ -z "$n" ]; then
    S_RC=$([ "$rc" -eq 0 ] && echo 1 || echo "$rc")
    S_NOTE="no ERROR SUMMARY from the sanitizer"
  elif [ "$n" -gt 0 ] || [ "$rc" -eq 99 ]; then
    S_RC=1
    S_NOTE="$n errors (see tests.log)"
  elif [ "$rc" -eq 77 ] || grep -qE '^SKIP[: ]' "$f"; then
    S_RC=$TOOL_SKIP
    S_WHY="the test skipped under the sanitizer: $(skip_reason <"$f")"
  else
    S_NOTE="0 errors${w:+, $w warnings}"
    if [ "$rc" -ne 0 ]; then
      S_NOTE="$S_NOTE; the test itself exited $rc under the sanitizer (its timing bounds need not hold there; the plain ctest run judges it)"
    fi
  fi
  return 0
}

# ncu_result FILE RC — ncu's output (--csv) to N_RC, N_WHY and N_LINE (the figures)
ncu_result() {
  local f=$1 rc=$2 line
  N_RC=0 N_WHY="" N_LINE=""
  if N_LINE=$(python3 - "$f" <<'PY' 2>/dev/null
import csv, sys
hdr, rows = None, []
for line in open(sys.argv[1], errors="replace"):
    if not line.startswith('"'):
        continue
    r = next(csv.reader([line]))
    if "Metric Name" in r:
        hdr = r
    elif hdr and len(r) == len(hdr):
        rows.append(dict(zip(hdr, r)))
size = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
        "KB": 1e3, "MB": 1e6, "GB": 1e9}
secs = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
        "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
m, k = {}, None
for r in rows:
    if r.get("Metric Name") in ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"):
        if k is None:
            k = r
        if r.get("ID") == k.get("ID"):
            m[r["Metric Name"]] = (r.get("Metric Unit", ""), float(r["Metric Value"].replace(",", "")))
if len(m) < 3:
    sys.exit(1)
rd = m["dram__bytes_read.sum"][1] * size.get(m["dram__bytes_read.sum"][0], 1)
wr = m["dram__bytes_write.sum"][1] * size.get(m["dram__bytes_write.sum"][0], 1)
t = m["gpu__time_duration.sum"][1] * secs.get(m["gpu__time_duration.sum"][0], 1e-9)
name = k.get("Kernel Name", "?").split("(")[0]
print("%s grid %s block %s: DRAM read %.1f MB + written %.1f MB in %.1f us = %.1f GB/s"
      % (name, k.get("Grid Size", "?").replace(" ", ""), k.get("Block Size", "?").replace(" ", ""),
         rd / 1e6, wr / 1e6, t * 1e6, (rd + wr) / t / 1e9))
PY
  ); then
    return 0
  fi
  N_LINE=""
  # ncu's own lines begin with ==ERROR==, ==WARNING==, ==PROF==
  if line=$(grep -m1 -E '^==[A-Z]+==.*(ERR_NVGPUCTRPERM|LibraryNotLoaded|Failed to initialize the profiler|Device not supported|not supported on this (device|platform)|Profiling is not supported)' "$f"); then
    N_RC=$TOOL_SKIP
    N_WHY="refused: $(echo "$line" | trim 100)"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    N_RC=$TOOL_SKIP
    N_WHY="timed out before a scatter launch was profiled"
  elif [ "$rc" -eq 126 ] || [ "$rc" -eq 127 ]; then
    N_RC=$rc
  elif ! command -v python3 >/dev/null 2>&1; then
    N_RC=$TOOL_SKIP
    N_WHY="no python3 to read ncu's CSV: the raw rows are in bench_scatter_gpu.log"
  else
    N_RC=1
    line=$(grep -m1 -E '==(ERROR|WARNING)==' "$f" | trim 100 || true)
    N_WHY="no dram/time metrics in ncu's output${line:+: $line}"
  fi
  return 0
}

# commit_line ROOT CARRY — the commit this tree is: from git, else from
# CARRY/commit (bench/gpu-prepare.sh writes it; .git does not travel)
commit_line() {
  local root=$1 carry=$2 top sha dirty when
  top=$(git -C "$root" rev-parse --show-toplevel 2>/dev/null || true)
  if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(cd "$root" && pwd -P)" ]; then
    echo "$(git -C "$root" rev-parse --short=12 HEAD) ($(git -C "$root" status --porcelain 2>/dev/null | wc -l) files differ from it)"
  elif [ -f "$carry/commit" ] && grep -q '^commit=[0-9a-f]' "$carry/commit"; then
    sha=$(sed -n 's/^commit=//p' "$carry/commit" | head -n 1)
    dirty=$(sed -n 's/^dirty=//p' "$carry/commit" | head -n 1)
    when=$(sed -n 's/^prepared=//p' "$carry/commit" | head -n 1)
    echo "${sha:0:12} (${dirty:-?} files differed from it at $when; from $(basename "$carry")/commit: no .git in this copy)"
  elif [ -f "$carry/commit" ]; then
    sha=$(sed -n 's/^commit=//p' "$carry/commit" | head -n 1)
    when=$(sed -n 's/^prepared=//p' "$carry/commit" | head -n 1)
    echo "unknown (no .git in this copy; $(basename "$carry")/commit says commit=${sha:-nothing}${when:+, prepared $when}: bench/gpu-prepare.sh ran outside a git checkout's top)"
  else
    echo "unknown (no .git in this copy of the tree, and no $(basename "$carry")/commit: run bench/gpu-prepare.sh before the call)"
  fi
}

# version_ge A B — A >= B (dotted numbers)
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]; }

# find_cmake — CMAKE and CMAKE_VER: CBT_CMAKE, else the first cmake >= CMAKE_MIN
# on PATH or in the usual places; CMAKE_SEEN lists what was looked at
find_cmake() {
  local c v cands=()
  CMAKE="" CMAKE_VER="" CMAKE_SEEN=""
  if [ -n "${CBT_CMAKE:-}" ]; then
    cands=("$CBT_CMAKE")
  else
    mapfile -t cands < <(type -ap cmake 2>/dev/null || true)
    cands+=(/usr/local/bin/cmake /usr/bin/cmake /opt/torch/.venv/bin/cmake)
  fi
  for c in "${cands[@]}"; do
    [ -x "$c" ] || continue
    v=$("$c" --version 2>/dev/null | sed -nE '1s/^cmake version ([0-9][0-9.]*).*/\1/p')
    CMAKE_SEEN="${CMAKE_SEEN:+$CMAKE_SEEN, }$c ${v:-(no version)}"
    if [ -n "$v" ] && version_ge "$v" "$CMAKE_MIN"; then
      CMAKE=$c
      CMAKE_VER=$v
      return 0
    fi
  done
  return 1
}

# find_tool NAME OVERRIDE — the tool's path, or nothing ("none" leaves it out)
find_tool() {
  local name=$1 over=${2:-} p
  if [ -n "$over" ]; then
    [ "$over" != none ] && [ -x "$over" ] && echo "$over"
    return 0
  fi
  for p in $(command -v "$name" 2>/dev/null) /usr/local/cuda/bin/$name /usr/local/cuda/compute-sanitizer/$name \
    /opt/nvidia/nsight-compute/*/$name; do
    if [ -x "$p" ]; then
      echo "$p"
      return 0
    fi
  done
  return 0
}

# ======================================================================================
main() {
  cd "$(dirname "$0")/.."
  ROOT=$PWD
  JOBS=${JOBS:-$(nproc)}
  BUILD=${CBT_GPU_BUILD:-build-gpu}
  TESTS_REGEX=${CBT_GPU_TESTS_REGEX:-gpu|cuda|kernel|ring}
  CARRY=${CBT_CARRY_DIR:-$ROOT/.carry}
  if [ -z "${OUT:-}" ]; then
    OUT=$(mktemp -d /tmp/cbt-gpu-check.XXXXXX)
  fi
  mkdir -p "$OUT"
  WORK=$(mktemp -d /tmp/cbt-gpu-check-work.XXXXXX) # scratch, never in $OUT
  trap 'rm -rf "$WORK"' EXIT
  BODY=$WORK/body
  : >"$BODY"
  SUM=$OUT/summary.txt
  DATE_START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  HAVE_GPU=0
  DEVICE="none"
  COMMIT=$(commit_line "$ROOT" "$CARRY")

  # ---- 1. the machine ----------------------------------------------------------------
  DEVLOG=$OUT/device.log
  : >"$DEVLOG"
  {
    echo "date: $DATE_START"
    echo "host: $(uname -srm), $(nproc) CPUs"
    echo "commit: $COMMIT"
    echo
  } >>"$DEVLOG"
  local smi_why=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    local smi_rc=0
    timeout 30 nvidia-smi -L >>"$DEVLOG" 2>&1 || smi_rc=$?
    if [ "$smi_rc" -eq 0 ] && grep -q '^GPU [0-9]' "$DEVLOG"; then
      HAVE_GPU=1
      # read-only queries: nothing here changes the card's settings
      DEVICE=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total \
        --format=csv,noheader 2>/dev/null | head -n 1 || true)
      [ -n "$DEVICE" ] || DEVICE=$(grep -m1 '^GPU 0' "$DEVLOG" | sed 's/^GPU 0: //')
      timeout 30 nvidia-smi >>"$DEVLOG" 2>&1 || true
    else
      case $smi_rc in
      0) smi_why="nvidia-smi -L listed no GPU" ;;
      124 | 137) smi_why="nvidia-smi -L timed out (30 s)" ;;
      *) smi_why="nvidia-smi -L exited $smi_rc" ;;
      esac
      echo "$smi_why" >>"$DEVLOG"
    fi
  else
    smi_why="nvidia-smi not installed"
    echo "nvidia-smi: not installed" >>"$DEVLOG"
  fi
  # nvidia-smi can be missing or broken where the driver and the card are fine
  local dp seen=""
  if [ "$HAVE_GPU" -ne 1 ]; then
    for dp in ${CBT_GPU_DEV_PATHS:-/dev/nvidia0 /proc/driver/nvidia/gpus/*}; do
      if [ -e "$dp" ]; then seen="${seen:+$seen }$dp"; fi
    done
    if [ -n "$seen" ]; then
      HAVE_GPU=1
      DEVICE="a GPU by $seen ($smi_why; no name or memory known)"
      echo "GPU present by $seen although $smi_why" >>"$DEVLOG"
    fi
  fi
  NO_GPU_WHY="$smi_why; no ${CBT_GPU_DEV_PATHS:-/dev/nvidia0 or /proc/driver/nvidia/gpus/*}"
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
  SANITIZER=$(find_tool compute-sanitizer "${CBT_COMPUTE_SANITIZER:-}")
  NCU=$(find_tool ncu "${CBT_NCU:-}")
  {
    echo
    echo "cc: $(cc --version 2>/dev/null | head -n 1 || echo none)"
    echo "compute-sanitizer: ${SANITIZER:-not found} $([ -n "$SANITIZER" ] && timeout 30 "$SANITIZER" --version 2>/dev/null | tail -n 1)"
    echo "ncu: ${NCU:-not found} $([ -n "$NCU" ] && timeout 30 "$NCU" --version 2>/dev/null | tail -n 1)"
    echo "cuobjdump: $(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null || echo not found)"
    echo "python3: $(python3 --version 2>&1 || echo none)"
  } >>"$DEVLOG" 2>&1 || true

  # ---- 2. CMake >= 3.24, checked before anything is built -----------------------------
  if ! find_cmake; then
    {
      echo
      echo "cmake: none >= $CMAKE_MIN found (looked at: ${CMAKE_SEEN:-no cmake at all})"
    } >>"$DEVLOG"
    say "STOP: this project needs CMake >= $CMAKE_MIN (cmake_minimum_required); found: ${CMAKE_SEEN:-no cmake}"
    sum_add "cmake     STOPPED: the project needs CMake >= $CMAKE_MIN (CMakeLists.txt's cmake_minimum_required); found: ${CMAKE_SEEN:-no cmake at all}; nothing was built"
    FAILS+=("cmake >= $CMAKE_MIN")
    STATUS=2
    FINISHED=1
    write_summary
    echo
    cat "$SUM"
    exit 2
  fi
  CTEST=$(dirname "$CMAKE")/ctest
  [ -x "$CTEST" ] || CTEST=$(command -v ctest || echo ctest)
  { echo; echo "cmake: $CMAKE $CMAKE_VER; ctest: $CTEST"; } >>"$DEVLOG"
  say "device: $DEVICE; nvcc: $NVCC_VER; cmake: $CMAKE_VER; jobs: $JOBS; logs: $OUT"
  sum_add "cmake     $CMAKE_VER ($CMAKE): ok, >= $CMAKE_MIN"
  if [ "${CBT_EXPECT_GPU:-0}" = 1 ] && [ "$HAVE_GPU" -ne 1 ]; then
    say "FAILED: CBT_EXPECT_GPU=1 but no GPU found ($NO_GPU_WHY)"
    sum_add "gpu       FAILED: CBT_EXPECT_GPU=1 (a device machine) but no GPU found: $NO_GPU_WHY; every GPU step below reads \"no device\", but this run FAILS"
    STATUS=1
    FAILS+=("no GPU found with CBT_EXPECT_GPU=1")
  fi
  write_summary

  # ---- 3. cmocka: the system's, CBT_CMOCKA_DIR, the carried one, or none -------------------
  CMOCKA="none"
  CMOCKA_ARGS=(-DCBT_BUILD_TESTS=OFF)
  CMOCKA_LIBDIR=""
  use_cmocka_tree() { # DIR -> 0 when it holds cmocka.h and libcmocka.so*
    local d=$1 inc="" lib="" i l
    for i in "$d/usr/include" "$d/include"; do
      if [ -f "$i/cmocka.h" ]; then inc=$i; break; fi
    done
    for l in "$d"/usr/lib/*/libcmocka.so "$d"/usr/lib/libcmocka.so "$d"/lib/libcmocka.so \
      "$d"/usr/lib/*/libcmocka.so.0 "$d"/lib/libcmocka.so.0; do
      if [ -f "$l" ]; then lib=$l; break; fi
    done
    [ -n "$inc" ] && [ -n "$lib" ] || return 1
    CMOCKA_ARGS=(-DCBT_BUILD_TESTS=ON "-DCMOCKA_INCLUDE_DIR=$inc" "-DCMOCKA_LIBRARY=$lib")
    CMOCKA_LIBDIR=$(dirname "$lib")
  }
  if [ -n "${CBT_CMOCKA_DIR:-}" ]; then
    local d
    d=$(cd "$CBT_CMOCKA_DIR" 2>/dev/null && pwd || echo "$CBT_CMOCKA_DIR")
    if use_cmocka_tree "$d"; then CMOCKA="carried ($CBT_CMOCKA_DIR)"; else
      say "CBT_CMOCKA_DIR=$CBT_CMOCKA_DIR holds no cmocka.h + libcmocka.so: tests left out"
    fi
  elif printf '#include <stdarg.h>\n#include <stddef.h>\n#include <setjmp.h>\n#include <cmocka.h>\n' |
    cc -E -x c - >/dev/null 2>&1; then
    CMOCKA="system"
    CMOCKA_ARGS=(-DCBT_BUILD_TESTS=ON -UCMOCKA_INCLUDE_DIR -UCMOCKA_LIBRARY)
  elif [ -d "$CARRY/cmocka" ] && use_cmocka_tree "$CARRY/cmocka"; then
    CMOCKA="carried ($(basename "$CARRY")/cmocka)"
  fi
  if [ "$CMOCKA" = "none" ]; then
    say "cmocka.h not found: the tests are left out of the build (run bench/gpu-prepare.sh here and carry .carry)"
  fi

  # ---- 4. configure and build ---------------------------------------------------------------
  local GEN=() KEEP_GOING=(-k)
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
  # CBT_WERROR=OFF: the device's compilers are not the ones the warnings were cleaned with.
  # CBT_TEST_TIMEOUT=60: each test's TIMEOUT property (it beats ctest --timeout),
  # so a hung GPU test dies at 60 s and the others keep their results
  run_step configure 150 "$CONFLOG" "$CMAKE" -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCBT_WITH_CUDA=$CUDA_OPT -DCBT_WITH_OTLP=OFF \
    -DCBT_WITH_CUPTI=AUTO -DCBT_BUILD_BENCH=ON -DCBT_WERROR=OFF -DCBT_TEST_TIMEOUT=60 "${CMOCKA_ARGS[@]}"
  CONF_RC=$RC
  CONF_SECS=$SECS
  TESTS_DROPPED=0
  if [ "$CONF_RC" -ne 0 ] && [ "$CONF_RC" -ne 124 ] && [ "$CONF_RC" -ne "$NO_TIME" ] && [ "$CMOCKA" != "none" ]; then
    # one broken test must not cost the benchmarks: configure again without tests
    say "configure failed with the tests in; again without them"
    echo "==== configure again with -DCBT_BUILD_TESTS=OFF ====" >>"$CONFLOG"
    record configure "cmake (tests in)" core "$CONF_RC" "" "configure.log"
    run_step "configure (no tests)" 120 "$CONFLOG" "$CMAKE" -S . -B "$BUILD" -DCBT_BUILD_TESTS=OFF
    CONF_RC=$RC
    CONF_SECS=$SECS
    TESTS_DROPPED=1
  fi
  FEATURES=$(grep -m1 'cbt: CUDA=' "$CONFLOG" | sed 's/.*cbt: //' || true)
  sum_add "build     $BUILD, Release, sm_90, nvcc $NVCC_VER, -DCBT_WERROR=OFF, -DCBT_TEST_TIMEOUT=60; ${FEATURES:-no feature line}; cmocka: $CMOCKA"
  record configure "cmake" core "$CONF_RC" "" "${CONF_SECS}s"

  BUILDLOG=$OUT/build.log
  : >"$BUILDLOG"
  BUILD_RC=$NOT_BUILT
  if [ "$CONF_RC" -eq 0 ]; then
    run_step build 330 "$BUILDLOG" "$CMAKE" --build "$BUILD" -j "$JOBS" -- "${KEEP_GOING[@]}"
    BUILD_RC=$RC
    record build "cmake --build -j$JOBS" core "$BUILD_RC" "" \
      "${SECS}s$([ "$BUILD_RC" -ne 0 ] && echo ': it built what it could, see build.log')"
  else
    echo "not run: configure failed" >>"$BUILDLOG"
    record build "cmake --build" core "$NOT_BUILT" "configure failed"
  fi

  # ---- 5. the binaries load: ldd, RUNPATH, the SASS built ------------------------------------
  local bins=() b missing="" n_ok=0 rp="" cudart="" sass=""
  for b in "$BUILD/bench/bench_scatter_gpu" "$BUILD/cbt" "$BUILD"/tests/test_gpu_*; do
    [ -f "$b" ] && [ "$(head -c 4 "$b" | od -An -c | tr -d ' ')" = '177ELF' ] && bins+=("$b")
  done
  if [ "${#bins[@]}" -gt 0 ]; then
    { echo; echo "==== the GPU binaries' libraries (ldd, readelf -d) ===="; } >>"$BUILDLOG"
    for b in "${bins[@]}"; do
      {
        echo "-- $b"
        readelf -d "$b" 2>/dev/null | grep -E 'NEEDED|RUNPATH|RPATH' || true
        ldd "$b" 2>&1 || true
      } >>"$BUILDLOG"
      if ldd "$b" 2>&1 | grep -q 'not found'; then
        missing="$missing $(basename "$b"):$(ldd "$b" 2>&1 | awk '/not found/ {print $1}' | tr '\n' ',' | sed 's/,$//')"
      else
        n_ok=$((n_ok + 1))
      fi
    done
    rp=$(readelf -d "${bins[0]}" 2>/dev/null | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p' | head -n 1)
    cudart=$(ldd "${bins[0]}" 2>/dev/null | awk '/libcudart/ {print $1 " => " $3}' | head -n 1)
    local objdump
    objdump=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null || true)
    if [ -n "$objdump" ] && [ -f "$BUILD/bench/bench_scatter_gpu" ]; then
      sass=$("$objdump" --list-elf "$BUILD/bench/bench_scatter_gpu" 2>/dev/null | grep -o 'sm_[0-9]*a\?' | sort -u | tr '\n' ' ' || true)
      echo "cuobjdump --list-elf bench_scatter_gpu: ${sass:-none}" >>"$BUILDLOG"
    fi
    if [ -n "$missing" ]; then
      record libs "ldd of ${#bins[@]} GPU binaries" core 127 "" "unresolved:$missing"
    else
      record libs "ldd of ${#bins[@]} GPU binaries" core 0 "" "all resolve; ${cudart:-no libcudart}; RUNPATH ${rp:-none}${sass:+; SASS $sass}"
    fi
  elif [ "$CUDA_OPT" = ON ]; then
    record libs "GPU binaries" core "$NOT_BUILT" "none built (see build.log)"
  fi

  # ---- 6. the GPU tests ---------------------------------------------------------------------
  TESTLOG=$OUT/tests.log
  : >"$TESTLOG"
  local label="ctest -R '$TESTS_REGEX'"
  if [ "$CMOCKA" = "none" ]; then
    echo "not built: no cmocka.h (carry it: bench/gpu-prepare.sh)" >>"$TESTLOG"
    record tests "$label" gpu 0 "tests not built: no cmocka.h; carry it: bench/gpu-prepare.sh"
  elif [ "$TESTS_DROPPED" -eq 1 ]; then
    echo "not built: configure failed with the tests in (see configure.log)" >>"$TESTLOG"
    record tests "$label" core 1 "" "not built: configure failed with the tests in (configure.log)"
  elif [ "$CONF_RC" -ne 0 ]; then
    echo "not run: configure failed" >>"$TESTLOG"
    record tests "$label" core "$NOT_BUILT" "configure failed"
  else
    # belt and braces: the tests also find a carried libcmocka by their RUNPATH
    if [ -n "$CMOCKA_LIBDIR" ]; then
      export LD_LIBRARY_PATH="${CMOCKA_LIBDIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    rm -f "$BUILD/Testing/Temporary/LastTest.log"
    # -E: the script's own tests (devcheck_*) must never run here
    run_step "tests ($label)" 180 "$TESTLOG" "$CTEST" --test-dir "$BUILD" \
      -R "$TESTS_REGEX" -E '^devcheck_' --output-on-failure --timeout 60
    local t_rc=$RC t_secs=$SECS skipr="" sk
    step_text "$TESTLOG" >"$WORK/ctest.txt"
    ctest_counts "$WORK/ctest.txt"
    # a passing test's SKIP lines are only in LastTest.log
    sk=$(grep -hE '^SKIP[: ]' "$BUILD/Testing/Temporary/LastTest.log" 2>/dev/null | awk '!seen[$0]++' || true)
    if [ -n "$sk" ]; then
      { echo; echo "==== SKIP lines of the tests (LastTest.log) ===="; echo "$sk"; } >>"$TESTLOG"
    fi
    if [ "$T_SKIP" -gt 0 ]; then
      skipr="$T_SKIP of $T_TOTAL skipped: $T_SKIPPED${sk:+; $(echo "$sk" | skip_reason)}"
    elif [ -n "$sk" ]; then
      skipr="a test printed SKIP: $(echo "$sk" | skip_reason)"
    fi
    local f
    for f in $T_FAILED; do
      [ -f "$BUILD/tests/$f" ] && log_ldd "$TESTLOG" "$BUILD/tests/$f"
    done
    # a GPU test that PASSED where no GPU was found: the detection is wrong
    local gpu_passed
    gpu_passed=$(grep -E '^ *[0-9]+/[0-9]+ +Test +#[0-9]+: +test_gpu_[^ ]* .* Passed +[0-9.]+ sec' "$WORK/ctest.txt" |
      sed -E 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: +([^ ]+) .*/\1/' | tr '\n' ' ' | sed 's/ $//' || true)
    local rc_j=$t_rc
    if [ "$HAVE_GPU" -ne 1 ] && [ -n "$gpu_passed" ]; then
      rc_j=1
      skipr=""
      T_FAILED="${T_FAILED:+$T_FAILED; }CONTRADICTION: $gpu_passed passed but no GPU was found ($NO_GPU_WHY): the GPU detection is wrong"
    elif [ "$t_rc" -eq 124 ] || [ "$t_rc" -eq 137 ] || [ "$t_rc" -eq "$NO_TIME" ]; then
      :
    elif [ "$T_FAIL" -gt 0 ]; then
      rc_j=1
    elif [ "$T_TOTAL" -eq 0 ]; then
      rc_j=1
      skipr=""
      T_FAILED="no test matched '$TESTS_REGEX'"
    fi
    record tests "$label" gpu "$rc_j" "$skipr" \
      "$T_PASS passed, $T_FAIL failed, $T_SKIP skipped (of $T_TOTAL) in ${t_secs}s${T_FAILED:+; failed: $T_FAILED}"
    sum_add "$(grep -E '^ *[0-9]+/[0-9]+ +Test +#[0-9]+:' "$WORK/ctest.txt" |
      sed -E 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: +/          /; s/ \.{2,}\** */ /' || true)"
    write_summary
  fi

  # ---- 6b. nothing on the CUDA paths waits ---------------------------------------------------
  # test_gpu_nowait alone (ctest ran it too), with the test NVTX tool: a CUDA
  # stream created on a stream the GPU is busy with must not wait for it, marks
  # from 4 threads on one stream resolve, a thread stalled 1 s in the NVTX tool
  # holds no CUDA mark up. Its NOWAIT lines (the figures) go to the summary;
  # its output to the end of tests.log.
  local nw_bin=$BUILD/tests/test_gpu_nowait nw_inject=$BUILD/tests/libcbt_nvtx_inject.so
  local nw_label="test_gpu_nowait (create on a busy stream, marks from 4 threads, a thread stalled in NVTX)"
  if [ "$HAVE_GPU" -ne 1 ]; then
    echo "test_gpu_nowait: not run, no GPU" >>"$TESTLOG"
    record nowait "$nw_label" gpu "$NO_DEVICE"
  elif [ ! -x "$nw_bin" ]; then
    echo "test_gpu_nowait: not built ($nw_bin)" >>"$TESTLOG"
    record nowait "$nw_label" gpu "$NOT_BUILT" "" "$( [ "$CMOCKA" = none ] && echo 'no cmocka.h: the tests were not built' || echo build.log)"
  else
    { echo; echo "==== nowait: test_gpu_nowait ===="; } >>"$TESTLOG"
    local nw_env=()
    [ -f "$nw_inject" ] && nw_env=("NVTX_INJECTION64_PATH=$nw_inject")
    run_step "nowait (test_gpu_nowait)" 60 "$TESTLOG" --bin "$nw_bin" env "${nw_env[@]}" "$nw_bin"
    local nw_rc=$RC nw_skip
    nw_skip=$(step_text "$TESTLOG" | skip_reason)
    [ "$nw_rc" -eq 77 ] && [ -n "$nw_skip" ] && nw_rc=0 # its own skip: judged as one
    record nowait "$nw_label" gpu "$nw_rc" "$nw_skip" "$([ -f "$nw_inject" ] || echo 'no NVTX test tool in this build')"
    sum_add "$(step_text "$TESTLOG" | grep '^NOWAIT ' | sed 's/^NOWAIT /          /' || true)"
    write_summary
  fi

  # ---- 6c. queue time on the device -----------------------------------------------------------
  # test_gpu_queue alone (ctest ran it too): a kernel launched behind a 100 ms
  # spin on its CUDA stream must carry cbt.queue_ns >= the spin (less the
  # device clock's error), the same kernel on the idle stream far less. Its
  # QUEUE lines (the figures) go to the summary; its output to tests.log.
  local qt_bin=$BUILD/tests/test_gpu_queue
  local qt_label="test_gpu_queue (a kernel queued behind a 100 ms spin: its cbt.queue_ns)"
  if [ "$HAVE_GPU" -ne 1 ]; then
    echo "test_gpu_queue: not run, no GPU" >>"$TESTLOG"
    record queue "$qt_label" gpu "$NO_DEVICE"
  elif [ ! -x "$qt_bin" ]; then
    echo "test_gpu_queue: not built ($qt_bin)" >>"$TESTLOG"
    record queue "$qt_label" gpu "$NOT_BUILT" "" "$( [ "$CMOCKA" = none ] && echo 'no cmocka.h: the tests were not built' || echo build.log)"
  else
    { echo; echo "==== queue: test_gpu_queue ===="; } >>"$TESTLOG"
    run_step "queue (test_gpu_queue)" 60 "$TESTLOG" --bin "$qt_bin" "$qt_bin"
    local qt_rc=$RC qt_skip
    qt_skip=$(step_text "$TESTLOG" | skip_reason)
    [ "$qt_rc" -eq 77 ] && [ -n "$qt_skip" ] && qt_rc=0 # its own skip: judged as one
    record queue "$qt_label" gpu "$qt_rc" "$qt_skip"
    sum_add "$(step_text "$TESTLOG" | grep '^QUEUE ' | sed 's/^QUEUE /          /' || true)"
    write_summary
  fi

  # ---- 7. benchmarks and the demo --------------------------------------------------------------
  # bench NAME CAP KIND TAG ARGS... — run bench/NAME into $OUT/NAME.log and record it
  bench() {
    local name=$1 cap=$2 kind=$3 tag=$4
    shift 4
    local log=$OUT/$name.log bin=$BUILD/bench/$name
    : >"$log"
    if [ ! -x "$bin" ]; then
      echo "not built: $bin is missing (see build.log)" >>"$log"
      say "$name: NOT BUILT"
      if [ "$kind" = gpu ] && [ "$CUDA_OPT" = OFF ]; then
        record "$tag" "$name" gpu 0 "not built: no nvcc here, so CUDA is off"
      else
        record "$tag" "$name" "$kind" "$NOT_BUILT" "build.log"
      fi
      return 0
    fi
    run_step "$name${*:+ $*}" "$cap" "$log" "$bin" "$@"
    local skipr note=""
    skipr=$(step_text "$log" | skip_reason)
    [ "$RC" -eq 1 ] && note="a correctness failure"
    [ "$RC" -eq 2 ] && note="a CUDA or cbt error"
    [ "$RC" -eq 0 ] && note="${SECS}s"
    record "$tag" "$name${*:+ $*}" "$kind" "$RC" "$skipr" "$note"
  }
  bench bench_scatter_gpu 240 gpu scatter
  sum_add "$(grep '^SUMMARY ' "$OUT/bench_scatter_gpu.log" | sed 's/^SUMMARY /          /' || true)"
  write_summary

  # the main job on the GPU: requests whose retrieves and stores run the CUDA
  # kernels, kernel spans joined from the device ring. Its output goes to the
  # end of tests.log ($OUT holds at most 8 files).
  if [ "$HAVE_GPU" -ne 1 ]; then
    echo "cbt demo --gpu: not run, no GPU" >>"$TESTLOG"
    record demo "cbt demo --gpu" gpu "$NO_DEVICE"
  elif [ -x "$BUILD/cbt" ]; then
    { echo; echo "==== cbt demo --gpu ===="; } >>"$TESTLOG"
    # --plant-queue (issue 24): 20 ms of host-function work ahead of each
    # request's first operation on its CUDA stream, so the queue-time line
    # shows waits the device caused, and the replay below compares them too
    run_step "cbt demo --gpu" 90 "$TESTLOG" "$BUILD/cbt" demo --gpu --requests 64 --trees 1 \
      --slowest 2 --output "$WORK/cbt-demo-trace.json" --spans "$WORK/cbt-demo-spans.jsonl" \
      --trace-level gpu --trace-output "$WORK/cbt-demo.lct" --plant-queue
    local demo_rc=$RC dskip
    dskip=$(step_text "$TESTLOG" | skip_reason)
    record demo "cbt demo --gpu" gpu "$demo_rc" "$dskip"
    sum_add "$(step_text "$TESTLOG" | grep -E '^(queue time|requests|KV moved|trace recording)' | tail -n 4 | sed 's/^/          /' || true)"
    write_summary
    # issue 13: the recording of that GPU run replayed by the replay tracer
    # (no device use: device times arrive through the recorded clock lines)
    # must give the live run's spans and trace file, byte for byte
    { echo; echo "==== cbt replay of the GPU recording ===="; } >>"$TESTLOG"
    if [ "$demo_rc" -eq 0 ] && [ -s "$WORK/cbt-demo.lct" ]; then
      run_step "cbt replay (GPU recording)" 60 "$TESTLOG" bash -c '
        "$1" replay "$2/cbt-demo.lct" --spans "$2/replay-spans.jsonl" --output "$2/replay-trace.json" --quiet &&
        cmp "$2/cbt-demo-spans.jsonl" "$2/replay-spans.jsonl" &&
        cmp "$2/cbt-demo-trace.json" "$2/replay-trace.json" &&
        echo "replay: $(wc -l < "$2/replay-spans.jsonl") spans, identical to the live GPU run"' \
        replaystep "$BUILD/cbt" "$WORK"
      record replay "cbt replay (GPU recording)" gpu "$RC"
    else
      echo "not run: the GPU demo failed or left no recording" >>"$TESTLOG"
      record replay "cbt replay (GPU recording)" gpu "$NOT_BUILT" "" "the GPU demo failed or left no recording"
    fi
    write_summary
  else
    echo "not built: $BUILD/cbt" >>"$TESTLOG"
    record demo "cbt demo --gpu" gpu "$NOT_BUILT"
  fi

  # the CUDA stream path from Python (issue 12): the cbt package built from this
  # tree into a venv of the wheels bench/gpu-prepare.sh carried, then its
  # device test (a raw cudaStream_t and a torch-like .cuda_stream; marks
  # resolved on the device clock). Its output goes to the end of tests.log.
  local pyreason="" py=${CBT_GPU_PYTHON:-python3}
  if [ "$py" = none ]; then
    record python "pytest CUDA stream path" tool "$TOOL_SKIP" "CBT_GPU_PYTHON=none"
  elif [ "$HAVE_GPU" -ne 1 ]; then
    echo "python CUDA stream path: not run, no GPU" >>"$TESTLOG"
    record python "pytest CUDA stream path" gpu "$NO_DEVICE"
  elif [ ! -d "$CARRY/pywheels" ] || ! command -v "$py" >/dev/null 2>&1; then
    pyreason="no carried Python wheels ($CARRY/pywheels) or no $py: run bench/gpu-prepare.sh"
    echo "python CUDA stream path: $pyreason" >>"$TESTLOG"
    record python "pytest CUDA stream path" gpu "$NOT_BUILT" "" "$pyreason"
  else
    { echo; echo "==== python: the CUDA stream path ===="; } >>"$TESTLOG"
    run_step "python CUDA stream path" 180 "$TESTLOG" bash -c '
      set -e; v="$1/pyenv"; "$3" -m venv "$v"
      "$v/bin/pip" install -q --no-index --find-links "$2" scikit-build-core pytest
      "$v/bin/pip" install -q --no-build-isolation --no-index .
      "$v/bin/python" -m pytest -q -rs -p no:cacheprovider tests/python/test_api.py \
        -k test_cuda_stream_marks_on_device' pystep "$WORK" "$CARRY/pywheels" "$py"
    local py_rc=$RC
    # a skip on a GPU machine is a failure (judge): pytest's "SKIPPED" line
    if [ "$py_rc" -eq 0 ] && step_text "$TESTLOG" | grep -q "SKIPPED"; then
      pyreason=$(step_text "$TESTLOG" | grep -m1 "SKIPPED" | sed 's/^SKIPPED \[[0-9]*\] //')
    fi
    record python "pytest CUDA stream path" gpu "$py_rc" "$pyreason"
  fi

  bench bench_publish 90 core publish --quick
  sum_add "$(grep -E '^(publish_on|publish_off|harvester  )' "$OUT/bench_publish.log" | sed -E 's/^/          /; s/ +\(.*//' || true)"
  bench bench_scatter_cpu 120 core "cpu ref" --quick
  sum_add "$(grep -E '^chunks|^ +16 |^target' "$OUT/bench_scatter_cpu.log" | sed 's/^/          /' || true)"
  write_summary

  # ---- 8. the tools: ncu on one scatter launch, compute-sanitizer over the GPU tests ---------
  # Their output goes to the end of bench_scatter_gpu.log (ncu) and tests.log (sanitizer).
  local SBIN=$BUILD/bench/bench_scatter_gpu
  if [ "$HAVE_GPU" -ne 1 ]; then
    record ncu "8-chunk scatter launch" tool "$NO_DEVICE"
  elif [ -z "$NCU" ]; then
    record ncu "8-chunk scatter launch" tool "$TOOL_SKIP" "ncu not installed"
  elif [ ! -x "$SBIN" ]; then
    record ncu "8-chunk scatter launch" tool "$TOOL_SKIP" "bench_scatter_gpu not built"
  else
    # bench_scatter_gpu --chunks 8: the 8-chunk retrieve alone (256 MiB each
    # way, past the H200's 50 MiB L2, so the DRAM bytes are the real ones; the
    # default first launch, 1 chunk = 32 MiB, fits in L2 and undercounts).
    # Its first scatter launch is verify()'s, the "off" variant; stop there
    # (--kill); never touch the clocks
    { echo; echo "==== ncu: the first 8-chunk scatter launch (--chunks 8, --clock-control none) ===="; } >>"$OUT/bench_scatter_gpu.log"
    run_step "ncu (8-chunk scatter launch)" 120 "$OUT/bench_scatter_gpu.log" --bin "$NCU" "$NCU" \
      --clock-control none --target-processes all --kernel-name regex:scatter --launch-count 1 --kill yes \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      --csv --print-units base "$SBIN" --quick --chunks 8
    step_text "$OUT/bench_scatter_gpu.log" >"$WORK/ncu.txt"
    ncu_result "$WORK/ncu.txt" "$RC"
    local bench1
    bench1=$(grep -m1 -E '^SUMMARY scatter retrieve +8 ch' "$OUT/bench_scatter_gpu.log" |
      sed -nE 's/.*off +([0-9.]+) GB\/s.*/\1/p' || true)
    if [ -n "$N_LINE" ]; then
      echo "ncu: $N_LINE" >>"$OUT/bench_scatter_gpu.log"
      record ncu "8-chunk scatter launch (retrieve, 256 MiB; caches flushed first, ncu's default)" tool 0 "" \
        "$N_LINE; the bench's own 8-chunk off figure: ${bench1:-none} GB/s"
    else
      record ncu "8-chunk scatter launch" tool "$N_RC" "$N_WHY" "$([ "$N_RC" -eq 1 ] && echo "$N_WHY")"
    fi
  fi

  local t bin
  for t in test_gpu_kernels test_gpu_ring test_gpu_stream test_gpu_cupti; do
    bin=$BUILD/tests/$t
    if [ "$t" = test_gpu_cupti ]; then
      record memcheck "$t" tool "$TOOL_SKIP" "not run under compute-sanitizer: CUPTI and the sanitizer both take the driver's callbacks and profiling hooks"
    elif [ "$HAVE_GPU" -ne 1 ]; then
      record memcheck "$t" tool "$NO_DEVICE"
    elif [ -z "$SANITIZER" ]; then
      record memcheck "$t" tool "$TOOL_SKIP" "compute-sanitizer not installed"
    elif [ ! -x "$bin" ]; then
      record memcheck "$t" tool "$TOOL_SKIP" "$t not built"
    elif [ -n "${SAN_REFUSED:-}" ]; then
      record memcheck "$t" tool "$TOOL_SKIP" "$SAN_REFUSED"
    else
      { echo; echo "==== compute-sanitizer --tool memcheck $t ===="; } >>"$TESTLOG"
      run_step "memcheck $t" 90 "$TESTLOG" --bin "$bin" "$SANITIZER" --tool memcheck --leak-check no \
        --error-exitcode 99 --print-limit 20 "$bin"
      step_text "$TESTLOG" >"$WORK/san.txt"
      if [ "$RC" -eq "$NO_TIME" ]; then S_RC=$NO_TIME S_WHY="" S_NOTE=""; else sanitizer_result "$WORK/san.txt" "$RC"; fi
      case $S_WHY in refused:*) SAN_REFUSED=$S_WHY ;; esac
      record memcheck "$t" tool "$S_RC" "$S_WHY" "$S_NOTE"
    fi
  done
  t=test_gpu_kernels
  bin=$BUILD/tests/$t
  if [ "$HAVE_GPU" -ne 1 ]; then
    record racecheck "$t" tool "$NO_DEVICE"
  elif [ -z "$SANITIZER" ]; then
    record racecheck "$t" tool "$TOOL_SKIP" "compute-sanitizer not installed"
  elif [ ! -x "$bin" ]; then
    record racecheck "$t" tool "$TOOL_SKIP" "$t not built"
  elif [ -n "${SAN_REFUSED:-}" ]; then
    record racecheck "$t" tool "$TOOL_SKIP" "$SAN_REFUSED"
  else
    # the kernels share memory between threads (the scatter's staging); the
    # ring and stream tests' kernels do not
    { echo; echo "==== compute-sanitizer --tool racecheck $t ===="; } >>"$TESTLOG"
    run_step "racecheck $t" 150 "$TESTLOG" --bin "$bin" "$SANITIZER" --tool racecheck \
      --error-exitcode 99 --print-limit 20 "$bin"
    step_text "$TESTLOG" >"$WORK/san.txt"
    if [ "$RC" -eq "$NO_TIME" ]; then S_RC=$NO_TIME S_WHY="" S_NOTE=""; else sanitizer_result "$WORK/san.txt" "$RC"; fi
    record racecheck "$t" tool "$S_RC" "$S_WHY" "$S_NOTE"
  fi

  # ---- 9. the summary, last ----------------------------------------------------------------------
  FINISHED=1
  write_summary
  if [ "$(find "$OUT" -type f | wc -l)" -gt "$MAX_OUT_FILES" ]; then
    STATUS=1
    FAILS+=("more than $MAX_OUT_FILES files in \$OUT")
    write_summary
  fi
  echo
  cat "$SUM"
  exit "$STATUS"
}

# sourced (tests/gpu_check_selftest.sh): the functions alone
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
