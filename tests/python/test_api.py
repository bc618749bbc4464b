"""tests/python/test_api.py — the `cbt` Python API (docs/python.md).

One test per behaviour: typed values reach the spans file with their types,
wrong types and names raise, errors carry cbt's messages, flush and stream
sync release the GIL, a million publishes do not grow the process, the CPU
stream path stamps marks when reached and builds MP spans, ids differ across
fork, cbt.span / inject / extract round-trip, metrics and shutdown's dicts.
Each test runs its own tracer (the `tracer` fixture) and leaves none behind.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

import cbt

TP_RE = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-0[0-3]$")

METRIC_KEYS = {
    "published", "dropped_full", "rejected", "session_too_long", "dispatched",
    "subscriber_errors", "sink_errors", "queue_depth", "queue_capacity", "lanes",
    "pending_stream_marks", "lag_last_ns", "lag_max_ns", "spans_started", "spans_ended",
    "spans_dropped", "spans_open", "registry_full", "harvester_busy_ns", "spans_unsampled",
    "meta_truncated", "stream_marks_dropped", "sink_spans_lost", "harvester_wakeups",
    "trace_records", "trace_records_dropped", "trace_bytes", "trace_write_errors",
    "names_used", "names_capacity", "names_refused",
    "arrays_capacity", "arrays_used", "arrays_stored", "arrays_dropped",
}


def read_spans(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture
def spans_file(tmp_path):
    return str(tmp_path / "spans.jsonl")


@pytest.fixture
def tracer(spans_file):
    """A running tracer writing spans_file; shut down after the test."""
    assert not cbt.enabled(), "a previous test left a tracer running"
    cbt.init(spans_path=spans_file, otlp_endpoint="")
    yield spans_file
    if cbt.enabled():
        cbt.shutdown()


def run_py(code, timeout=60):
    """Run `code` in a fresh interpreter (for what could hang or must own
    the process: GIL, fork)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout)


# ---- types ---------------------------------------------------------------------------


def test_typed_values_reach_the_span_file(tracer):
    cbt.publish("mp.request.start", "req-types", i=-7, big=2**62, f=0.25, b=True, nb=False,
                s="short", long="x" * 100)
    cbt.publish("MP_REQUEST_END", "req-types")
    assert cbt.shutdown()["spans_ended"] >= 1
    (req,) = [s for s in read_spans(tracer) if s["name"] == "request"]
    a = req["attributes"]
    assert a["session_id"] == "req-types"
    assert a["i"] == -7 and type(a["i"]) is int
    assert a["big"] == 2**62
    assert a["f"] == 0.25 and type(a["f"]) is float
    assert a["b"] is True and a["nb"] is False
    assert a["s"] == "short" and a["long"] == "x" * 100


def test_explicit_timestamp_is_kept(tracer):
    t0 = 1_700_000_000_123_456_789
    cbt.publish("mp.request.start", "req-ts", t0)
    cbt.publish("mp.request.end", "req-ts", ts_ns=t0 + 5_000)
    cbt.shutdown()
    (req,) = [s for s in read_spans(tracer) if s["name"] == "request"]
    assert req["start_ns"] == t0 and req["end_ns"] == t0 + 5_000


def test_event_types_by_value_member_name_int_and_enum_value(tracer):
    class FakeEnum:  # LMCache's EventType members have a str .value
        value = "mp.request.start"
    t = cbt.register_event_type("MY_APP_EVENT")
    assert cbt.event_type_name(t) == "MY_APP_EVENT"
    assert cbt.event_type_name("MP_STORE_START") == "mp.store.start"
    cbt.publish(FakeEnum(), "a")
    cbt.publish(t, "a")
    cbt.publish("MY_APP_EVENT", "a", v=1)
    cbt.flush()
    assert cbt.metrics()["published"] == 3


def test_bad_value_types_raise_type_error(tracer):
    # a list or tuple is an array (test_arrays.py); the rest is refused
    for bad in ({"a": 1}, None, b"x", object(), {1}, range(2)):
        with pytest.raises(TypeError, match="values are int, float, bool, str, or a list"):
            cbt.publish("mp.store.start", "r", v=bad)
    with pytest.raises(TypeError):
        cbt.publish("mp.store.start", 5)  # session id not a str
    with pytest.raises(TypeError):
        cbt.publish(["mp.store.start"], "r")
    with pytest.raises(TypeError):
        cbt.publish("mp.store.start", "r", ts_ns="now")
    with pytest.raises(OverflowError):
        cbt.publish("mp.store.start", "r", v=2**64)
    with pytest.raises(ValueError, match="NUL"):
        cbt.publish("mp.store.start", "r", v="a\0b")
    cbt.flush()
    assert cbt.metrics()["published"] == 0  # nothing half-built went out


