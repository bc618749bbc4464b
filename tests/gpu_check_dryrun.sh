#!/usr/bin/env bash
# tests/gpu_check_dryrun.sh SRC WORK — bench/gpu-check.sh end to end on a
# machine without a GPU, the way the device tool runs it (ctest: devcheck_dryrun):
#   1. copies the tree as the device tool does (tracked + untracked-not-ignored
#      files, no .git) to WORK/tree
#   2. prepares WORK/tree/.carry with bench/gpu-prepare.sh (cmocka by apt-get
#      download, the commit)
#   3. in a mount namespace (unshare -m) hides the system's cmocka (cmocka.h,
#      libcmocka.so*, its CMake and pkg-config files) behind bind-mounted link
#      farms, and proves it is hidden: cc cannot include it and a CMake
#      project's find_path/find_library cannot find it
#   4. runs the script there (OUT=WORK/out, a fresh build dir WORK/build) and
#      checks its summary: the tests built with the carried cmocka and run
#      (none failed), the GPU tests, bench_scatter_gpu, the demo and the tools
#      skipped for want of a device, the commit read from .carry/commit, no
#      compiler warning (so cmocka.h is a SYSTEM include), at most 8 files in
#      OUT, exit 0; and that the binaries find libcudart and the carried
#      libcmocka by their RUNPATH alone (readelf -d, ldd, no LD_LIBRARY_PATH),
#      a RUNPATH with no empty entry, and CUDA=ON wherever nvcc is here
# Exit 77 with "SKIP: <why>" when it cannot: not root, unshare refused, cmocka
# not obtainable, or a GPU here (this is the no-GPU rehearsal). About 2-3
# minutes on 2 cores the first time (the script's Release CUDA build).
set -uo pipefail
INSIDE=0
if [ "${1:-}" = --inside ]; then
  INSIDE=1
  shift
fi
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
WORK=$(cd "$2" && pwd)
TREE=$WORK/tree
OUTD=$WORK/out
NS=$WORK/ns
skip() {
  echo "SKIP: devcheck_dryrun: $*"
  exit 77
}
fail() {
  echo "FAIL: devcheck_dryrun: $*"
  if [ -f "$WORK/run.txt" ]; then
    echo "---- the end of the script's output ----"
    tail -n 60 "$WORK/run.txt"
  fi
  exit 1
}
git_top() { git -C "$SRC" rev-parse --show-toplevel 2>/dev/null || true; }

if [ "$INSIDE" -eq 0 ]; then
  [ "$(id -u)" -eq 0 ] || skip "needs root (unshare -m and bind mounts hide the system cmocka)"
  command -v unshare >/dev/null 2>&1 || skip "no unshare command (util-linux)"
  if ! err=$(unshare -m true 2>&1); then skip "unshare -m is not permitted here: $err"; fi
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]'; then
    skip "this machine has a GPU: the dry run rehearses a machine without one (run bench/gpu-check.sh itself)"
  fi

  # 1. the tree as the device tool copies it
  rm -rf "$TREE"
  mkdir -p "$TREE"
  top=$(git_top)
  if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(cd "$SRC" && pwd -P)" ]; then
    (cd "$SRC" && git ls-files -z -co --exclude-standard |
      while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
      tar --null -T - -cf -) | tar -xf - -C "$TREE" || fail "could not copy the tree"
  else
    tar -C "$SRC" --exclude='./build*' --exclude=./.git --exclude=./.carry -cf - . |
      tar -xf - -C "$TREE" || fail "could not copy the tree"
  fi
  [ ! -e "$TREE/.git" ] || fail "the copy has a .git"

  # 2. what the device cannot fetch
  CBT_CARRY_DIR=$TREE/.carry bash "$SRC/bench/gpu-prepare.sh" >"$WORK/prepare.log" 2>&1
  rc=$?
  if [ "$rc" -eq 3 ]; then skip "cannot prepare .carry: $(tail -n 1 "$WORK/prepare.log")"; fi
  [ "$rc" -eq 0 ] || fail "bench/gpu-prepare.sh exited $rc: $(tail -n 3 "$WORK/prepare.log")"
  sed 's/^/  /' "$WORK/prepare.log"

  # 3 and 4 in a mount namespace of their own
  exec unshare -m bash "$0" --inside "$SRC" "$WORK"
fi

# ---- inside the namespace ---------------------------------------------------------------
mount --make-rprivate / 2>/dev/null || true
rm -rf "$NS"
mkdir -p "$NS"

# probe: what a compiler and a CMake project see of cmocka here
probe() {
  local p=$NS/probe
  rm -rf "$p"
  mkdir -p "$p"
  cat >"$p/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.24)
project(probe C)
find_path(PROBE_INC cmocka.h)
find_library(PROBE_LIB cmocka)
find_package(cmocka CONFIG QUIET)
message(STATUS "probe: inc=${PROBE_INC} lib=${PROBE_LIB} config=${cmocka_FOUND}")
EOF
  local cm
  cm=$(cmake -S "$p" -B "$p/b" 2>&1 | sed -n 's/^-- probe: //p')
  if printf '#include <stdarg.h>\n#include <stddef.h>\n#include <setjmp.h>\n#include <cmocka.h>\n' |
    cc -E -x c - >/dev/null 2>&1; then
    echo "cc=found $cm"
  else
    echo "cc=none $cm"
  fi
}
before=$(probe)
echo "system cmocka before hiding: $before"

