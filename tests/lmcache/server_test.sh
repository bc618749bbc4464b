#!/usr/bin/env bash
# tests/lmcache/server_test.sh — `make test-lmcache-server`: a real LMCache
# 0.5.6 MP server on the CPU with cbt's bridge (`python -m cbt.lmcache server`),
# driven by LMCache's own client, and the spans cbt made checked
# (docs/testing.md, "The real LMCache server"). Opt-in: not in `make test` or
# ctest, since it installs LMCache with torch (~6 GB).
#
#   tests/lmcache/server_test.sh
#
# 1. The venv ${CBT_LMCACHE_SERVER_VENV:-${XDG_CACHE_HOME:-~/.cache}/cbt/lmcache-0.5.6}:
#    made once with `pip install lmcache==0.5.6` (torch and the CUDA wheels
#    with it; a marker records it, a second run installs nothing), plus
#    lmcache-cli 0.5.7rc3.dev0's wheel (pinned sha256, pure Python) unpacked
#    into it for LMCache 0.5.7's `lmcache bench trace-analyze` and tracing
#    subscribers; the 0.5.6 install is not touched (tests/lmcache/trace_analyze.py).
# 2. cbt's wheel, built by scripts/wheel.sh into build/wheel/ as `make wheel`
#    does, installed into that venv (--no-deps --force-reinstall).
# 3. Run "gpu": `python -m cbt.lmcache server --enable-tracing
#    --supported-transfer-mode auto --trace-level gpu --trace-output R.lct`
#    (OTLP/gRPC to tests/grpc_collector.py, every span also to a JSON-lines
#    file), driven by `lmcache bench server --mode cpu --transfer-mode
#    lmcache_driven` for sequences 0..3 and then with --tp-size 2 for 10..11;
#    SIGINT stops it. Checked: the trees (server_check.py trees), the
#    collector got every span, and `cbt replay R.lct` gives the span file
#    byte for byte.
# 4. Run "token": the same with --enable-token-trace (no recording), the
#    events cbt was handed written by tests/lmcache/server_tap.py, cbt's OTLP
#    JSON file (--otlp-json-path) written too. Checked: the trees with one
#    mp.request.trace per request carrying the lookup's token ids; the OTLP
#    JSON file holds the span file's spans; LMCache 0.5.7's own subscribers
#    given the same events (server_check.py lmcache057) make mp.request.trace
#    records equal to cbt's; and `lmcache bench trace-analyze` (0.5.7's) gives
#    the same report from cbt's OTLP JSON file, from what the collector
#    received from cbt, and from 0.5.7's own spans.
#
# Output under ${CBT_LMCACHE_SERVER_OUT:-build/lmcache-server} (logs, spans,
# the reports). Exit 0 passed; 77 with "SKIP: lmcache_server: <reason>" when
# LMCache cannot be installed here (no package index, no python3-venv, no
# Python 3.11 for LMCache 0.5.6's cp311 wheels, under 10 GB free); 1 with the
# failures.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${CBT_LMCACHE_SERVER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cbt/lmcache-0.5.6}"
out="${CBT_LMCACHE_SERVER_OUT:-$root/build/lmcache-server}"
py="${CBT_LMCACHE_PYTHON:-python3}"
LMCACHE_PIN="lmcache==0.5.6"
CLI_VERSION=0.5.7rc3.dev0
CLI_SHA256=b5a93fe0ad8c81c8b2387f329c904f781274366a88d0ce25878b3eeee74f5b6c
SEQS=(0:4:1 10:12:2)       # --start:--end:--tp-size of the client runs
T="$root/tests/lmcache"

skip() { echo "SKIP: lmcache_server: $*"; exit 77; }
die() { echo "lmcache_server: FAIL: $*"; exit 1; }
say() { echo "lmcache_server: $*"; }
t0=$SECONDS

index_unreachable() { # prints why and succeeds when PyPI (or the configured index) cannot be reached
  "$py" "$(dirname "${BASH_SOURCE[0]}")/index_unreachable.py"
}

