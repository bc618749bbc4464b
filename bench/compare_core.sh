#!/usr/bin/env bash
# bench/compare_core.sh — "never waits", old core against new, side by side.
#
#   bench/compare_core.sh [BASE_REV]
#
# Builds libcbt twice: at BASE_REV (default: the merge-base of HEAD with
# main) and from the working tree; compiles this tree's bench sources
# (bench_paced, bench_stall, bench_publish, bench_load: public API only)
# against each; runs old, new, old, new (ROUNDS=2 rounds) and prints one
# table: each figure, its target, and every run. Same machine, same minute,
# so compare the columns, and the ratios within a column, rather than with
# figures from another day. docs/performance.md, "Never waits", has a run.
#
# The old tree is `git archive BASE_REV` under build-compare/ (ignored by
# .gitignore: no worktree is registered with the repository), with this
# tree's bench/ copied over it: the old revision's own bench sources may
# differ, and the point is one bench source against two libraries. That
# needs the old tree to have cbt_static, cbt_target_defaults and
# CBT_WITH_OTLP_ON in its CMake (true since issue 11). Only the four bench
# targets are built (and the library under them).
#
# What runs, per build and round (seconds are the defaults, all tunable
# through the environment):
#   bench_paced --seconds PACED_S (10)        250 requests/s of 10 events, 4 spans
#   bench_paced --flat --seconds FLAT_S (3)   back to back, no loss
#   strace -f -e trace=futex,membarrier,madvise,nanosleep,clock_nanosleep
#     bench_paced --seconds STRACE_S (5)      system calls of the publishing
#                                             thread between its markers
#                                             (SKIP when strace is missing)
#   bench_paced --idle IDLE_S (5)             no publish: process CPU per second
#   bench_stall; bench_stall --sink fifo      a stalled sink (WATCHDOG=2 s a call)
#   bench_load --rate 1000000 --seconds LOAD_S (3)   1 M spans/s end to end
#   bench_publish --quick                     publish_on, publish_slept, build_publish,
#                                             publish_array_1k/_128k (n/a before arrays)
# About 1.5 minutes a build and round on a 2-vCPU machine, plus the builds.
#
# Environment (whole seconds): ROUNDS, PACED_S, FLAT_S, STRACE_S, IDLE_S, LOAD_S, WATCHDOG,
# JOBS (build parallelism, 2), CMAKE_ARGS (extra, for both builds),
# COMPARE_DIR (default build-compare in the repository).
set -euo pipefail