def test_unknown_event_name_raises_value_error():
    with pytest.raises(ValueError, match="unknown event type 'mp.nope'"):
        cbt.publish("mp.nope", "r")
    with pytest.raises(ValueError):
        cbt.publish(60000, "r")  # no such type number
    with pytest.raises(ValueError):
        cbt.event_type_name("nope")


# ---- errors ---------------------------------------------------------------------------


def test_session_too_long_is_cbt_error_with_cbt_message(tracer):
    with pytest.raises(cbt.Error) as ei:
        cbt.publish("mp.store.start", "s" * 64)
    e = ei.value
    assert e.status == cbt._cbt.ERR_SESSION_TOO_LONG
    assert cbt.strerror(e.status) in str(e)
    assert "64 bytes" in str(e)
    cbt.publish("mp.store.start", "s" * 63)  # the longest that fits
    cbt.flush()
    assert cbt.metrics()["session_too_long"] == 1


def test_every_status_code_has_one_constant_and_sentence():
    # cbt/status.h's CBT_STATUS_LIST makes the C enum, cbt_strerror's table and
    # these constants: every code 0..STATUS_COUNT-1 has exactly one OK / ERR_*
    # name and its own sentence, and no constant names a code past the end
    count = cbt._cbt.STATUS_COUNT
    named = {}
    for name in dir(cbt._cbt):
        if name == "OK" or name.startswith("ERR_"):
            named.setdefault(getattr(cbt._cbt, name), []).append(name)
    assert cbt._cbt.OK == 0 and count > cbt._cbt.ERR_REPLAY_MISMATCH
    missing = [code for code in range(count) if code not in named]
    assert not missing, f"status codes without a cbt._cbt constant: {missing}"
    shared = {code: names for code, names in named.items() if len(names) > 1}
    assert not shared, f"status codes with more than one constant: {shared}"
    assert sorted(named) == list(range(count)), "a constant past STATUS_COUNT"
    unknown = cbt.strerror(count)
    texts = [cbt.strerror(code) for code in range(count)]
    assert all(t and t != unknown for t in texts), texts
    assert len(set(texts)) == count, "two status codes share a sentence"


def test_too_many_values_and_long_keys_are_cbt_errors(tracer):
    with pytest.raises(cbt.Error) as ei:
        cbt.publish("mp.store.start", "r", **{f"k{i}": i for i in range(17)})
    assert ei.value.status == cbt._cbt.ERR_META_FULL
    with pytest.raises(cbt.Error) as ei:
        cbt.publish("mp.store.start", "r", **{"k" * 64: 1})
    assert ei.value.status == cbt._cbt.ERR_META_TOO_LONG
    assert cbt.strerror(cbt._cbt.ERR_META_TOO_LONG) in str(ei.value)


def test_init_errors():
    with pytest.raises(cbt.Error) as ei:
        cbt.init(queue_capacity=100)  # not a power of two
    assert ei.value.status == cbt._cbt.ERR_INVAL
    assert not cbt.enabled()
    with pytest.raises(TypeError):
        cbt.init(queue_capacity="big")
    with pytest.raises(ValueError):
        cbt.init(mp_root_end="sometimes")
    with pytest.raises(cbt.Error) as ei:
        cbt.init(spans_path="/nonexistent-dir/x.jsonl")
    assert ei.value.status == cbt._cbt.ERR_IO and "/nonexistent-dir/x.jsonl" in str(ei.value)
    cbt.init()
    try:
        with pytest.raises(cbt.Error) as ei:
            cbt.init()
        assert ei.value.status == cbt._cbt.ERR_ALREADY
    finally:
        cbt.shutdown()


def test_without_a_tracer_calls_are_quiet():
    assert not cbt.enabled()
    cbt.publish("mp.store.start", "r", v=1)
    cbt.flush()
    assert cbt.shutdown() == {}
    with pytest.raises(cbt.Error) as ei:
        cbt.metrics()
    assert ei.value.status == cbt._cbt.ERR_NOT_INITIALIZED
    with cbt.span("cb.schedule") as s:  # contexts still flow
        assert TP_RE.match(cbt.inject())
    assert s.context.trace_id != "0" * 32


# ---- GIL -------------------------------------------------------------------------------

GIL_FLUSH = r"""
import os, tempfile, threading, time, cbt
d = tempfile.mkdtemp()
fifo = os.path.join(d, "spans.fifo")
os.mkfifo(fifo)
rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)   # so the sink's open does not block
cbt.init(spans_path=fifo, otlp_endpoint="")
os.set_blocking(rfd, True)
got = [0]
def reader():  # a slow reader that needs the GIL: the sink waits on it
    while True:
        b = os.read(rfd, 16384)
        if not b:
            return
        got[0] += len(b)
        time.sleep(0.005)
ticks = [0]
stop = threading.Event()
def counter():
    while not stop.is_set():
        ticks[0] += 1
        time.sleep(0.001)
threading.Thread(target=reader, daemon=True).start()
threading.Thread(target=counter, daemon=True).start()
for i in range(3000):
    cbt.publish("mp.request.start", "r%d" % i, pad="p" * 200)
    cbt.publish("mp.request.end", "r%d" % i)
t0 = time.monotonic(); k0 = ticks[0]
cbt.flush(timeout_ms=15000)
dt = time.monotonic() - t0; dk = ticks[0] - k0
m = cbt.shutdown()
stop.set()
print("flush_s=%.3f ticks=%d ended=%d" % (dt, dk, m["spans_ended"]))
assert m["spans_ended"] == 3000 and m["sink_spans_lost"] == 0, m
assert dt > 0.05, dt            # the slow reader made flush wait
assert dk >= 10, dk             # the counter thread kept running meanwhile
print("OK")
"""


