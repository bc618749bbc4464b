"""tests/python/test_replay.py — trace recording and replay from Python
(cbt.init(trace_level="gpu", ...), cbt.replay; docs/python.md, "Recording and
replay"; the C side is cbt/replay.h).

One recording per test (the `rec` fixture): two MP requests, one of them with
its store on a CpuStream, and a `with cbt.span` (one more on the stream),
written to a span file and an LMCT file. Then: the replay's span file is the
live one byte for byte, on_span sees the same spans, the stats and metrics
say what the file holds, and every error path raises what docs/python.md
says and leaves no tracer behind. LMCache's own TraceReader reads the file
when build/lmcache-env exists (the C tests make it), else that test skips.
"""
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import warnings

import pytest

import cbt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LMDIR = os.path.join(ROOT, "tests", "lmcache")
ENV = os.environ.get("CBT_LMCACHE_ENV", os.path.join(ROOT, "build", "lmcache-env"))

REPLAY_KEYS = {
    "records", "events", "ring_records", "clock_records", "unknown_skipped",
    "malformed_skipped", "bytes", "truncated", "shutdown_seen", "gaps", "gap_records",
    "spans_ended", "spans_dropped",
    "spans_unsampled", "sink_errors", "sink_spans_lost", "config_json", "metrics", "messages",
}

pytestmark = pytest.mark.skipif(not cbt._cbt.HAVE_RECORDING,
                                reason="this build has no trace recording (msgpack-c missing)")