ROOT=$(git rev-parse --show-toplevel)
cd "$ROOT"
if [ $# -ge 1 ]; then
  BASE_REV=$1
else
  BASE_REV=$(git merge-base HEAD main 2>/dev/null || git rev-parse HEAD)
fi
BASE_SHA=$(git rev-parse --verify "$BASE_REV^{commit}")
ROUNDS=${ROUNDS:-2}
PACED_S=${PACED_S:-10}
FLAT_S=${FLAT_S:-3}
STRACE_S=${STRACE_S:-5}
IDLE_S=${IDLE_S:-5}
LOAD_S=${LOAD_S:-3}
WATCHDOG=${WATCHDOG:-2}
JOBS=${JOBS:-2}
WORK=${COMPARE_DIR:-$ROOT/build-compare}
TARGETS="bench_paced bench_stall bench_publish bench_load"
mkdir -p "$WORK"

# ---- builds ------------------------------------------------------------------

OLD_SRC=$WORK/old-src
if [ "$(cat "$OLD_SRC/.rev" 2>/dev/null)" != "$BASE_SHA" ]; then
  echo "== extracting $BASE_SHA into $OLD_SRC"
  rm -rf "$OLD_SRC" "$WORK/old"
  mkdir -p "$OLD_SRC"
  git archive "$BASE_SHA" | tar -x -C "$OLD_SRC"
  echo "$BASE_SHA" > "$OLD_SRC/.rev"
fi
# this tree's bench sources over the old ones (-p: unchanged files stay built)
cp -p "$ROOT"/bench/* "$OLD_SRC/bench/" 2>/dev/null || true

build() { # src dir
  echo "== building $1 into $2"
  # shellcheck disable=SC2086 # CMAKE_ARGS: several arguments
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCBT_BUILD_TESTS=OFF -DCBT_BUILD_BENCH=ON \
    ${CMAKE_ARGS:-} > "$2.configure.log" 2>&1 || { cat "$2.configure.log"; exit 1; }
  # shellcheck disable=SC2086
  cmake --build "$2" -j"$JOBS" --target $TARGETS > "$2.build.log" 2>&1 || {
    tail -40 "$2.build.log"; exit 1; }
}
build "$OLD_SRC" "$WORK/old"
build "$ROOT" "$WORK/new"

# ---- runs --------------------------------------------------------------------

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RES=$WORK/results-$STAMP
mkdir -p "$RES"
HAVE_STRACE=1
command -v strace > /dev/null || HAVE_STRACE=0
SECCOMP=
if [ $HAVE_STRACE = 1 ] && strace --seccomp-bpf -f -e trace=futex -o /dev/null true 2> /dev/null; then
  SECCOMP=--seccomp-bpf # only the traced calls stop the process
fi

# The publishing thread's system calls between its markers (bench_paced.c):
# "name=count ..." for the five traced.
count_syscalls() { # strace-file tid
  awk -v tid="$2" '
    $1 != tid { next }
    /clock_nanosleep\(CLOCK_REALTIME, 0, \{tv_sec=0, tv_nsec=1111\}/ { on = 1; next }
    /clock_nanosleep\(CLOCK_REALTIME, 0, \{tv_sec=0, tv_nsec=2222\}/ { on = 0; next }
    on && $2 ~ /^[a-z_0-9]+\(/ { n = $2; sub(/\(.*/, "", n); c[n]++ }
    END {
      split("futex membarrier madvise nanosleep clock_nanosleep", k, " ")
      for (i = 1; i <= 5; i++) printf "%s=%d ", k[i], c[k[i]] + 0
      printf "\n"
    }' "$1"
}

# Every run is bounded (timeout, and inside strace so that it is the bench
# that dies): a core that hangs shows as a missing figure, not a stuck script.
T="timeout -k 5"
run_build() { # old|new round
  local b=$1 r=$2 bin=$WORK/$1/bench out=$RES/$1-$2
  echo "== $b, round $r"
  $T $((PACED_S * 3 + 60)) "$bin/bench_paced" --seconds "$PACED_S" > "$out-paced.txt" 2>&1 || true
  $T $((FLAT_S * 3 + 60)) "$bin/bench_paced" --flat --seconds "$FLAT_S" > "$out-flat.txt" 2>&1 || true
  if [ $HAVE_STRACE = 1 ]; then
    # shellcheck disable=SC2086
    strace $SECCOMP -f -e trace=futex,membarrier,madvise,nanosleep,clock_nanosleep \
      -o "$out.strace" $T $((STRACE_S * 5 + 60)) "$bin/bench_paced" --seconds "$STRACE_S" \
      > "$out-strace-paced.txt" 2>&1 || true
    local tid
    tid=$(awk -F'\t' '$1 == "publisher_tid" { print $2 }' "$out-strace-paced.txt")
    printf 'syscalls\t%s\n' "$(count_syscalls "$out.strace" "$tid")" > "$out-syscalls.txt"
    printf 'requests\t%s\n' \
      "$(awk -F'\t' '$1 == "requests" { print $2 }' "$out-strace-paced.txt")" >> "$out-syscalls.txt"
  fi
  $T $((IDLE_S + 60)) "$bin/bench_paced" --idle "$IDLE_S" > "$out-idle.txt" 2>&1 || true
  $T $((WATCHDOG * 12 + 60)) "$bin/bench_stall" --watchdog "$WATCHDOG" > "$out-stall.txt" 2>&1 || true
  $T $((WATCHDOG * 12 + 60)) "$bin/bench_stall" --watchdog "$WATCHDOG" --sink fifo \
    > "$out-stallfifo.txt" 2>&1 || true
  $T $((LOAD_S * 3 + 60)) "$bin/bench_load" --rate 1000000 --seconds "$LOAD_S" > "$out-load.txt" 2>&1 || true
  $T 300 "$bin/bench_publish" --quick > "$out-publish.txt" 2>&1 || true
}

for r in $(seq 1 "$ROUNDS"); do
  run_build old "$r"
  run_build new "$r"
done

