#!/bin/bash
# tests/record_replay.sh — ctest record_replay: `cbt demo --trace-level gpu`
# records, `cbt replay FILE.lct` gives back the live run's span and trace
# files byte for byte (MP on the CPU backend, and CacheBlend), the command's
# exit codes and messages for bad flags and bad files, and a recording cut
# short by SIGTERM replays into the spans the live run wrote.
#
#   record_replay.sh CBT WORKDIR RECORDINGS
#
# Each recording is left in RECORDINGS with a .count sidecar (the records the
# demo said it wrote) for LMCache's own reader (lmct_lmcache_recordings).
set -u
cbt="$1" work="$2" recs="$3"
rm -rf "$work"
mkdir -p "$work" "$recs"
cd "$work" || exit 1
failed=0
fail() { echo "record_replay: FAIL: $*" >&2; failed=1; }

# run EXPECTED_RC NAME CMD...: stdout in NAME.out, stderr in NAME.err
run() {
  local want="$1" name="$2"
  shift 2
  "$@" >"$name.out" 2>"$name.err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$name: exit $rc, expected $want: $*"
    sed 's/^/  | /' "$name.err" >&2
  fi
}
# said NAME FILE PATTERN: FILE (NAME.out or NAME.err) has PATTERN
said() {
  grep -q -- "$3" "$1.$2" || { fail "$1: its std$2 does not say '$3'"; sed 's/^/  | /' "$1.$2" >&2; }
}
same() { cmp -s "$1" "$2" || fail "$1 and $2 differ ($(cmp "$1" "$2" 2>&1 | head -1))"; }
# sidecar NAME LCT: the record count the demo printed, next to a copy in RECORDINGS
sidecar() {
  local n
  n=$(sed -n 's/^trace recording: \([0-9][0-9]*\) records.*/\1/p' "$1.out")
  if [ -z "$n" ] || [ "$n" -eq 0 ]; then
    fail "$1: no 'trace recording: N records' line"
    return
  fi
  cp "$2" "$recs/record_replay-$1.lct" && echo "$n" >"$recs/record_replay-$1.lct.count"
}

demo=(demo --cpu --trees 0 --slowest 0)

# ---- live == replay, MP and CacheBlend ----------------------------------------------
run 0 mp "$cbt" "${demo[@]}" --requests 40 --spans L.jsonl --output L.json \
  --trace-level gpu --trace-output X.lct
said mp out "trace recording: [0-9]* records, [0-9]* bytes in X.lct"
run 0 mp_replay "$cbt" replay X.lct --spans R.jsonl --output R.json --quiet
said mp_replay out "X.lct: [0-9]* records ([0-9]* events, [1-9][0-9]* ring records"
[ -s L.jsonl ] || fail "the live span file L.jsonl is empty"
same L.jsonl R.jsonl
same L.json R.json
[ -s mp_replay.err ] && { fail "mp_replay: --quiet still wrote to stderr"; cat mp_replay.err >&2; }
sidecar mp X.lct

run 0 cb "$cbt" "${demo[@]}" --requests 20 --cacheblend --spans CL.jsonl --output CL.json \
  --trace-level gpu --trace-output C.lct
run 0 cb_replay "$cbt" replay C.lct --spans CR.jsonl --output CR.json --quiet
grep -q '"name":"cb.request"' CL.jsonl || fail "the CacheBlend run made no cb.request span"
same CL.jsonl CR.jsonl
same CL.json CR.json
sidecar cb C.lct

# without --quiet: a progress line on stderr (at least the last one, at 100%)
run 0 progress "$cbt" replay X.lct --spans PR.jsonl
said progress err "cbt replay: [0-9]* records, [0-9]* events, 100% of X.lct"
same L.jsonl PR.jsonl

# paced as recorded (--speed 1): the same spans, later
run 0 paced "$cbt" replay X.lct --spans P.jsonl --output P.json --speed 1 --quiet
same L.jsonl P.jsonl
same L.json P.json

# head sampling: the decisions are in the recorded events, so a replay under
# another sampler gives the live run's spans
OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=0.5 \
  run 0 sampled "$cbt" "${demo[@]}" --requests 20 --cacheblend --spans HL.jsonl \
  --output HL.json --trace-level gpu --trace-output H.lct
said sampled out "sampled out [1-9]"
OTEL_TRACES_SAMPLER=always_off run 0 sampled_replay "$cbt" replay H.lct --spans HR.jsonl \
  --output HR.json --quiet
same HL.jsonl HR.jsonl
same HL.json HR.json

# ---- LMCache 0.5.7's trace schema (CBT_TRACE_SCHEMA=2, as python -m cbt.lmcache sets
# it beside an LMCache 0.5.7): the header says 2 and names lmcache-0.5.7, the
# records are the same, the replay gives the live spans
CBT_TRACE_SCHEMA=2 run 0 mp2 "$cbt" "${demo[@]}" --requests 20 --spans L2.jsonl \
  --trace-level gpu --trace-output X2.lct