def test_flush_releases_the_gil():
    r = run_py(GIL_FLUSH, timeout=40)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


GIL_SYNC = r"""
import threading, time, cbt
with cbt.CpuStream() as st:
    ran = []
    # the stream's work is Python: it needs the GIL while sync waits for it
    st.enqueue(lambda: (time.sleep(0.05), ran.append(threading.get_ident())))
    ticks = [0]
    stop = threading.Event()
    def counter():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)
    th = threading.Thread(target=counter)
    th.start()
    k0 = ticks[0]
    st.sync()
    stop.set()
    th.join()
    assert ran and ran[0] != threading.get_ident(), ran  # ran on the worker thread
    assert ticks[0] - k0 >= 5, ticks
print("OK")
"""


def test_stream_sync_releases_the_gil():
    # in a child process: holding the GIL in sync would deadlock, not fail
    r = run_py(GIL_SYNC, timeout=30)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


# ---- memory ------------------------------------------------------------------------------


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_over_a_million_publishes(tmp_path):
    cbt.init(otlp_endpoint="", mp_subscriber=False)  # no spans: only the publish path
    try:
        pub = cbt.publish
        for i in range(100_000):  # warm: the lane, the caches, the allocator
            pub("mp.store.start", "req-leak", engine_id=i, ratio=0.5, ok=True, s="v")
        cbt.flush(timeout_ms=30000)
        before = rss_bytes()
        for i in range(1_000_000):
            pub("mp.store.start", "req-leak", engine_id=i, ratio=0.5, ok=True, s="v")
        cbt.flush(timeout_ms=30000)
        for i in range(100_000):
            with cbt.span("cb.check", session_id="req-leak", imp_count=i) as s:
                s.set(recomp_ratio=0.1)
        cbt.flush(timeout_ms=30000)
        grown = rss_bytes() - before
        m = cbt.metrics()
    finally:
        cbt.shutdown()
    assert m["published"] + m["dropped_full"] >= 1_300_000
    assert grown < 20 * 1024 * 1024, f"RSS grew {grown / 2**20:.1f} MiB"


# ---- CPU streams -------------------------------------------------------------------------


def test_cpu_stream_marks_stamped_when_reached_and_mp_spans_built(tracer):
    with cbt.CpuStream() as st:
        t_call = time.time_ns()
        cbt.publish("mp.request.start", "req-s")
        cbt.publish("mp.store.submitted", "req-s", engine_id=0)  # what LMCache sends first
        st.enqueue(lambda: time.sleep(0.05))
        cbt.publish_on_stream(st, "mp.store.start", "req-s", engine_id=0)
        st.enqueue(lambda: time.sleep(0.3))
        cbt.publish_on_stream(st, "MP_STORE_END", "req-s", engine_id=0)
        # the request ends on the CPU once the stream has started the store,
        # while the store is still running
        deadline = time.monotonic() + 10
        while st.stats()["marks_published"] < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        cbt.publish("mp.request.end", "req-s")
        st.sync()
        stats = st.stats()
    assert stats["marks_published"] == 2 and stats["marks_dropped"] == 0
    assert stats["items_completed"] == stats["items_enqueued"] == 4
    cbt.flush()
    cbt.shutdown()
    spans = {s["name"]: s for s in read_spans(tracer)}
    store, req = spans["mp.store"], spans["request"]
    assert store["parent_span_id"] == req["span_id"] and store["trace_id"] == req["trace_id"]
    # stamped when the stream reached the marks, not when publish_on_stream ran
    assert store["start_ns"] - t_call >= 45_000_000
    assert store["end_ns"] - store["start_ns"] >= 250_000_000
    # the store outlived REQUEST_END: the root (default rule: it ends at the
    # REQUEST_END time) carries the GPU tail
    tail = req["attributes"]["cbt.gpu_tail_ns"]
    assert tail == store["end_ns"] - req["end_ns"] and tail > 0


