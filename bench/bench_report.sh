#!/usr/bin/env bash
# bench/bench_report.sh — how long `cbt report` takes on N spans (default
# 1,000,000): writes a span file and an OTLP JSON file of N spans with
# report_gen (bench/report_gen.c: the demo's request shape, cbt.queue_ns on
# the stream spans, a planted slow queue), then times `cbt report FILE --html`
# on each, best of 3, and prints the figures. The target (issue 24): 1 M
# spans in at most 10 s. Figures and the machine: docs/performance.md.
#   bench/bench_report.sh [BUILD_DIR] [N]
set -eu
B=${1:-build} N=${2:-1000000}
CBT=$B/cbt
GEN=$B/tests/report_gen
[ -x "$GEN" ] || GEN=$B/bench/report_gen
for x in "$CBT" "$GEN"; do
  [ -x "$x" ] || { echo "bench_report: $x is not built (cmake --build $B --target cbt_cli report_gen)"; exit 2; }
done
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
now() { date +%s.%N; }
best() { # best of 3 wall seconds of: cbt report ARGS
  local b=""
  for _ in 1 2 3; do
    local t0 t1; t0=$(now)
    "$CBT" report "$@" >"$T/out.txt" 2>&1 || { cat "$T/out.txt"; exit 1; }
    t1=$(now)
    b=$(awk -v a="$t0" -v z="$t1" -v b="$b" 'BEGIN { d = z - a; if (b == "" || d < b) b = d; printf "%.3f", b }')
  done
  echo "$b"
}
rss() { # peak resident KiB of one run
  /usr/bin/time -f %M "$CBT" report "$@" 2>&1 >/dev/null | tail -1
}
"$GEN" --out "$T/spans.jsonl" --spans "$N" --plant-queue cb.scatter 2>/dev/null
"$GEN" --out "$T/spans.otlp.json" --format otlp --spans "$N" --plant-queue cb.scatter 2>/dev/null
echo "cbt report on $N spans ($(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
for f in spans.jsonl spans.otlp.json; do
  s=$(best "$T/$f" --html "$T/r.html")
  mb=$(awk -v b="$(stat -c %s "$T/$f")" 'BEGIN { printf "%.0f", b / 1e6 }')
  rate=$(awk -v n="$N" -v s="$s" 'BEGIN { printf "%.0f", n / s / 1e3 }')
  kib=$(command -v /usr/bin/time >/dev/null && rss "$T/$f" --html "$T/r.html" || echo "?")
  echo "  $f ($mb MB): $s s, ${rate}k spans/s, peak RSS ${kib} KiB"
done
grep -m1 "^MOST QUEUEING" "$T/out.txt" | cut -c1-80