run 0 mp2_replay "$cbt" replay X2.lct --spans R2.jsonl --quiet
grep -aq 'lmcache-0.5.7' X2.lct || fail "X2.lct does not name lmcache-0.5.7 in its header"
grep -aq 'lmcache-0.5.6' X.lct || fail "X.lct (the default) does not name lmcache-0.5.6"
[ -s L2.jsonl ] || fail "the live span file L2.jsonl is empty"
same L2.jsonl R2.jsonl
sidecar mp2 X2.lct
CBT_TRACE_SCHEMA=3 run 1 schema3 "$cbt" "${demo[@]}" --requests 1 --trace-level gpu \
  --trace-output Z.lct
said schema3 err 'CBT_TRACE_SCHEMA "3": cbt writes trace schema 1'
# a recording whose header names another schema than its number: refused, named
perl -0777 -pe 's/lmcache-0\.5\.7/lmcache-0.5.9/' X2.lct >S.lct
run 2 schema_name "$cbt" replay S.lct --spans S.jsonl
said schema_name err 'trace_schema "lmcache-0.5.9" is not a schema this cbt reads'

# ---- flags the demo refuses -----------------------------------------------------------
run 2 level_cpu "$cbt" "${demo[@]}" --trace-level cpu
said level_cpu err 'level "gpu" only, not cpu'
run 2 output_alone "$cbt" "${demo[@]}" --trace-output Y.lct
said output_alone err "without --trace-level"
[ -e Y.lct ] && fail "output_alone: Y.lct was written"

# ---- files and flags the replay refuses -------------------------------------------
run 2 missing "$cbt" replay "$work/nonexistent.lct"
said missing err "$work/nonexistent.lct: No such file"
perl -0777 -pe 's/LMCT/XMCT/' X.lct >M.lct
run 2 magic "$cbt" replay M.lct --spans M.jsonl
said magic err "M.lct: bad magic"
run 2 speed0 "$cbt" replay X.lct --speed 0
said speed0 err "speed"
run 2 speed_asap "$cbt" replay X.lct --speed 2 --asap
said speed_asap err "exclusive"

# a copy cut inside a frame: exit 3, a warning, the spans of its complete part
size=$(stat -c %s X.lct)
cut=$((size * 2 / 3))
head -c "$cut" X.lct >T.lct
# (a cut that happens to fall on a frame boundary is a clean end: one byte less)
"$cbt" replay T.lct --spans T.jsonl --quiet >/dev/null 2>&1 && head -c $((cut - 1)) X.lct >T.lct
run 3 truncated "$cbt" replay T.lct --spans T.jsonl --quiet
said truncated err "warning: T.lct: the frame at offset"
said truncated out "the recording has no shutdown"
[ -s T.jsonl ] || fail "truncated: no spans from the complete part"
# every span it ended from the file is the live run's, line for line; the
# ones still open at the cut end incomplete
if [ -s T.jsonl ]; then
  extra=$(grep -v '"incomplete":true' T.jsonl | grep -cvxFf L.jsonl)
  [ "$extra" -eq 0 ] || fail "truncated: $extra complete spans are not the live run's"
fi

# to stdout, no --spans: the spans as JSON lines
run 0 stdout "$cbt" replay X.lct --quiet
n=$(grep -c '^{"trace_id":"[0-9a-f]\{32\}","span_id":"[0-9a-f]\{16\}"' stdout.out)
[ "$n" -eq "$(wc -l <L.jsonl)" ] || fail "stdout: $n span lines, the live run had $(wc -l <L.jsonl)"
said stdout err "X.lct: [0-9]* records"

# ---- SIGTERM: a long run stopped after about a second closes its recording --------
"$cbt" "${demo[@]}" --requests 200000 --spans S.jsonl --output S.json --trace-level gpu \
  --trace-output S.lct >term.out 2>term.err &
pid=$!
# about a second into the run, and once the recording has some requests in
# it (a sanitizer build starts slowly): at most 30 s
sleep 1
for _ in $(seq 300); do
  [ "$(stat -c %s S.lct 2>/dev/null || echo 0)" -gt 32768 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
  fail "term: the demo exited $rc after SIGTERM (killed by it: $((rc > 128)))"
  grep -A3 "WARNING: ThreadSanitizer\|ERROR: AddressSanitizer" term.err | head -20 >&2
fi
run 0 term_replay "$cbt" replay S.lct --spans SR.jsonl --quiet
said term_replay out "S.lct: [0-9]* records"
grep -q "no shutdown" term_replay.out && fail "term_replay: the recording has no shutdown"
[ -s S.jsonl ] || fail "term: the live span file is empty"
same S.jsonl SR.jsonl
sidecar term S.lct

if [ "$failed" -ne 0 ]; then
  echo "record_replay: failed (files in $work)"
  exit 1
fi
echo "record_replay: ok (MP and CacheBlend replays byte-identical, refusals, truncation, SIGTERM)"