def test_cpu_stream_errors():
    st = cbt.CpuStream(capacity=2)
    with pytest.raises(TypeError):
        st.enqueue(42)
    st.close()
    st.close()  # idempotent
    assert st.closed
    with pytest.raises(cbt.Error) as ei:
        cbt.publish_on_stream(st, "mp.store.start", "r")
    assert ei.value.status == cbt._cbt.ERR_STOPPED
    with pytest.raises(cbt.Error):
        st.sync()
    with pytest.raises(cbt.Error) as ei:
        cbt.CpuStream(capacity=1)
    assert ei.value.status == cbt._cbt.ERR_INVAL
    with pytest.raises(TypeError):
        cbt.publish_on_stream(object(), "mp.store.start", "r")
    with pytest.raises(TypeError):
        cbt.publish_on_stream(cbt.CpuStream(), "mp.store.start", "r", ts_ns=5)


def _cuda_device_or_skip():
    """The CUDA runtime (ctypes) when this build has CUDA and a device is
    here; else skip, saying so (bench/gpu-check.sh runs these on a GPU)."""
    if not cbt._cbt.HAVE_CUDA:
        pytest.skip("this build has no CUDA: the GPU script runs the CUDA stream path")
    import ctypes
    for name in ("libcudart.so.13", "libcudart.so"):
        try:
            rt = ctypes.CDLL(name)
            break
        except OSError:
            rt = None
    if rt is None:
        pytest.skip("no CUDA runtime library here: the GPU script runs the CUDA stream path")
    n = ctypes.c_int(0)
    if rt.cudaGetDeviceCount(ctypes.byref(n)) != 0 or n.value == 0:
        pytest.skip("no CUDA device here: the GPU script runs the CUDA stream path")
    return rt


def test_cuda_stream_marks_on_device(tracer):
    """The CUDA stream path from Python, on a device: a raw cudaStream_t and a
    torch-like object with .cuda_stream both take CUDA-event marks, resolved
    on the device clock into mp.store spans under their request, inside the
    host's wall-clock window and in stream order."""
    import ctypes
    rt = _cuda_device_or_skip()
    h = ctypes.c_void_p()
    assert rt.cudaStreamCreate(ctypes.byref(h)) == 0

    class TorchLikeStream:
        cuda_stream = h.value

    t0 = time.time_ns()
    for sid, stream in (("gpu-raw", h.value), ("gpu-torch", TorchLikeStream())):
        cbt.publish("mp.request.start", sid)
        cbt.publish("mp.store.submitted", sid, engine_id=0)
        cbt.publish_on_stream(stream, "mp.store.start", sid, engine_id=0)
        cbt.publish_on_stream(stream, "mp.store.end", sid, engine_id=0)
        assert rt.cudaStreamSynchronize(h) == 0
        cbt.publish("mp.request.end", sid)
    cbt.flush()
    t1 = time.time_ns()
    m = cbt.shutdown()
    assert m["stream_marks_dropped"] == 0 and m["dropped_full"] == 0
    rt.cudaStreamDestroy(h)
    spans = read_spans(tracer)
    for sid in ("gpu-raw", "gpu-torch"):
        req = [s for s in spans if s["name"] == "request" and s["attributes"].get("session_id") == sid]
        assert len(req) == 1, spans
        store = [s for s in spans if s["name"] == "mp.store" and
                 s["parent_span_id"] == req[0]["span_id"]]
        assert len(store) == 1, spans
        st = store[0]
        assert t0 <= st["start_ns"] <= st["end_ns"] <= t1, (t0, st, t1)


@pytest.mark.skipif(cbt._cbt.HAVE_CUDA, reason="this build has CUDA: the GPU script covers it")
def test_cuda_handle_without_cuda_is_unsupported():
    with pytest.raises(cbt.Error) as ei:
        cbt.publish_on_stream(0, "mp.store.start", "r")
    assert ei.value.status == cbt._cbt.ERR_UNSUPPORTED


def test_cuda_handle_without_a_device_is_cbt_error():
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("a CUDA device is present: the GPU script covers the CUDA stream path")

    class TorchLikeStream:
        cuda_stream = 0

    with pytest.raises(cbt.Error) as ei:
        cbt.publish_on_stream(TorchLikeStream(), "mp.store.start", "r")
    assert ei.value.status in (cbt._cbt.ERR_UNSUPPORTED, cbt._cbt.ERR_NO_DEVICE, cbt._cbt.ERR_CUDA)


# ---- fork -------------------------------------------------------------------------------


def root_ids(n):
    out = []
    for _ in range(n):
        with cbt.span("cb.request", kind="server") as s:
            out.append((s.context.trace_id, s.context.span_id))
    return out


