#!/usr/bin/env bash
# tests/cli_report.sh — `cbt report` end to end, as a person would run it:
# a span file, an OTLP JSON file and a recording each give a report; the
# planted slow queue is named in the terminal and in the HTML page; two
# servers' files merge into whole requests; planted completeness problems are
# counted first, with file:line; percentiles agree with exactly computed ones;
# every input or flag it cannot take is named with exit 2.
#   cli_report.sh CBT REPORT_GEN WORKDIR HAVE_MSGPACK(0|1)
set -u
CBT=$1 GEN=$2 D=$3/cli-report MSGPACK=${4:-1}
rm -rf "$D" && mkdir -p "$D" && cd "$D" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# run CODE ARGS...: cbt report ARGS, expect exit CODE; output in out.txt
run() {
  local code=$1; shift
  "$CBT" report "$@" >out.txt 2>&1
  local rc=$?
  [ "$rc" -eq "$code" ] || { fail "cbt report $*: exit $rc, expected $code"; sed 's/^/    /' out.txt | head -40; }
}
has() { grep -qE -- "$1" "${2:-out.txt}" || { fail "no '$1' in ${2:-out.txt}"; sed 's/^/    /' "${2:-out.txt}" | head -60; }; }
hasnt() { ! grep -qE -- "$1" "${2:-out.txt}" || fail "'$1' in ${2:-out.txt}"; }

# 1. a span file with a planted slow queue: named in the terminal and the page
"$GEN" --out q.jsonl --spans 3000 --plant-queue cb.scatter 2>/dev/null || fail "report_gen"
run 0 q.jsonl --html q.html --slowest 2
has "^COMPLETENESS: whole"
has "^MOST QUEUEING: cb.scatter waited"
has "cb.scatter .*\\| +1\\.[5-7][0-9] ms"       # its queue p50, about 1.6 ms
has "^SLOWEST 2 REQUESTS"
has "HTML report: q.html"
has "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">" q.html
for id in plot-latency plot-bands plot-breakdown plot-queue plot-hitrate plot-timeline plot-waterfall-1 plot-waterfall-2; do
  has "<svg class=\"cbt-plot[^\"]*\" id=\"$id\"" q.html
done
has "id=\"slowest-queue\" class=\"cbt-slowest\" data-op=\"cb.scatter\"" q.html
has "<b class=\"cbt-op-name\">cb.scatter</b>" q.html
has "id=\"completeness\" class=\"cbt-whole\"" q.html
hasnt "<script|src=\"http|href=\"http|@import|url\\(" q.html

# a planted slow stream: named too
"$GEN" --out ps.jsonl --spans 3000 --plant-stream 2 2>/dev/null
run 0 ps.jsonl --html ps.html
has "^SLOWEST STREAM: cpu stream 2: [0-9]+ spans waited"
has "id=\"slowest-stream\" class=\"cbt-slowest\" data-stream=\"cpu stream 2\"" ps.html
has "<svg class=\"cbt-plot\" id=\"plot-streams\"" ps.html

# 2. the same as OTLP JSON (the collector's file exporter: one request per line)
"$GEN" --out q.otlp.json --format otlp --batch 64 --spans 3000 --plant-queue cb.gather 2>/dev/null
run 0 q.otlp.json --html o.html
has "q.otlp.json: OTLP JSON, 300[0-9] spans, service report-gen"
has "^MOST QUEUEING: cb.gather"
has "^  cpu stream [0-3] +[0-9]+ "
has "data-op=\"cb.gather\"" o.html

# 3. two servers' files: roots and host work in one, stream work in the other
"$GEN" --out a.jsonl --out2 b.jsonl --spans 3000 2>/dev/null
run 0 a.jsonl b.jsonl
has "^cbt report: 2 files, 300[0-9] spans, [0-9]+ requests"
has "^COMPLETENESS: whole"
has "^  GPU busy +[0-9]"
requests=$(sed -n 's/^cbt report: 2 files, [0-9]* spans, \([0-9]*\) requests.*/\1/p' out.txt)
run 0 b.jsonl                                   # the stream half alone: no roots
has "NOT WHOLE: .*$requests incomplete roots"
"$GEN" --out a.otlp --out2 b.otlp --format otlp --spans 3000 2>/dev/null
run 0 a.otlp b.jsonl                            # formats mixed: trace ids match
has "^COMPLETENESS: whole"

# 4. planted problems, counted first, with file:line
"$GEN" --out planted.jsonl --spans 300 --plant-orphan --plant-noroot --plant-bad --plant-incomplete 2>/dev/null
run 0 planted.jsonl --html p.html
has "^COMPLETENESS: NOT WHOLE: 1 bad line, 1 incomplete root, 1 orphan, 1 span ended incomplete"
has "planted.jsonl:[0-9]+: "
has "incomplete roots: 1 traces"
has "spans ended incomplete: 1 \\(idle 1\\)"
first=$(grep -nE '^(COMPLETENESS|SPANS BY NAME)' out.txt | head -1 | cut -d: -f2)
[ "$first" = "COMPLETENESS" ] || fail "completeness is not the first section"
has "id=\"completeness\" class=\"cbt-not-whole\"" p.html
has "class=\"cbt-bad-lines\">bad lines: 1<" p.html
has "class=\"cbt-orphans\">orphans: 1 spans" p.html