def read_spans(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(autouse=True)
def no_tracer(monkeypatch):
    """Each test starts and ends without a tracer, and without the recording
    environment of the shell that runs it."""
    monkeypatch.delenv("CBT_TRACE_LEVEL", raising=False)
    monkeypatch.delenv("CBT_TRACE_OUTPUT", raising=False)
    assert not cbt.enabled(), "a previous test left a tracer running"
    yield
    if cbt.enabled():
        cbt.shutdown()


def record(lct, live):
    """A live run recorded at level gpu: returns shutdown's final metrics."""
    cbt.init(trace_level="gpu", trace_output=lct, spans_path=live, otlp_endpoint="")
    # a request on the CPU
    cbt.publish("mp.request.start", "req-cpu", model="llama")
    cbt.publish("mp.store.start", "req-cpu", engine_id=0)
    cbt.publish("mp.store.end", "req-cpu", engine_id=0, success=True)
    cbt.publish("mp.request.end", "req-cpu")
    # one whose store the stream times (marks stamped when it reaches them)
    with cbt.CpuStream() as st:
        cbt.publish("mp.request.start", "req-stream")
        cbt.publish("mp.store.submitted", "req-stream", engine_id=1)
        st.enqueue(lambda: time.sleep(0.01))
        cbt.publish_on_stream(st, "mp.store.start", "req-stream", engine_id=1)
        st.enqueue(lambda: time.sleep(0.02))
        cbt.publish_on_stream(st, "mp.store.end", "req-stream", engine_id=1)
        with cbt.span("cb.check", session_id="req-stream", stream=st) as chk:
            st.enqueue(lambda: time.sleep(0.005))
            chk.set(imp_count=3)
        st.sync()
        cbt.publish("mp.request.end", "req-stream")
    with cbt.span("cb.schedule", session_id="req-cpu", n_polls=2):
        pass
    return cbt.shutdown()


@pytest.fixture
def rec(tmp_path):
    lct, live = str(tmp_path / "run.lct"), str(tmp_path / "live.jsonl")
    fin = record(lct, live)
    return {"lct": lct, "live": live, "fin": fin, "dir": tmp_path}


def assert_no_tracer():
    """The replay tracer is gone: a live tracer starts and stops."""
    assert not cbt.enabled()
    with pytest.raises(cbt.Error) as ei:
        cbt.metrics()
    assert ei.value.status == cbt._cbt.ERR_NOT_INITIALIZED
    cbt.init(otlp_endpoint="")
    assert cbt.enabled()
    cbt.shutdown()


# ---- recording -------------------------------------------------------------------------


def test_recording_metrics_say_what_was_written(rec):
    fin = rec["fin"]
    names = sorted(s["name"] for s in read_spans(rec["live"]))
    assert names == ["cb.check", "cb.schedule", "mp.store", "mp.store", "request", "request"]
    assert fin["trace_records"] > 10 and fin["trace_records_dropped"] == 0
    assert fin["trace_write_errors"] == 0
    assert fin["trace_bytes"] == os.path.getsize(rec["lct"])
    assert fin["spans_ended"] == 6


def test_metrics_while_recording_have_the_trace_fields(tmp_path):
    cbt.init(trace_level="gpu", trace_output=tmp_path / "r.lct", otlp_endpoint="")
    m = cbt.metrics()
    assert {"trace_records", "trace_records_dropped", "trace_bytes",
            "trace_write_errors"} <= set(m)
    assert all(type(m[k]) is int for k in m)
    fin = cbt.shutdown()
    assert fin["trace_bytes"] == os.path.getsize(tmp_path / "r.lct") > 0


def test_not_recording_writes_nothing(tmp_path):
    cbt.init(otlp_endpoint="")
    cbt.publish("mp.request.start", "r")
    cbt.publish("mp.request.end", "r")
    fin = cbt.shutdown()
    assert fin["trace_records"] == fin["trace_bytes"] == 0


def test_trace_level_from_the_environment(tmp_path, monkeypatch):
    lct = tmp_path / "env.lct"
    monkeypatch.setenv("CBT_TRACE_LEVEL", "gpu")
    monkeypatch.setenv("CBT_TRACE_OUTPUT", str(lct))
    cbt.init(otlp_endpoint="")  # trace_level None: CBT_TRACE_LEVEL decides
    cbt.publish("mp.request.start", "r")
    cbt.publish("mp.request.end", "r")
    fin = cbt.shutdown()
    assert fin["trace_records"] > 0 and os.path.getsize(lct) == fin["trace_bytes"]
    # trace_output wins over CBT_TRACE_OUTPUT
    mine = tmp_path / "mine.lct"
    cbt.init(otlp_endpoint="", trace_output=str(mine))
    fin = cbt.shutdown()
    assert os.path.getsize(mine) == fin["trace_bytes"] > 0
    # "" is off, whatever CBT_TRACE_LEVEL says
    os.unlink(lct)
    cbt.init(otlp_endpoint="", trace_level="")
    fin = cbt.shutdown()
    assert fin["trace_bytes"] == 0 and not lct.exists()


def test_trace_level_errors(tmp_path):
    with pytest.raises(ValueError, match="'cpu'"):
        cbt.init(trace_level="cpu", trace_output=str(tmp_path / "x.lct"))
    assert not cbt.enabled() and not (tmp_path / "x.lct").exists()
    with pytest.raises(ValueError, match="'GPU'"):
        cbt.init(trace_level="GPU")
    with pytest.raises(TypeError, match="trace_level"):
        cbt.init(trace_level=1)
    with pytest.raises(TypeError):
        cbt.init(trace_buffer_kib="big")
    with pytest.raises(cbt.Error) as ei:
        cbt.init(trace_level="gpu", trace_output=str(tmp_path / "x.lct"), trace_buffer_kib=10)
    assert ei.value.status == cbt._cbt.ERR_INVAL
    with pytest.raises(cbt.Error) as ei:
        cbt.init(trace_level="gpu", trace_output="/nonexistent-dir/x.lct")
    assert ei.value.status == cbt._cbt.ERR_IO and "/nonexistent-dir/x.lct" in str(ei.value)
    assert not cbt.enabled()


# ---- replay ----------------------------------------------------------------------------


def test_replay_span_file_is_the_live_one_byte_for_byte(rec):
    out = str(rec["dir"] / "replay.jsonl")
    with warnings.catch_warnings():
        warnings.simplefilter("error", cbt.ReplayWarning)  # a clean replay says nothing
        r = cbt.replay(rec["lct"], spans_path=out)
    assert read_bytes(out) == read_bytes(rec["live"])
    assert REPLAY_KEYS <= set(r)
    fin = rec["fin"]
    assert r["records"] == fin["trace_records"]
    assert r["bytes"] == fin["trace_bytes"] == os.path.getsize(rec["lct"])
    assert r["truncated"] == 0 and r["shutdown_seen"] == 1
    assert r["unknown_skipped"] == r["malformed_skipped"] == 0
    assert r["events"] == fin["dispatched"]
    assert r["spans_ended"] == fin["spans_ended"] == r["metrics"]["spans_ended"]
    assert r["sink_errors"] == 0 and r["messages"] == []
    cfg = json.loads(r["config_json"])
    assert cfg["producer"] == "cbt" and cfg["level"] == "gpu"
    assert not cbt.enabled()
    # a second replay of the same file: the same spans again
    out2 = str(rec["dir"] / "replay2.jsonl")
    cbt.replay(pathlib.Path(rec["lct"]), spans_path=pathlib.Path(out2))
    assert read_bytes(out2) == read_bytes(rec["live"])


def test_on_span_receives_the_same_spans(rec):
    got = []
    r = cbt.replay(rec["lct"], on_span=got.append)
    live = read_spans(rec["live"])
    assert got == live  # same order, ids, times, attributes
    assert {s["span_id"] for s in got} == {s["span_id"] for s in live}
    assert r["spans_ended"] == len(got)


def test_replay_trace_file_is_the_live_one(tmp_path):
    lct = str(tmp_path / "run.lct")
    cbt.init(trace_level="gpu", trace_output=lct, trace_path=str(tmp_path / "live.json"),
             otlp_endpoint="")
    cbt.publish("mp.request.start", "req-t")
    cbt.publish("mp.store.start", "req-t", engine_id=0)
    cbt.publish("mp.store.end", "req-t", engine_id=0)
    cbt.publish("mp.request.end", "req-t")
    cbt.shutdown()
    cbt.replay(lct, trace_path=str(tmp_path / "replay.json"))
    assert read_bytes(tmp_path / "replay.json") == read_bytes(tmp_path / "live.json")


def test_replay_refused_while_a_tracer_runs(rec):
    cbt.init(otlp_endpoint="")
    try:
        with pytest.raises(cbt.Error) as ei:
            cbt.replay(rec["lct"], spans_path=str(rec["dir"] / "no.jsonl"))
        assert ei.value.status == cbt._cbt.ERR_ALREADY and "running" in str(ei.value)
        assert cbt.enabled()  # the live tracer is untouched
        cbt.publish("mp.request.start", "r")
        cbt.publish("mp.request.end", "r")
    finally:
        fin = cbt.shutdown()
    assert fin["spans_ended"] == 1
    assert not (rec["dir"] / "no.jsonl").exists()


def test_replay_missing_file(tmp_path):
    p = str(tmp_path / "missing.lct")
    with pytest.raises(cbt.Error) as ei:
        cbt.replay(p)
    assert ei.value.status == cbt._cbt.ERR_IO
    assert p in str(ei.value) and "No such file" in str(ei.value)
    assert_no_tracer()


@pytest.mark.parametrize("data,status", [
    (b"not a trace at all\n" * 10, "ERR_LMCT_LIMIT"),   # a frame length of 1.8 GB
    (b"", "ERR_LMCT_BEYOND_FILE"),                       # no header
    (b"\x00\x00\x00\x05abcde", "ERR_LMCT_TYPE"),          # a frame that is not msgpack
])
def test_replay_garbage_file(tmp_path, data, status):
    p = tmp_path / "garbage.lct"
    p.write_bytes(data)
    with pytest.raises(cbt.Error) as ei:
        cbt.replay(str(p), spans_path=str(tmp_path / "s.jsonl"))
    assert ei.value.status == getattr(cbt._cbt, status)
    assert str(p) in str(ei.value)
    assert not (tmp_path / "s.jsonl").exists()  # refused before the tracer started
    assert_no_tracer()


def test_replay_bad_magic_and_digest_mismatch(rec):
    data = read_bytes(rec["lct"])
    hlen = int.from_bytes(data[:4], "big")
    header = data[4:4 + hlen]
    bad = rec["dir"] / "bad.lct"
    # the magic
    b = bytearray(data)
    b[4 + header.index(b"LMCT") + 3] = ord("X")
    bad.write_bytes(bytes(b))
    with pytest.raises(cbt.Error) as ei:
        cbt.replay(str(bad))
    assert ei.value.status == cbt._cbt.ERR_LMCT_BAD_MAGIC and "magic" in str(ei.value)
    # the config digest (the SHA-256 of the recorded JSON): one hex digit changed
    digest = hashlib.sha256(cbt.replay(rec["lct"])["config_json"].encode()).hexdigest()
    i = header.find(digest.encode())
    assert i > 0 and re.search(rb"[0-9a-f]{64}", header).start() == i
    b = bytearray(data)
    b[4 + i] = ord("0") if b[4 + i] != ord("0") else ord("1")
    bad.write_bytes(bytes(b))
    with pytest.raises(cbt.Error) as ei:
        cbt.replay(str(bad))
    assert ei.value.status == cbt._cbt.ERR_REPLAY_MISMATCH
    assert "digest" in str(ei.value) and str(bad) in str(ei.value)
    assert_no_tracer()
    # forced: said as a warning, and the spans are the live ones
    out = str(rec["dir"] / "forced.jsonl")
    with pytest.warns(cbt.ReplayWarning, match="digest"):
        r = cbt.replay(str(bad), spans_path=out, force=True)
    assert r["messages"] and "replaying anyway" in r["messages"][0]
    assert read_bytes(out) == read_bytes(rec["live"])


def test_replay_truncated_file_warns_and_keeps_what_is_complete(rec):
    data = read_bytes(rec["lct"])
    cut = rec["dir"] / "cut.lct"
    cut.write_bytes(data[:-3])  # inside the last record (the shutdown)
    out = str(rec["dir"] / "cut.jsonl")
    with pytest.warns(cbt.ReplayWarning, match="records before it were replayed"):
        r = cbt.replay(str(cut), spans_path=out)
    assert r["truncated"] == 1 and r["shutdown_seen"] == 0
    assert r["records"] == rec["fin"]["trace_records"] - 1
    assert "offset" in r["truncated_message"]
    # every span was complete before the cut: they end at the replay's shutdown
    assert r["spans_ended"] == rec["fin"]["spans_ended"]
    assert {s["span_id"] for s in read_spans(out)} == \
        {s["span_id"] for s in read_spans(rec["live"])}
    assert_no_tracer()


def frames(data):
    """The (offset, length) of each frame: [4-byte big-endian length][msgpack]."""
    out, off = [], 0
    while off + 4 <= len(data):
        n = int.from_bytes(data[off:off + 4], "big")
        out.append((off, n))
        off += 4 + n
    return out


def test_replay_bad_frame_in_the_middle_raises_with_the_stats(rec):
    data = read_bytes(rec["lct"])
    fr = frames(data)
    assert len(fr) == 1 + rec["fin"]["trace_records"]  # the header, then the records
    k = len(fr) // 2  # a record in the middle: its first byte never starts msgpack
    b = bytearray(data)
    b[fr[k][0] + 4] = 0xC1
    bad = rec["dir"] / "mid.lct"
    bad.write_bytes(bytes(b))
    out = str(rec["dir"] / "mid.jsonl")
    with pytest.raises(cbt.Error) as ei:
        cbt.replay(str(bad), spans_path=out)
    e = ei.value
    assert e.status == cbt._cbt.ERR_LMCT_TYPE and str(bad) in str(e)
    assert e.stats["records"] == k - 1 and e.stats["truncated"] == 0  # the ones before it
    assert e.stats["spans_ended"] == len(read_spans(out))
    assert_no_tracer()


ON_SPAN_AT_SHUTDOWN = r"""
import json, sys, threading, cbt
lct, cut = sys.argv[1], sys.argv[2]
cbt.init(trace_level="gpu", trace_output=lct, otlp_endpoint="")
cbt.publish("mp.request.start", "req-open")   # never ended: open at shutdown
cbt.publish("mp.store.start", "req-done", engine_id=0)  # its request root: implicit, open
cbt.publish("mp.store.end", "req-done", engine_id=0)
fin = cbt.shutdown()
data = open(lct, "rb").read()
open(cut, "wb").write(data[:-3])               # the shutdown record cut off
got = []
def on_span(s):
    got.append((s["name"], threading.current_thread() is threading.main_thread(),
                s["incomplete"]))
r = cbt.replay(cut, on_span=on_span)
print(json.dumps({"got": got, "truncated": r["truncated"], "shutdown_seen": r["shutdown_seen"],
                  "spans": r["spans_ended"], "live": fin["spans_ended"]}))
"""


def test_on_span_gets_the_spans_the_replays_shutdown_ends(tmp_path):
    # the request still open when the file ends: it ends in cbt_shutdown,
    # called with the GIL released, and on_span takes the GIL there (in a
    # fresh interpreter: a callback without the GIL would crash it)
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", ON_SPAN_AT_SHUTDOWN,
                        str(tmp_path / "o.lct"), str(tmp_path / "cut.lct")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["truncated"] == 1 and out["shutdown_seen"] == 0
    # the store ended in the file; both open roots (incomplete) in the
    # replay's cbt_shutdown (nothing else ends them: the file has no
    # shutdown), on this thread
    assert sorted(out["got"]) == [["mp.store", True, False], ["request", True, True],
                                  ["request", True, True]]
    assert out["spans"] == out["live"] == 3


def test_on_span_exception_propagates_and_the_tracer_is_gone(rec):
    class Boom(Exception):
        pass

    calls = []

    def on_span(s):
        calls.append(s["name"])
        raise Boom(s["span_id"])

    out = str(rec["dir"] / "boom.jsonl")
    with pytest.raises(Boom) as ei:
        cbt.replay(rec["lct"], spans_path=out, on_span=on_span)
    assert len(calls) == 1  # no later span reached it
    assert ei.value.args[0] == read_spans(rec["live"])[0]["span_id"]
    # the other sinks got every span all the same
    assert read_bytes(out) == read_bytes(rec["live"])
    assert_no_tracer()
    # and a replay after it works
    got = []
    cbt.replay(rec["lct"], on_span=got.append)
    assert len(got) == rec["fin"]["spans_ended"]


def test_on_span_exception_stops_a_long_replay(tmp_path):
    # past the first batch of 1024 records the replay stops where on_span
    # raised: the rest of the file is not replayed
    lct, live = str(tmp_path / "long.lct"), str(tmp_path / "long.jsonl")
    cbt.init(trace_level="gpu", trace_output=lct, spans_path=live, otlp_endpoint="")
    for i in range(1500):
        cbt.publish("mp.request.start", f"r{i}")
        cbt.publish("mp.request.end", f"r{i}")
    fin = cbt.shutdown()
    assert fin["trace_records"] > 3000

    class Boom(Exception):
        pass

    def on_span(s):
        raise Boom()

    out = str(tmp_path / "stopped.jsonl")
    with pytest.raises(Boom):
        cbt.replay(lct, spans_path=out, on_span=on_span)
    with open(out) as f:
        n = sum(1 for _ in f)
    assert 0 < n < fin["spans_ended"], (n, fin["spans_ended"])
    assert_no_tracer()


def test_signal_stops_a_paced_replay(rec):
    # a paced replay releases the GIL; a signal handler that raises (Ctrl-C's
    # KeyboardInterrupt, here SIGALRM's) stops it within a slice
    code = r'''
import signal, sys, time, cbt
class Stop(Exception): pass
def handler(sig, frm): raise Stop()
signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.2)
t0 = time.monotonic()
try:
    cbt.replay(sys.argv[1], speed=0.001)   # 1000x slower than recorded: many seconds
    print("finished")
except Stop:
    print("stopped %.2f" % (time.monotonic() - t0))
assert not cbt.enabled()
'''
    p = subprocess.run([sys.executable, "-c", code, rec["lct"]], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("stopped"), p.stdout
    assert float(p.stdout.split()[1]) < 5.0, p.stdout


def test_replay_argument_errors_leave_no_tracer(rec):
    lct = rec["lct"]
    with pytest.raises(TypeError, match="on_span"):
        cbt.replay(lct, on_span=5)
    with pytest.raises(TypeError, match="speed"):
        cbt.replay(lct, speed="fast")
    with pytest.raises(ValueError, match="speed"):
        cbt.replay(lct, speed=-1.0)
    with pytest.raises(TypeError, match="force"):
        cbt.replay(lct, force="yes")
    with pytest.raises(TypeError):
        cbt.replay(lct, "spans.jsonl")  # keywords only after the path
    assert_no_tracer()
    # errors after the replay tracer started: it is shut down
    with pytest.raises(cbt.Error) as ei:
        cbt.replay(lct, spans_path="/nonexistent-dir/s.jsonl")
    assert ei.value.status == cbt._cbt.ERR_IO and "/nonexistent-dir/s.jsonl" in str(ei.value)
    assert_no_tracer()
    if cbt._cbt.HAVE_OTLP:
        with pytest.raises(ValueError, match="otlp_endpoint"):
            cbt.replay(lct, otlp_endpoint="grpc://localhost:4317")
        assert_no_tracer()


def test_replay_paced(rec):
    # paced by the records' t_mono: as recorded (speed 1) takes the recording's
    # span at least; the spans are the same
    out = str(rec["dir"] / "paced.jsonl")
    t0 = time.monotonic()
    cbt.replay(rec["lct"], spans_path=out, speed=1.0)
    assert time.monotonic() - t0 >= 0.03  # the stream's sleeps were recorded
    assert read_bytes(out) == read_bytes(rec["live"])


# ---- what runs while a replay runs -------------------------------------------------------

IN_CALLBACK = r"""
import json, sys, cbt
path = sys.argv[1]
seen = {}
def on_span(s):
    if seen:
        return
    for name, call in (("metrics", cbt.metrics), ("shutdown", cbt.shutdown),
                       ("init", lambda: cbt.init(otlp_endpoint="")),
                       ("replay", lambda: cbt.replay(path))):
        try:
            call()
            seen[name] = "returned"
        except cbt.Error as e:
            seen[name] = e.status
r = cbt.replay(path, on_span=on_span)
print(json.dumps({"seen": seen, "spans": r["spans_ended"]}))
"""


def test_calls_from_on_span_refuse_instead_of_deadlocking(rec):
    # in a fresh interpreter: a deadlock here would hang the suite
    p = subprocess.run([sys.executable, "-c", IN_CALLBACK, rec["lct"]], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    already = cbt._cbt.ERR_ALREADY
    assert out["seen"] == {"metrics": already, "shutdown": already, "init": already,
                           "replay": already}
    assert out["spans"] == rec["fin"]["spans_ended"]


GIL_REPLAY = r"""
import json, sys, threading, time, cbt
lct = sys.argv[1]
cbt.init(trace_level="gpu", trace_output=lct, otlp_endpoint="")
for i in range(20000):
    cbt.publish("mp.request.start", "r%d" % i)
    cbt.publish("mp.request.end", "r%d" % i)
cbt.shutdown()
sys.setswitchinterval(1e-4)
n = [0]
stop = False
def count():
    while not stop:
        n[0] += 1
th = threading.Thread(target=count)
th.start()
time.sleep(0.05)
res = []
for _ in range(2):
    a = n[0]; t0 = time.perf_counter()
    time.sleep(0.05)  # the counter's rate alone, just before
    rate = (n[0] - a) / (time.perf_counter() - t0)
    a = n[0]; t0 = time.perf_counter()
    cbt.replay(lct)
    res.append((n[0] - a) / (rate * (time.perf_counter() - t0)))
stop = True
th.join()
print(json.dumps(res))
"""


def test_replay_without_on_span_releases_the_gil(tmp_path):
    p = subprocess.run([sys.executable, "-c", GIL_REPLAY, str(tmp_path / "big.lct")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    # the counter thread (it needs the GIL) ran while the replay did, at
    # about its rate alone (a ratio near 1 here), against a few percent (one
    # 0.1 ms switch interval before the call, and the shutdown, which
    # releases it anyway) were the GIL held; the better of two tries, for a
    # busy machine
    assert max(res) > 0.25, res


# ---- LMCache's own reader --------------------------------------------------------------

READER = r"""
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
from lmct_reader_check import load_reader
fmt, TraceReader = load_reader(sys.argv[2])
with TraceReader(sys.argv[3]) as r:
    h = r.header
    n = sum(1 for _ in r.records())
print(json.dumps({"magic": h.magic.decode(), "level": h.level, "n": n,
                  "producer": (h.level_meta or {}).get("producer"),
                  "digest_ok": hashlib.sha256(h.sm_config_json.encode()).hexdigest()
                               == h.sm_config_digest}))
"""


def test_lmcache_trace_reader_reads_the_recording(rec):
    py = os.path.join(ENV, "venv", "bin", "python")
    whl = os.path.join(ENV, "whl")
    if not (os.access(py, os.X_OK) and os.path.isdir(whl)):
        pytest.skip(f"LMCache's TraceReader: no {ENV} (tests/lmcache/setup_env.sh makes it; "
                    "make test runs the C tests that do first)")
    p = subprocess.run([py, "-c", READER, LMDIR, whl, rec["lct"]], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got == {"magic": "LMCT", "level": "gpu", "n": rec["fin"]["trace_records"],
                   "producer": "cbt", "digest_ok": True}