# ---- the table ---------------------------------------------------------------

COLS=()
for r in $(seq 1 "$ROUNDS"); do COLS+=("old-$r" "new-$r"); done

get() { # file key: the value column of "key<TAB>value<TAB>comment"
  [ -f "$1" ] || { echo "-"; return; }
  awk -F'\t' -v k="$2" '$1 == k { v = $2 } END { print (v == "" ? "-" : v) }' "$1"
}
short() { # one cell: blocked calls and status names, shorter
  sed -e 's/waited > \([0-9.]*\)s (blocked)/blocked >\1s/' -e 's/ CBT_ERR_/ /' -e 's/ CBT_OK/ OK/' \
      -e 's/ ms / /'
}
# miss CHECK VALUE: "*" when VALUE misses the target: le:X (a number <= X),
# timeout:T (CBT_ERR_TIMEOUT within T + 50 ms), zero (every /-separated
# count 0), load (>= 0.99 M delivered, nothing lost)
miss() {
  awk -v c="$1" -v v="$2" 'BEGIN {
    split(c, a, ":"); n = v + 0
    if (v == "-" || v == "") { print ""; exit }
    if (a[1] == "le") bad = (v ~ /blocked/) || n > a[2] + 0
    else if (a[1] == "timeout") bad = (v !~ /TIMEOUT/) || n > a[2] + 50
    else if (a[1] == "zero") { bad = 0; m = split(v, p, "/"); for (i = 1; i <= m; i++) if (p[i] + 0 != 0) bad = 1 }
    else if (a[1] == "load") { split(v, w, " "); bad = w[1] + 0 < 0.99 || w[2] != "0/0/0" }
    print bad ? "*" : ""
  }'
}
row() { # label target check cell...
  local label=$1 target=$2 check=$3
  shift 3
  printf '%-40s %-20s' "$label" "$target"
  for v in "$@"; do
    v=$(printf '%s' "$v" | short)
    printf ' %-18s' "$v$( [ -n "$check" ] && miss "$check" "$v")"
  done
  printf '\n'
}
cells() { # kind key: that figure in every column
  local c
  for c in "${COLS[@]}"; do get "$RES/$c-$1.txt" "$2"; done
}
ratio_cells() {
  local c p f
  for c in "${COLS[@]}"; do
    p=$(get "$RES/$c-paced.txt" cpu_per_span_us)
    f=$(get "$RES/$c-flat.txt" cpu_per_span_us)
    awk -v p="$p" -v f="$f" 'BEGIN { if (f + 0 > 0 && p != "-") printf "%.2f\n", p / f; else print "-" }'
  done
}
sys_cells() { # the futex/membarrier/madvise counts, and the sleeps
  local c f
  for c in "${COLS[@]}"; do
    f=$RES/$c-syscalls.txt
    if [ ! -f "$f" ]; then echo "-"; continue; fi
    awk -F'\t' -v want="$1" '$1 == "syscalls" {
      n = split($2, kv, " ")
      for (i = 1; i <= n; i++) { split(kv[i], x, "="); c[x[1]] = x[2] }
      if (want == "waits") print c["futex"] "/" c["membarrier"] "/" c["madvise"]
      else print c["nanosleep"] "/" c["clock_nanosleep"]
    }' "$f"
  done
}
load_cells() { # bench_load at 1 M spans/s: delivered, lost lane/pool/exporter
  local c
  for c in "${COLS[@]}"; do
    f=$RES/$c-load.txt
    [ -f "$f" ] || { echo "-"; continue; }
    sed -n 's/.*delivered *\([0-9.]*\) M spans\/s *lost: lanes \([0-9]*\) events, span pool \([0-9]*\), exporter \([0-9]*\) spans.*/\1M \2\/\3\/\4/p' "$f" | head -1
  done
}
publish_cells() { # bench_publish --quick: the median of one figure
  local c
  for c in "${COLS[@]}"; do
    f=$RES/$c-publish.txt
    [ -f "$f" ] || { echo "-"; continue; }
    awk -v k="$1" '$1 == k { print $2; found = 1 } END { if (!found) print "-" }' "$f"
  done
}
mapcells() { local -n _out=$1; shift; mapfile -t _out < <("$@"); }