# 5. percentiles against exactly computed ones (the sketch: 0.4%, the printing
# of three digits: 0.5%)
"$GEN" --out x.jsonl --spans 20000 --exact cb.scatter >exact.txt 2>/dev/null
run 0 x.jsonl --slowest 0
to_ns() { awk -v v="$1" -v u="$2" 'BEGIN { m = u == "ns" ? 1 : u == "us" ? 1e3 : u == "ms" ? 1e6 : 1e9; printf "%.0f", v * m }'; }
check_row() { # name row-pattern: compare p50 p90 p99 max of the report's row with exact.txt
  local name=$1 row
  row=$(grep -E "$2" out.txt | head -1)
  read -r -a ex <<<"$(grep "^$name " exact.txt)"
  read -r -a f <<<"$(sed -E "s/$2//" <<<"$row")"
  for k in 0 1 2 3; do
    local got; got=$(to_ns "${f[$((2 * k))]}" "${f[$((2 * k + 1))]}")
    awk -v g="$got" -v e="${ex[$((k + 1))]}" 'BEGIN { d = g - e; if (d < 0) d = -d; exit !(d <= e * 0.01 + 1) }' ||
      fail "$name: column $k is $got ns, exactly ${ex[$((k + 1))]} ns"
  done
}
check_row cb.scatter "^  cb.scatter +[0-9]+ "
check_row latency "^  latency \\(end to end\\) +"

# 6. a recording, replayed in-process: the same report as its span file
if [ "$MSGPACK" = 1 ]; then
  "$CBT" demo --cpu --requests 40 --concurrency 4 --spans d.jsonl --output d.json \
         --trace-level gpu --trace-output d.lct --trees 0 --slowest 0 >demo.txt 2>&1 || fail "cbt demo"
  run 0 d.lct
  head -1 out.txt | sed 's/d\.lct/FILE/' >lct.head
  has "d.lct: LMCT recording"
  run 0 d.jsonl
  head -1 out.txt | sed 's/d\.jsonl/FILE/' >jsonl.head
  cmp -s lct.head jsonl.head || fail "the recording and its span file differ: $(cat lct.head) / $(cat jsonl.head)"
  head -c 100 d.lct >cut.lct                     # cut inside its header: refused
  run 2 cut.lct;  has "cbt report: cut.lct: .*claims"
  head -c $(($(stat -c %s d.lct) - 7)) d.lct >cut.lct   # cut inside its last frame: said
  run 0 cut.lct
  has "^COMPLETENESS: NOT WHOLE: .*inputs that say they lost data"
  has "^  cut.lct: (the frame|.*ends inside|.*truncated)"
else
  echo "SKIP (part): cbt was built without msgpack-c: no recordings"
fi

# a demo without queue times: every plot still there, the empty ones saying why
"$CBT" demo --cpu --requests 10 --spans nq.jsonl --output nq.json --trees 0 --slowest 0 >/dev/null 2>&1
run 0 nq.jsonl --html nq.html
for id in plot-latency plot-bands plot-breakdown plot-queue plot-streams plot-hitrate plot-timeline plot-waterfall-1; do
  has "<svg class=\"cbt-plot[^\"]*\" id=\"$id\"" nq.html
done
if grep -q '"cbt.queue_ns"' nq.jsonl; then
  has "id=\"slowest-queue\"" nq.html
else
  has "<svg class=\"cbt-plot cbt-empty\" id=\"plot-queue\"" nq.html
  hasnt "id=\"slowest-queue\"" nq.html
fi

# 7. what it refuses: each named, exit 2 (or 1 for an output it cannot write)
run 2 missing.jsonl;               has "cbt report: missing.jsonl: cannot open: No such file"
run 2 "$D";                        has "not a regular file"
echo "hello, not spans" >text.txt
run 2 q.jsonl text.txt;            has "cbt report: text.txt: not a cbt span file, an OTLP JSON file or an LMCT recording"
run 2;                             has "which files"
run 2 q.jsonl --slowest 101;       has "--slowest needs an integer in \\[0, 100\\]"
run 2 q.jsonl --max-open 0;        has "--max-open needs an integer"
run 2 q.jsonl --bogus;             has "unknown option '--bogus'"
run 2 q.jsonl --html;              has "--html needs a file name"
run 1 q.jsonl --html "$D/no/such/dir/r.html"; has "cannot write .*r.html"
: >empty.jsonl
run 0 empty.jsonl;                 has "0 spans, 0 requests"; has "^COMPLETENESS: EMPTY"
"$CBT" report --help | grep -q "cbt report FILE" || fail "cbt report --help"
"$CBT" --help | grep -q "cbt report FILE" || fail "cbt --help lacks report"

"$CBT" report q.jsonl >/dev/full 2>err.txt; rc=$?
[ "$rc" -eq 1 ] && grep -q "cannot write the report" err.txt || fail "stdout on /dev/full: exit $rc"

# 8. the demo with a planted slow stream (cbt demo --plant-queue, issue 24's
# queue-time part): the report and the page name the same operation
if "$CBT" demo --help 2>&1 | grep -q -- --plant-queue; then
  "$CBT" demo --cpu --requests 40 --plant-queue --spans pq.jsonl --output pq.json \
         --trees 0 --slowest 0 >demo.txt 2>&1 || fail "cbt demo --plant-queue"
  run 0 pq.jsonl --html pq.html
  has "^MOST QUEUEING: "
  op=$(sed -n 's/^MOST QUEUEING: \([^ ]*\) waited.*/\1/p' out.txt)
  has "data-op=\"$op\"" pq.html
else
  echo "SKIP (part): this cbt demo has no --plant-queue yet"
fi

[ "$fails" -eq 0 ] && echo "cli_report: all passed" || echo "cli_report: $fails failed"
[ "$fails" -eq 0 ]