def test_fork_children_draw_their_own_ids(tmp_path):
    assert not cbt.enabled()
    root_ids(3)  # the parent's generator is seeded before the fork
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own tracer, its own ids
        code = 1
        try:
            os.close(r)
            cbt.init(spans_path=str(tmp_path / "child.jsonl"), otlp_endpoint="")
            ids = root_ids(20)
            cbt.shutdown()
            os.write(w, json.dumps(ids).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    cbt.init(spans_path=str(tmp_path / "parent.jsonl"), otlp_endpoint="")
    mine = root_ids(20)
    cbt.shutdown()
    with os.fdopen(r) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and data
    theirs = [tuple(x) for x in json.loads(data)]
    assert not {t for t, _ in mine} & {t for t, _ in theirs}
    spans = [s for _, s in mine + theirs]
    assert len(set(spans)) == len(spans)
    child_file = read_spans(str(tmp_path / "child.jsonl"))
    assert {s["trace_id"] for s in child_file} == {t for t, _ in theirs}


def test_fork_with_a_running_tracer_refuses_the_inherited_one():
    code = r"""
import os, cbt
cbt.init(otlp_endpoint="")
pid = os.fork()
if pid == 0:
    rc = 3
    try:
        try:
            cbt.init()
        except cbt.Error as e:
            assert e.status == cbt._cbt.ERR_ALREADY and "forked" in str(e), e
            rc = 4
        try:
            cbt.shutdown()
        except cbt.Error as e:
            assert e.status == cbt._cbt.ERR_STOPPED, e
            rc = 0 if rc == 4 else 5
    finally:
        os._exit(rc)
_, st = os.waitpid(pid, 0)
cbt.shutdown()
print("child", os.waitstatus_to_exitcode(st))
"""
    r = run_py(code)
    assert r.returncode == 0 and "child 0" in r.stdout, r.stdout + r.stderr


# ---- spans and trace context -----------------------------------------------------------------


def test_span_inject_extract_round_trip(tracer):
    with cbt.span("cb.request", kind="server", session_id="req-ctx", model="m") as req:
        tp = cbt.inject()
        assert TP_RE.match(tp) and tp == req.traceparent == cbt.inject(req)
        with cbt.span("cb.schedule") as sched:  # the thread's open span is its parent
            assert cbt.current_span() is sched
            assert cbt.inject() == sched.traceparent
            with cbt.span("cb.lookup.rpc", kind="client") as rpc:
                rpc.set(n_polls=3)
        ctx = cbt.extract(tp)
        assert ctx == req.context and ctx.sampled and ctx.traceparent == tp
        assert ctx.trace_id == tp[3:35] and ctx.span_id == tp[36:52]
    assert cbt.inject() == ""  # no span open
    # the worker side: the parent arrives as a header
    with cbt.span("cb.execute", parent=cbt.extract(tp), session_id="req-ctx") as ex:
        pass
    with pytest.raises(ValueError):
        with cbt.span("boom"):
            raise ValueError("x")
    cbt.shutdown()
    spans = {s["name"]: s for s in read_spans(tracer)}
    r, s, l, e = (spans[n] for n in ("cb.request", "cb.schedule", "cb.lookup.rpc", "cb.execute"))
    assert r["parent_span_id"] == "" and r["kind"] == "server"
    assert r["attributes"]["model"] == "m" and r["attributes"]["request_id"] == "req-ctx"
    assert s["parent_span_id"] == r["span_id"] and l["parent_span_id"] == s["span_id"]
    assert l["kind"] == "client" and l["attributes"]["n_polls"] == 3
    assert e["parent_span_id"] == r["span_id"] and e["trace_id"] == r["trace_id"]
    assert e["span_id"] == ex.context.span_id
    assert spans["boom"]["status"] == "error"
    assert spans["boom"]["attributes"]["error"] == "ValueError"


def test_extract_rejects_malformed_headers():
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert cbt.extract(good).traceparent == good
    for bad in ("", "garbage", good.upper(), good + " ", "01" + good[2:],
                "00-" + "0" * 32 + good[35:]):
        with pytest.raises(cbt.Error) as ei:
            cbt.extract(bad)
        assert ei.value.status == cbt._cbt.ERR_BAD_TRACEPARENT
        assert cbt.strerror(ei.value.status) in str(ei.value)
    ctx = cbt.SpanContext("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", sampled=False)
    assert ctx.traceparent == good[:-2] + "00" and not ctx.sampled
    with pytest.raises(ValueError):
        cbt.SpanContext("xyz", "b7ad6b7169203331")


def test_span_attribute_limits(tracer):
    with pytest.raises(cbt.Error) as ei:
        cbt.span("cb.partial", dispatch="much-longer-than-15").begin()
    assert ei.value.status == cbt._cbt.ERR_META_TOO_LONG
    with pytest.raises(TypeError):
        cbt.span("cb.partial", dispatch=[1]).begin()
    with pytest.raises(ValueError):
        cbt.span("cb.partial", kind="sideways")
    with cbt.span("cb.partial", dispatch="unified", imp_empty=False):
        pass


def test_session_root_trace_ids_are_derived_from_the_request():
    # Option B: two processes that never talk put a request's roots in one trace
    with cbt.span("cb.request", session_id="req-B") as a:
        pass
    with cbt.span("cb.request", session_id="req-B") as b:
        pass
    with cbt.span("cb.request") as c:
        pass
    assert a.context.trace_id == b.context.trace_id != c.context.trace_id
    assert a.context.span_id != b.context.span_id


def test_span_on_a_cpu_stream(tracer):
    with cbt.CpuStream() as st:
        with cbt.span("cb.check", session_id="req-gpu", stream=st) as chk:
            st.enqueue(lambda: time.sleep(0.02))
            chk.set(imp_count=4, recomp_ratio=0.25)
        st.sync()
    cbt.shutdown()
    (s,) = [s for s in read_spans(tracer) if s["name"] == "cb.check"]
    assert s["end_ns"] - s["start_ns"] >= 15_000_000
    assert s["attributes"]["imp_count"] == 4 and s["attributes"]["recomp_ratio"] == 0.25


# ---- metrics / shutdown ---------------------------------------------------------------------------


def test_metrics_keys_and_shutdown_final(tracer):
    m = cbt.metrics()
    assert set(m) == METRIC_KEYS and all(type(v) is int for v in m.values())
    for i in range(10):
        cbt.publish("mp.request.start", f"r{i}")
        cbt.publish("mp.request.end", f"r{i}")
    final = cbt.shutdown()
    assert METRIC_KEYS <= set(final)
    assert final["published"] == 20 and final["dispatched"] == 20
    assert final["spans_ended"] == 10 and final["spans_open"] == 0
    assert not cbt.enabled()


def test_tracer_context_manager(spans_file):
    with cbt.tracer(spans_path=spans_file, otlp_endpoint="") as t:
        assert cbt.enabled()
        cbt.publish("mp.request.start", "r")
        cbt.publish("mp.request.end", "r")
    assert not cbt.enabled()
    assert t.final_metrics["spans_ended"] == 1
    assert [s["name"] for s in read_spans(spans_file)] == ["request"]
    with cbt.tracer(enabled=False):
        assert not cbt.enabled()


def test_context_begin_extracts_or_derives(tracer):
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert cbt.context_begin(good, "req-cb") == cbt.extract(good)  # Option A
    b1 = cbt.context_begin("garbage", "req-cb")  # rejected: Option B
    b2 = cbt.context_begin(None, "req-cb")
    assert b1 == b2 and b1.span_id == "0" * 16 and b1.traceparent == "" and b1.sampled
    with cbt.span("cb.execute", parent=b1, session_id="req-cb") as ex:
        pass
    with cbt.span("cb.request", session_id="req-cb") as root:  # the scheduler's root
        pass
    assert ex.context.trace_id == root.context.trace_id == b1.trace_id
    cbt.shutdown()
    (e,) = [s for s in read_spans(tracer) if s["name"] == "cb.execute"]
    assert e["parent_span_id"] == "" and e["trace_id"] == b1.trace_id


# ---- review fixes ----------------------------------------------------------------------


def test_shutdown_does_not_race_publishers(tmp_path):
    """shutdown frees the tracer with the GIL released: publishers running on
    other threads meanwhile must see no tracer (g_closing), not a freed one."""
    code = f"""
import threading, cbt
path = {str(tmp_path / "s.jsonl")!r}
stop = False
st = cbt.CpuStream()
def pub(i):
    n = 0
    while not stop:
        cbt.publish("mp.request.start", f"r{{i}}-{{n}}", k=n)
        cbt.publish("MP_REQUEST_END", f"r{{i}}-{{n}}")
        cbt.publish_on_stream(st, "mp.request.start", f"s{{i}}-{{n}}")
        with cbt.span("cb.schedule", session_id=f"p{{i}}-{{n}}", a=1) as s:
            s.set(b=2)
        n += 1
cbt.init(spans_path=path, otlp_endpoint="")
ts = [threading.Thread(target=pub, args=(i,)) for i in range(3)]
for t in ts: t.start()
for _ in range(200):
    cbt.shutdown()
    cbt.init(spans_path=path, otlp_endpoint="")
stop = True
for t in ts: t.join()
st.sync(); st.close()
cbt.shutdown()
cbt.publish("mp.request.start", "after")  # no tracer: a no-op
with cbt.span("cb.after") as s:
    assert s.context.trace_id != "0" * 32
assert cbt.shutdown() == {{}}
print("ok")
"""
    r = run_py(code, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


def test_mp_root_end_accepts_the_cli_names():
    for v in ("request_end", "request", "transfer_end"):
        cbt.init(enabled=False, mp_root_end=v)
    with pytest.raises(ValueError, match="request_end"):
        cbt.init(enabled=False, mp_root_end="sometimes")


def test_init_bools_are_bools():
    for bad in ("false", "", [], 0.0):
        with pytest.raises(TypeError):
            cbt.init(enabled=bad)
        assert not cbt.enabled()
    with pytest.raises(ValueError):
        cbt.init(enabled=2)
    with pytest.raises(TypeError):
        cbt.init(enabled=False, mp_subscriber="no")
    cbt.init(enabled=0)
    cbt.init(enabled=False, mp_subscriber=1, cb_subscriber=False)
    assert not cbt.enabled()


def test_flush_capacity_strerror_are_range_checked():
    for bad, exc in ((-1, ValueError), (2**32, OverflowError), (2**40, OverflowError)):
        with pytest.raises(exc):
            cbt.flush(bad)
        with pytest.raises(exc):
            cbt.flush(timeout_ms=bad)
        with pytest.raises(exc):
            cbt.CpuStream(bad)
    with pytest.raises(TypeError):
        cbt.flush(True)
    cbt.flush(2**32 - 1)  # no tracer: returns at once
    with pytest.raises(OverflowError):
        cbt.strerror(2**40)
    with pytest.raises(OverflowError):
        cbt.strerror(-(2**40))
    assert cbt.strerror(0)


def test_span_context_hash_is_stable_and_defined():
    a = cbt.SpanContext("f" * 32, "f" * 16, True)
    b = cbt.SpanContext("f" * 32, "f" * 16, True)
    assert hash(a) == hash(b) and a == b
    assert hash(a) != -1
    assert len({a, b, cbt.SpanContext("f" * 32, "e" * 16, True)}) == 2


def test_span_set_validates_and_exit_never_masks_the_user_exception(tracer):
    with cbt.span("cb.schedule", session_id="req-set") as s:
        with pytest.raises(cbt.Error):
            s.set(note="x" * 100)  # too long for a span's string attribute
        with pytest.raises(TypeError):
            s.set(obj=object())
        s.set(ok=1)
    assert not s._ps.open

    class MyError(Exception):
        pass

    # an invalid attribute slipped in (as before set validated): __exit__
    # still ends the span and lets the user's exception through
    with pytest.raises(MyError):
        with cbt.span("cb.schedule", session_id="req-exit") as s2:
            s2._end_attrs["note"] = "y" * 100
            raise MyError()
    assert not s2._ps.open

    # the error type's name is cut by UTF-8 bytes, not characters
    E = type("É" * 20, (Exception,), {})
    with pytest.raises(E):
        with cbt.span("cb.schedule", session_id="req-utf8") as s3:
            raise E()
    assert not s3._ps.open
    cbt.shutdown()
    spans = {sp["attributes"].get("request_id"): sp for sp in read_spans(tracer)}
    a = spans["req-exit"]["attributes"]
    assert a.get("failed") is True and a.get("error") == "MyError" and "note" not in a
    assert spans["req-set"]["attributes"].get("ok") == 1
    err = spans["req-utf8"]["attributes"]["error"]
    assert err == "É" * 7 and len(err.encode()) <= cbt._cbt.SPAN_STR_MAX


def test_cpu_stream_after_fork_raises_instead_of_hanging():
    code = """
import os, cbt
st = cbt.CpuStream()
st.enqueue(lambda: None); st.sync()
pid = os.fork()
if pid == 0:
    code = 0
    for call in (st.sync, st.close, lambda: st.enqueue(print)):
        try:
            call(); code = 3
        except cbt.Error as e:
            if e.status != cbt._cbt.ERR_STOPPED or "fork" not in str(e): code = 4
    try:
        with st: pass
        code = 5
    except cbt.Error:
        pass
    del st  # dealloc leaks the copy instead of joining a worker that is not here
    os._exit(code)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
st.close()
print("ok")
"""
    r = run_py(code, timeout=30)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


def test_cpu_stream_sync_close_from_own_work_raise():
    code = """
import threading, warnings, cbt
warnings.simplefilter("always")
st = cbt.CpuStream()
seen = []
def work():
    for call in (st.sync, st.close):
        try:
            call(); seen.append("returned")
        except cbt.Error as e:
            seen.append((e.status, "own work" in str(e)))
st.enqueue(work); st.sync()
assert seen == [(cbt._cbt.ERR_INVAL, True)] * 2, seen
assert not st.closed
st.close()
# the last reference dies on the stream's own worker: leaked, not a deadlock
s2 = cbt.CpuStream()
done = threading.Event()
class Holder:
    def __init__(self, s): self.s = s
    def __call__(self): done.set()
s2.enqueue(Holder(s2))
del s2
assert done.wait(10)
import time; time.sleep(0.5)
print("ok")
"""
    r = run_py(code, timeout=30)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


# ---- the OTLP exporter's protocol (cbt.init(otlp_protocol=...)) ------------------------------

_OTEL_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
              "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
              "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED",
              "OTEL_METRICS_EXPORTER", "CBT_OTLP_SELF_METRICS", "OTEL_METRIC_EXPORT_INTERVAL")


@pytest.fixture
def otel_env(monkeypatch):
    for v in _OTEL_VARS:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def _otlp_config(**kw):
    if not hasattr(cbt._cbt, "_otlp_config"):
        pytest.skip("this build has no OTLP exporter")
    return cbt._cbt._otlp_config(**kw)


@pytest.mark.parametrize("bad", ["http", "grpc ", "HTTP/PROTOBUF", "http/proto", ""])
def test_otlp_protocol_bad_value_named(bad, otel_env):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        cbt.init(otlp_endpoint="", otlp_protocol=bad)
    assert not cbt.enabled()
    with pytest.raises(TypeError, match="otlp_protocol"):
        cbt.init(otlp_endpoint="", otlp_protocol=2)
    assert not cbt.enabled()


def test_otlp_protocol_reaches_the_config(otel_env):
    """Each value lands in cbt_otlp_config.protocol, the endpoints shaped for
    its transport: OTLP/HTTP gets /v1/traces and /v1/metrics on the base,
    gRPC the base URL for both."""
    base = "http://collector:4318"
    for proto in ("http/protobuf", "http/json"):
        c = _otlp_config(otlp_endpoint=base, otlp_protocol=proto)
        assert c["protocol"] == proto
        assert c["endpoint"] == base + "/v1/traces"
        assert c["metrics_endpoint"] == base + "/v1/metrics"
    c = _otlp_config(otlp_endpoint="http://collector:4317/", otlp_protocol="grpc")
    assert (c["protocol"], c["endpoint"], c["metrics_endpoint"]) == \
        ("grpc", "http://collector:4317", "http://collector:4317")
    with pytest.raises(ValueError, match="base URL"):
        _otlp_config(otlp_endpoint=base + "/v1/traces", otlp_protocol="grpc")
    # None: the environment's protocol; a value given wins over it
    assert _otlp_config(otlp_endpoint=base)["protocol"] == "http/protobuf"
    otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    assert _otlp_config(otlp_endpoint=base)["protocol"] == "http/json"
    assert _otlp_config(otlp_endpoint=base, otlp_protocol="http/protobuf")["protocol"] == \
        "http/protobuf"
    # the endpoint from the environment, shaped for the protocol given
    otel_env.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://envcol:4317")
    c = _otlp_config(otlp_protocol="grpc")
    assert (c["endpoint"], c["metrics_endpoint"]) == ("http://envcol:4317", "http://envcol:4317")
    assert _otlp_config()["endpoint"] == "http://envcol:4317/v1/traces"
    # a scheme-less host:port in the environment is a gRPC endpoint: read as
    # one when the protocol given is grpc (it is no OTLP/HTTP URL)
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "envcol:4317")
    c = _otlp_config(otlp_protocol="grpc")
    assert c["protocol"] == "grpc" and c["endpoint"].endswith("envcol:4317"), c
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://envcol:4317")
    # no exporter: "" whatever the protocol, and OTEL_SDK_DISABLED
    assert _otlp_config(otlp_endpoint="", otlp_protocol="grpc") is None
    otel_env.setenv("OTEL_SDK_DISABLED", "true")
    assert _otlp_config(otlp_protocol="grpc") is None
    otel_env.delenv("OTEL_SDK_DISABLED")
    # cbt's own health switch travels with the rest of the environment
    otel_env.setenv("CBT_OTLP_SELF_METRICS", "1")
    assert _otlp_config(otlp_endpoint=base)["self_metrics"] == 1