# shadow VIEW DEST — DEST: a link to every entry of VIEW but *cmock*; a
# subfolder holding *cmock* (cmake/cmocka, pkgconfig/cmocka.pc) is shadowed too
shadow() {
  local view=$1 dest=$2 e n
  mkdir -p "$dest"
  for e in "$view"/* "$view"/.[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    n=${e##*/}
    case $n in *cmock*) continue ;; esac
    if [ -d "$e" ] && [ ! -L "$e" ] && find "$e" -maxdepth 2 -name '*cmock*' 2>/dev/null | grep -q .; then
      shadow "$e" "$dest/$n"
    else
      ln -s "$e" "$dest/$n"
    fi
  done
}
ma=$(cc -print-multiarch 2>/dev/null || true)
i=0
hidden=""
for d in /usr/include /usr/local/include ${ma:+/usr/lib/$ma} /usr/lib /usr/local/lib /usr/lib64 /lib64 ${ma:+/lib/$ma}; do
  [ -d "$d" ] || continue
  d=$(readlink -f "$d")
  case " $hidden " in *" $d "*) continue ;; esac
  # only folders that hold cmocka themselves (or one level down: cmake/, pkgconfig/)
  find "$d" -mindepth 1 -maxdepth 2 -name '*cmock*' 2>/dev/null | grep -q . || continue
  i=$((i + 1))
  mkdir -p "$NS/view$i"
  mount --bind "$d" "$NS/view$i" || fail "mount --bind $d: refused"
  shadow "$NS/view$i" "$NS/shadow$i"
  mount --bind "$NS/shadow$i" "$d" || fail "mount --bind over $d: refused"
  hidden="$hidden $d"
done
after=$(probe)
echo "hidden:${hidden:- nothing (no system cmocka here)}"
echo "system cmocka after hiding: $after"
case $after in
  cc=none*) ;;
  *) fail "cc still finds cmocka.h after hiding it ($after)" ;;
esac
echo "$after" | grep -q 'inc=PROBE_INC-NOTFOUND lib=PROBE_LIB-NOTFOUND config=0' ||
  fail "CMake still finds the system cmocka after hiding it ($after)"

# 4. the script, as on the device (JOBS: this machine's cores), in a fresh
# build dir as there (an incremental one would not repeat a warning)
rm -rf "$OUTD" "$WORK/build"
mkdir -p "$OUTD"
t0=$(date +%s)
env -u LD_LIBRARY_PATH -u CBT_CMOCKA_DIR -u CBT_CARRY_DIR -u CBT_CMAKE -u CBT_GPU_TESTS_REGEX -u CBT_EXPECT_GPU \
  OUT="$OUTD" JOBS="${JOBS:-$(nproc)}" CBT_GPU_BUILD="$WORK/build" \
  CBT_GPU_CHECK_BUDGET="${CBT_DRYRUN_BUDGET:-540}" bash "$TREE/bench/gpu-check.sh" >"$WORK/run.txt" 2>&1
rc=$?
echo "bench/gpu-check.sh exited $rc after $(($(date +%s) - t0))s"
S=$OUTD/summary.txt
[ -f "$S" ] || fail "no summary.txt in OUT"
echo "---- its summary ----"
cat "$S"
echo "---------------------"
n_fail=0
want() { # DESC REGEX: the summary must match
  if grep -qE -- "$2" "$S"; then echo "ok   - $1"; else echo "FAIL - $1 (no /$2/ in summary.txt)"; n_fail=$((n_fail + 1)); fi
}
is() { # DESC CMD...
  local d=$1
  shift
  if "$@"; then echo "ok   - $d"; else echo "FAIL - $d"; n_fail=$((n_fail + 1)); fi
}
is "the script exits 0 (got $rc)" [ "$rc" -eq 0 ]
want "the summary is finished, exit 0" '^exit +0$'
want "status finished" '^status +finished'
want "no GPU here" '^device +none: no GPU here'
want "the tests were built with the carried cmocka" 'cmocka: carried \(\.carry/cmocka\)$'
want "some tests ran and passed, none failed" '^tests +ctest .*[1-9][0-9]* passed, 0 failed'
want "the GPU tests are skipped for want of a device" '^tests +ctest .*: skipped, no device \([0-9]+ of [0-9]+ skipped: .*test_gpu_'
for t in test_gpu_kernels test_gpu_ring test_gpu_stream test_gpu_nowait test_gpu_queue test_gpu_cupti; do
  want "  $t: Skipped" "^ +$t +(\*\*\*)?Skipped"