echo
echo "== cbt core, old against new: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "   old: $BASE_SHA ($(git log -1 --format=%s "$BASE_SHA" | cut -c1-60))"
echo "   new: working tree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench' 2>/dev/null || echo ' + uncommitted changes')"
echo "   machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "   raw output: $RES"
echo "   * = misses the target (the targets are the new core's)"
echo
printf '%-40s %-20s' "figure" "target"
for c in "${COLS[@]}"; do printf ' %-18s' "$c"; done
printf '\n'

mapcells v cells paced publish_median_ns;       row "publish median ns (paced 250/s)" "<= 60" le:60 "${v[@]}"
mapcells v cells paced publish_mean_ns;         row "publish mean ns (paced)" "<= 100" le:100 "${v[@]}"
mapcells v cells paced publish_p99_ns;          row "publish p99 ns (paced)" "" "" "${v[@]}"
mapcells v cells paced first_of_request_median_ns; row "first of a request, median ns" "" "" "${v[@]}"
mapcells v cells paced first_publish_us;        row "a thread's first publish us (lane)" "<= 1000" le:1000 "${v[@]}"
mapcells v cells flat publish_median_ns;        row "publish median ns (flat)" "<= 60" le:60 "${v[@]}"
mapcells v cells flat publish_mean_ns;          row "publish mean ns (flat)" "<= 100" le:100 "${v[@]}"
mapcells v cells paced cpu_per_span_us;         row "CPU us/span, paced 250 req/s" "" "" "${v[@]}"
mapcells v cells flat cpu_per_span_us;          row "CPU us/span, flat out" "" "" "${v[@]}"
mapcells v ratio_cells;                         row "  paced / flat" "<= 2" le:2 "${v[@]}"
mapcells v cells flat spans_per_s;              row "  flat out spans/s (no loss)" "" "" "${v[@]}"
mapcells v cells paced spans_lost;              row "spans lost (paced)" "0" zero "${v[@]}"
mapcells v cells flat spans_lost;               row "spans lost (flat)" "0" zero "${v[@]}"
mapcells v cells paced harvester_wakeups_per_s; row "harvester wake-ups/s (paced)" "" "" "${v[@]}"
if [ $HAVE_STRACE = 1 ]; then
  mapcells v sys_cells waits;                   row "publisher futex/membarrier/madvise" "0/0/0 (steady)" zero "${v[@]}"
  mapcells v sys_cells sleeps;                  row "  nanosleep/clock_nanosleep" "= requests (pacing)" "" "${v[@]}"
  mapcells v cells syscalls requests;           row "  requests in the strace window" "" "" "${v[@]}"
else
  echo "SKIP publisher system calls: strace is not installed (apt-get install strace)"
fi
mapcells v cells idle idle_cpu_ms_per_s;        row "idle CPU ms/s (no publish)" "<= 1" le:1 "${v[@]}"
for k in stall stallfifo; do
  [ $k = stall ] && what="block" || what="fifo"
  mapcells v cells $k stall_first_publish_ms;   row "stalled ($what): new thread publish ms" "<= 1" le:1 "${v[@]}"
  mapcells v cells $k stall_metrics_get_ms;     row "stalled ($what): metrics_get ms" "<= 1" le:1 "${v[@]}"
  mapcells v cells $k stall_flush_100ms;        row "stalled ($what): flush(100)" "TIMEOUT <= 150 ms" timeout:100 "${v[@]}"
  mapcells v cells $k stall_flush_500ms;        row "stalled ($what): flush(500)" "TIMEOUT <= 550 ms" timeout:500 "${v[@]}"
done
mapcells v load_cells;                          row "1 M spans/s: delivered, lost l/p/e" "1.000M 0/0/0" load "${v[@]}"
mapcells v publish_cells publish_on;            row "bench_publish publish_on ns" "" "" "${v[@]}"
mapcells v publish_cells publish_slept;         row "bench_publish publish_slept ns" "<= 60" le:60 "${v[@]}"
mapcells v publish_cells build_publish;         row "bench_publish build_publish ns" "" "" "${v[@]}"
mapcells v publish_cells publish_array_1k;      row "bench_publish array 1k ids ns" "" "" "${v[@]}"
mapcells v publish_cells publish_array_128k;    row "bench_publish array 128k ids ns" "" "" "${v[@]}"