# -- 1. the venv -------------------------------------------------------------
marker="$venv/.cbt-lmcache-server"
want="$LMCACHE_PIN lmcache-cli==$CLI_VERSION sha256=$CLI_SHA256"
cli_root="$venv/lmcache-cli-$CLI_VERSION"
if [ "$(cat "$marker" 2>/dev/null)" != "$want" ] || ! [ -x "$venv/bin/python" ]; then
  command -v "$py" >/dev/null 2>&1 || skip "$py is not installed"
  "$py" -c 'import venv, ensurepip' >/dev/null 2>&1 ||
    skip "'$py -m venv' is not available (Debian: the python3-venv package)"
  pyver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  [ "$pyver" = 3.11 ] ||
    skip "$py is Python $pyver; LMCache 0.5.6 ships cp311 wheels only (CBT_LMCACHE_PYTHON=python3.11)"
  mkdir -p "$(dirname "$venv")" || die "cannot create $(dirname "$venv")"
  free_kb="$(df -Pk "$(dirname "$venv")" | awk 'NR==2 {print $4}')"
  [ "${free_kb:-0}" -ge $((10 * 1024 * 1024)) ] ||
    skip "$(dirname "$venv") has $((free_kb / 1024)) MiB free; LMCache 0.5.6 with torch takes ~6.2 GB"
  exec 9>"$venv.lock"
  command -v flock >/dev/null 2>&1 && flock 9
  if [ "$(cat "$marker" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv"
    say "creating $venv and installing $LMCACHE_PIN (torch and the CUDA wheels: ~6 GB, a few minutes)"
    s=$SECONDS
    "$py" -m venv "$venv" || { rm -rf "$venv"; die "'$py -m venv $venv' failed"; }
    pip=("$venv/bin/python" -m pip --disable-pip-version-check)
    if ! "${pip[@]}" install -q --timeout 30 --retries 2 "$LMCACHE_PIN"; then
      why="$(index_unreachable)" && { rm -rf "$venv"; skip "the package index cannot be reached ($why)"; }
      die "pip could not install $LMCACHE_PIN from a reachable index"
    fi
    say "$LMCACHE_PIN installed in $((SECONDS - s)) s: $(du -sh "$venv" | cut -f1)"
    if ! "${pip[@]}" download -q --no-deps --timeout 30 --retries 2 -d "$venv/dl" \
           "lmcache-cli==$CLI_VERSION"; then
      why="$(index_unreachable)" && skip "the package index cannot be reached ($why)"
      die "pip could not download lmcache-cli==$CLI_VERSION"
    fi
    whl="$venv/dl/lmcache_cli-$CLI_VERSION-py3-none-any.whl"
    got="$(sha256sum "$whl" 2>/dev/null | cut -d' ' -f1)"
    [ "$got" = "$CLI_SHA256" ] || die "$whl has sha256 ${got:-?}, not the pinned $CLI_SHA256"
    "$venv/bin/python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      "$whl" "$cli_root" || die "cannot unpack $whl"
    printf '%s\n' "$want" >"$marker"
  fi
  exec 9>&-
fi
vpy="$venv/bin/python"
export LMCACHE_DISABLE_BANNER=1 PYTHONDONTWRITEBYTECODE=1

# -- 2. cbt's wheel into it --------------------------------------------------
say "building cbt's wheel (scripts/wheel.sh)"
wheel="$("$root/scripts/wheel.sh" "$root/build/wheel" | tail -n1)" && [ -f "$wheel" ] ||
  die "scripts/wheel.sh failed"
"$vpy" -m pip install -q --disable-pip-version-check --no-index --no-deps --force-reinstall "$wheel" ||
  die "installing $wheel into $venv failed"

# -- 3./4. the runs ----------------------------------------------------------
rm -rf "$out" && mkdir -p "$out" || die "cannot make $out"
fails=0
bad() { echo "lmcache_server: FAIL: $*"; fails=$((fails + 1)); }
free_port() { "$vpy" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

# run NAME SERVER-COMMAND...: a collector, the server with the command, the
# client runs, SIGINT; leaves $out/NAME.{spans.jsonl,collector.jsonl,*.log}
run() {
  local name="$1"
  shift
  local d="$out/$name" port http cport cpid spid i
  mkdir -p "$d"
  "$vpy" "$root/tests/grpc_collector.py" serve --out "$d/collector.jsonl" --lifetime 1200 \
    >"$d/collector.port" 2>"$d/collector.log" &
  cpid=$!
  pids+=("$cpid")
  for i in $(seq 100); do grep -q '^PORT ' "$d/collector.port" 2>/dev/null && break; sleep 0.1; done
  cport="$(awk '/^PORT /{print $2}' "$d/collector.port")"
  [ -n "$cport" ] || { bad "$name: the collector did not start ($(tail -3 "$d/collector.log"))"; return 1; }
  port="$(free_port)"
  http="$(free_port)"
  say "$name: $* --otlp-endpoint http://127.0.0.1:$cport --port $port --http-port $http ..."
  CBT_SPANS_PATH="$d/spans.jsonl" "$@" --otlp-endpoint "http://127.0.0.1:$cport" \
    --supported-transfer-mode auto --port "$port" --http-port "$http" \
    --l1-size-gb 1 --eviction-policy LRU >"$d/server.log" 2>&1 &
  spid=$!
  pids+=("$spid")
  for i in $(seq 180); do
    kill -0 "$spid" 2>/dev/null || { bad "$name: the server exited: $(grep -v Warning "$d/server.log" | tail -5)"; return 1; }
    "$vpy" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "http://127.0.0.1:$http/" 2>/dev/null && break
    sleep 1
  done
  local s
  for s in "${SEQS[@]}"; do
    IFS=: read -r a b tp <<<"$s"
    "$venv/bin/lmcache" bench server --mode cpu --transfer-mode lmcache_driven --tp-size "$tp" \
      --rpc-url "tcp://localhost:$port" --url "http://localhost:$http" --start "$a" --end "$b" \
      --interval 0.1 >"$d/bench-$a-$b-tp$tp.log" 2>&1 ||
      bad "$name: lmcache bench server --start $a --end $b --tp-size $tp failed: $(tail -3 "$d/bench-$a-$b-tp$tp.log")"
    grep -q 'Pass rate (%): *100.00' "$d/bench-$a-$b-tp$tp.log" ||
      bad "$name: the client's own checks did not all pass ($(grep 'Pass rate' "$d/bench-$a-$b-tp$tp.log"))"
  done
  kill -INT "$spid"
  for i in $(seq 120); do kill -0 "$spid" 2>/dev/null || break; sleep 1; done
  kill -0 "$spid" 2>/dev/null && { kill -9 "$spid"; bad "$name: the server did not stop within 120 s of SIGINT"; }
  wait "$spid" 2>/dev/null
  kill "$cpid" 2>/dev/null
  wait "$cpid" 2>/dev/null
  grep "^cbt\|^server_tap" "$d/server.log" | head -8
  [ -s "$d/spans.jsonl" ] || { bad "$name: cbt wrote no span file"; return 1; }
  # the collector got every span cbt made (OTLP/gRPC, as LMCache exports)
  local got
  got="$("$vpy" -c '
import json, sys
print(sum(r.get("items", 0) for r in map(json.loads, open(sys.argv[1]))
          if r.get("kind") == "request" and r.get("service") == "traces" and r.get("outcome") == "ok"))
' "$d/collector.jsonl")"
  [ "$got" = "$(wc -l <"$d/spans.jsonl")" ] ||
    bad "$name: the collector received $got spans, the span file holds $(wc -l <"$d/spans.jsonl")"
  return 0
}

seq_args=()
for s in "${SEQS[@]}"; do seq_args+=(--seq "$s"); done

# 3. the trees, and the gpu-level recording replayed
if run gpu "$vpy" -m cbt.lmcache server --enable-tracing \
     --trace-level gpu --trace-output "$out/gpu/server.lct"; then
  "$vpy" "$T/server_check.py" trees "$out/gpu/spans.jsonl" "${seq_args[@]}" || bad "gpu: the trees"
  if "$venv/bin/cbt" replay "$out/gpu/server.lct" --spans "$out/gpu/replay.jsonl" \
       >"$out/gpu/replay.log" 2>&1; then
    cmp -s "$out/gpu/spans.jsonl" "$out/gpu/replay.jsonl" &&
      say "gpu: cbt replay gives the live span file byte for byte ($(wc -l <"$out/gpu/replay.jsonl") spans)" ||
      bad "gpu: the replay's spans differ from the live ones ($(cmp "$out/gpu/spans.jsonl" "$out/gpu/replay.jsonl" 2>&1 | head -1))"
  else
    bad "gpu: cbt replay failed: $(tail -3 "$out/gpu/replay.log")"
  fi
fi

# 4. the token trace, and LMCache 0.5.7's trace-analyze on it
tk="$out/token"
mkdir -p "$tk"
if run token "$vpy" "$T/server_tap.py" "$tk/events.pickle" -- server --enable-token-trace \
     --otlp-json-path "$tk/cbt.otlp.jsonl"; then
  "$vpy" "$T/server_check.py" trees "$tk/spans.jsonl" "${seq_args[@]}" \
    --token-trace "$tk/events.pickle" \
    $( [ -s "$tk/cbt.otlp.jsonl" ] && echo --otlp-json "$tk/cbt.otlp.jsonl") || bad "token: the trees"
  [ -s "$tk/cbt.otlp.jsonl" ] ||
    bad "token: cbt wrote no OTLP JSON file at --otlp-json-path $tk/cbt.otlp.jsonl"
  # what the collector received from cbt, one ExportTraceServiceRequest a line
  "$vpy" -c '
import base64, json, sys
with open(sys.argv[2], "w") as out:
    for r in map(json.loads, open(sys.argv[1])):
        if r.get("kind") == "request" and r.get("service") == "traces" and r.get("outcome") == "ok":
            out.write(json.dumps(r["request"]) + "\n")
' "$tk/collector.jsonl" "$tk/collector.otlp.jsonl" || bad "token: cannot read the collector's log"
  "$vpy" "$T/server_check.py" lmcache057 "$tk/events.pickle" "$tk/lmcache057.otlp.jsonl" \
    --root "$cli_root" || bad "token: LMCache 0.5.7's subscribers"
  inputs=(lmcache057)
  [ -s "$tk/cbt.otlp.jsonl" ] && inputs+=(cbt)
  inputs+=(collector)
  for f in "${inputs[@]}"; do
    [ "$f" = lmcache057 ] ||
      "$vpy" "$T/server_check.py" records "$tk/$f.otlp.jsonl" "$tk/lmcache057.otlp.jsonl" ||
      bad "token: the mp.request.trace records of the $f file"
    if ! "$vpy" "$T/trace_analyze.py" "$cli_root" bench trace-analyze -i "$tk/$f.otlp.jsonl" \
         --html "$tk/$f.html" --chunk-size 16 256 --capacity 1k 4k 64k \
         --format json --output "$tk/$f.report.json" >"$tk/$f.report.log" 2>&1; then
      bad "token: lmcache bench trace-analyze -i $f.otlp.jsonl failed: $(tail -1 "$tk/$f.report.log")"
      continue
    fi
    [ "$f" = lmcache057 ] ||
      "$vpy" "$T/server_check.py" reports "$tk/$f.report.json" "$tk/lmcache057.report.json" ||
      bad "token: trace-analyze's report from the $f file is not 0.5.7's"
  done
  # the terminal report, as a user sees it, from cbt's file
  [ -s "$tk/cbt.otlp.jsonl" ] &&
    "$vpy" "$T/trace_analyze.py" "$cli_root" bench trace-analyze -i "$tk/cbt.otlp.jsonl" \
      --html "$tk/cbt.html" 2>/dev/null | sed -n '/Trace Analysis/,$p'
fi

[ "$fails" -eq 0 ] || die "$fails check(s) failed; logs and files in $out"
say "passed in $((SECONDS - t0)) s (venv $venv: $(du -sh "$venv" | cut -f1))"