done
want "bench_scatter_gpu skipped, no device" '^scatter +bench_scatter_gpu: skipped, no device'
want "the demo skipped, no device" '^demo +cbt demo --gpu: skipped, no device'
want "the nowait step skipped, no device" '^nowait +test_gpu_nowait .*: skipped, no device'
want "the queue step skipped, no device" '^queue +test_gpu_queue .*: skipped, no device'
want "ncu skipped, no device" '^ncu +.*: skipped, no device'
want "memcheck skipped, no device" '^memcheck +test_gpu_kernels: skipped, no device'
want "racecheck skipped, no device" '^racecheck +test_gpu_kernels: skipped, no device'
want "the host benchmarks ran" '^publish +bench_publish --quick: ok'
want "CMake checked" '^cmake +[0-9.]+ .*: ok, >= 3\.24'
# nvcc here: the script's build must have CUDA on (else the GPU binaries, their
# RUNPATH and the GPU tests would go unchecked and the run still read "ok")
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null 2>&1; then
  want "nvcc is here, so the build has CUDA=ON" '^build +.*CUDA=ON'
fi
want "the per-test timeout is 60 s (-DCBT_TEST_TIMEOUT=60)" '^build +.*-DCBT_TEST_TIMEOUT=60'
top=$(git_top)
if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(cd "$SRC" && pwd -P)" ]; then
  sha=$(git -C "$SRC" rev-parse --short=12 HEAD)
  want "the commit read from .carry/commit (no .git in the copy)" "^commit +$sha \(.*from \.carry/commit"
fi
nf=$(find "$OUTD" -type f | wc -l)
is "at most 8 files in OUT ($nf)" [ "$nf" -le 8 ]
# The script builds with -DCBT_WERROR=OFF (the device's compilers differ), but
# here it is this machine's compiler, which the -Werror builds pass: no warning
# may appear. One from a cmocka macro (fail_msg's "..." under -Wpedantic) means
# the carried cmocka.h is not a SYSTEM include.
if grep -nE '(^|: )warning: ' "$OUTD/build.log" >"$WORK/warnings.txt"; then
  echo "FAIL - $(wc -l <"$WORK/warnings.txt") compiler warnings in build.log (-Werror would fail; from a cmocka macro: is cmocka a SYSTEM include?):"
  head -n 5 "$WORK/warnings.txt" | sed 's/^/    /'
  n_fail=$((n_fail + 1))
else
  echo "ok   - no compiler warning in build.log (cmocka.h is a SYSTEM include)"
fi
# the binaries find their libraries by RUNPATH alone
B=$WORK/build
tb=$B/tests/test_kernels_ref
if [ -f "$tb" ]; then
  is "test_kernels_ref loads libcmocka.so.0 from .carry (RUNPATH: $(readelf -d "$tb" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p'))" \
    eval "env -u LD_LIBRARY_PATH ldd '$tb' | grep -q 'libcmocka.so.0 => $TREE/.carry/cmocka/'"
fi
runpath_has() { # DIR RUNPATH: one of RUNPATH's folders is DIR
  local want d
  want=$(readlink -f "$1")
  IFS=: read -ra ds <<<"$2"
  for d in "${ds[@]}"; do
    [ -n "$d" ] && [ "$(readlink -f "$d" 2>/dev/null)" = "$want" ] && return 0
  done
  return 1
}
if grep -qE 'CUDA=ON' "$S"; then
  for b in "$B/bench/bench_scatter_gpu" "$B/cbt" "$B/tests/test_gpu_kernels" "$B/tests/test_gpu_cupti"; do
    if [ ! -f "$b" ]; then
      is "$(basename "$b") built" false
      continue
    fi
    lib=$(env -u LD_LIBRARY_PATH ldd "$b" | awk '/libcudart\.so/ {print $3}')
    rp=$(readelf -d "$b" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
    is "$(basename "$b"): libcudart resolved (${lib:-not found}) with no LD_LIBRARY_PATH" test -f "${lib:-/nonexistent}"
    is "$(basename "$b"): its RUNPATH (${rp:-none}) names libcudart's folder" runpath_has "$(dirname "${lib:-/nowhere/x}")" "$rp"
    is "$(basename "$b"): nothing 'not found' in its ldd" eval "! env -u LD_LIBRARY_PATH ldd '$b' | grep -q 'not found'"
    # an empty RUNPATH entry ("a::b", a leading or trailing ":") is the current directory
    # (cbt is installed: CMake pads its build-tree RUNPATH with one trailing ":"
    # for the in-place rewrite at install, which removes it; that one is allowed)
    rpc=$rp
    [ "$(basename "$b")" = cbt ] && rpc=${rp%:}
    is "$(basename "$b"): no empty entry in its RUNPATH (${rp:-none})" eval "! echo ':$rpc:' | grep -q '::'"
  done
fi
if [ "$n_fail" -ne 0 ]; then
  fail "$n_fail checks failed"
fi
echo "devcheck_dryrun: every check passed"