class _Collector:
    """A loopback HTTP collector recording (path, content type, body)."""

    def __init__(self):
        import http.server

        got = self.got = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                got.append((self.path, self.headers.get("Content-Type"), self.rfile.read(n)))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_otlp_protocol_http_json_delivered(otel_env, spans_file):
    """otlp_protocol="http/json" reaches the wire: the spans arrive as
    OTLP/JSON; with CBT_OTLP_SELF_METRICS=1 cbt's health follows, alone (no
    blend set), at shutdown."""
    if not hasattr(cbt._cbt, "_otlp_config"):
        pytest.skip("this build has no OTLP exporter")
    for v in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        otel_env.delenv(v, raising=False)
    otel_env.setenv("no_proxy", "127.0.0.1")
    otel_env.setenv("CBT_OTLP_SELF_METRICS", "1")
    col = _Collector()
    try:
        cbt.init(spans_path=spans_file, otlp_endpoint=col.url, otlp_protocol="http/json")
        cbt.publish("mp.request.start", "json-1")
        cbt.publish("mp.request.end", "json-1")
        cbt.flush()
        fin = cbt.shutdown()
    finally:
        col.close()
    assert fin["otlp"]["spans_exported"] == 1, fin
    traces = [g for g in col.got if g[0] == "/v1/traces"]
    metrics = [g for g in col.got if g[0] == "/v1/metrics"]
    assert traces and all(ct == "application/json" for _, ct, _ in traces), col.got
    doc = json.loads(traces[0][2])
    assert doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] == "request"
    assert metrics, col.got
    last = json.loads(metrics[-1][2])
    ms = {m["name"]: m for m in last["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]}
    assert not any(n.startswith("lmcache_blend.") for n in ms)
    assert ms["cbt.events.published"]["sum"]["dataPoints"][0]["asInt"] == "2"
    assert ms["cbt.spans.ended"]["sum"]["dataPoints"][0]["asInt"] == "1"
