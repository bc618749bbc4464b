"""tests/python/test_limits.py — limits and errors (docs/python.md, "Limits"
and "Errors"), issue 23's list:

- the name table: a program's names beyond its capacity drop that value or
  attribute (counted in metrics()["names_refused"]), never the event; the
  built-in names (LMCache's keys, span names) always work; a new span name
  or event type raises, naming the capacity and how to raise it; the
  capacity comes from CBT_NAMES_CAPACITY and init(names_capacity=...);
- errors echo at most a short prefix of what they were given;
- a bad config field: the exception names the field and the rule (.field);
- unsigned ints: the argument and its range are named;
- a CpuStream callable that raises: sync() raises it, stats() counts it;
- NaN and infinities are values everywhere: the span file, the trace file,
  OTLP/JSON and OTLP/protobuf, a recording and its replay, the bridge;
- a stream closed by code that publishing on it runs (an event type's
  __hash__ or .value, a key's __hash__) or by another thread meanwhile:
  the call raises ERR_STOPPED, nothing is freed under it.

What must own the process (the name table is the process's) runs in a
fresh interpreter.
"""
import json
import math
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import cbt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_spans(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_py(code, env=None, timeout=120):
    """`code` in a fresh interpreter; its stdout's last line is JSON."""
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=timeout, env=e)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


@pytest.fixture
def spans_file(tmp_path):
    return str(tmp_path / "spans.jsonl")


@pytest.fixture(autouse=True)
def no_tracer():
    assert not cbt.enabled(), "a previous test left a tracer running"
    yield
    if cbt.enabled():
        cbt.shutdown()


# ---- the name table ------------------------------------------------------------------------


def test_names_beyond_the_capacity_drop_the_value_never_the_event(tmp_path):
    spans = str(tmp_path / "spans.jsonl")
    out, err = run_py(f"""
        import json, cbt
        cbt.init(spans_path={spans!r}, otlp_endpoint="")
        m0 = cbt.metrics()
        # 40 names of the program's fill the table (CBT_NAMES_CAPACITY=40)
        for i in range(40):
            cbt.publish("mp.request.start", f"fill-{{i}}", **{{f"k{{i}}": i}})
            cbt.publish("mp.request.end", f"fill-{{i}}")
        cbt.flush()
        m1 = cbt.metrics()
        # full: a new key's value is dropped, the event and its other values go out;
        # LMCache's keys (engine_id was never used before) are built in
        cbt.publish("mp.request.start", "r-full", engine_id=3, new_key=1, k0=7,
                    model_name="m", brand_new=2.5)
        cbt.publish("mp.request.end", "r-full")
        with cbt.span("cb.schedule", session_id="s-full", another_new=1, n_polls=2):
            pass
        cbt.flush()
        m2 = cbt.metrics()
        errors = {{}}
        for what, call in (("span", lambda: cbt.span("my.new.span").begin()),
                           ("type", lambda: cbt.register_event_type("MY_NEW_TYPE"))):
            try:
                call()
            except cbt.Error as e:
                errors[what] = [e.status, str(e)]
        fin = cbt.shutdown()
        # the table outlives the tracer; a new one can raise the capacity
        cbt.init(otlp_endpoint="", names_capacity=100)
        m3 = cbt.metrics()
        cbt.publish("mp.request.start", "r-raised", new_key=1)
        with cbt.span("my.new.span"):
            pass
        t = cbt.register_event_type("MY_NEW_TYPE")
        m4 = cbt.metrics()
        cbt.shutdown()
        print(json.dumps(dict(m0=m0, m1=m1, m2=m2, m3=m3, m4=m4, fin=fin, errors=errors,
                              t=t, full=cbt._cbt.ERR_FULL)))
    """, env={"CBT_NAMES_CAPACITY": "40"})
    m0, m1, m2, m3, m4 = (out[k] for k in ("m0", "m1", "m2", "m3", "m4"))
    assert m0["names_capacity"] == 40 and m0["names_refused"] == 0
    assert m1["names_used"] == 40 and m1["names_refused"] == 0
    # the events all went out: 80 fills + 2, nothing refused or rejected
    assert m2["published"] - m1["published"] == 2 + 2  # + the span's begin and end
    assert m2["rejected"] == 0
    # new_key, brand_new and the span's another_new: one refusal each
    assert m2["names_refused"] == 3, m2
    assert out["fin"]["names_refused"] >= 3
    (req,) = [s for s in read_spans(spans) if s["attributes"].get("session_id") == "r-full"]
    a = req["attributes"]
    assert a["engine_id"] == 3 and a["k0"] == 7 and a["model_name"] == "m", a
    assert "new_key" not in a and "brand_new" not in a
    (sch,) = [s for s in read_spans(spans) if s["name"] == "cb.schedule"]
    assert sch["attributes"]["n_polls"] == 2 and "another_new" not in sch["attributes"]
    # a span name and an event type cannot be dropped: they raise, saying the limit
    for what in ("span", "type"):
        status, msg = out["errors"][what]
        assert status == out["full"], msg
        assert "40 names" in msg and "names_capacity" in msg and "CBT_NAMES_CAPACITY" in msg, msg
    # a new tracer: counts from zero, capacity raised, the new names fit
    assert m3["names_capacity"] == 100 and m3["names_refused"] == 0 and m3["names_used"] == 40
    assert m4["names_refused"] == 0 and m4["names_used"] == 43
    assert out["t"] > 0


def test_names_capacity_is_range_checked():
    with pytest.raises(cbt.Error) as ei:
        cbt.init(names_capacity=10**6)
    assert ei.value.status == cbt._cbt.ERR_INVAL and ei.value.field == "names_capacity"
    with pytest.raises(ValueError, match="names_capacity"):
        cbt.init(names_capacity=-1)
    assert not cbt.enabled()


# ---- errors echo a short prefix -------------------------------------------------------------

BIG = 10_000_000


def _msg_of(call, exc=Exception):
    with pytest.raises(exc) as ei:
        call()
    return str(ei.value)


@pytest.mark.parametrize("what, call, exc", [
    ("event name", lambda: cbt.publish("x" * BIG, "r"), ValueError),
    ("key", lambda: cbt.publish("mp.store.start", "r", **{"k" * (BIG // 10): 1}), cbt.Error),
    ("bad value under a long key",
     lambda: cbt.publish("mp.store.start", "r", **{"k" * (BIG // 10): {1}}), TypeError),
    ("extract", lambda: cbt.extract("0" * BIG), cbt.Error),
    ("register_event_type", lambda: cbt.register_event_type("t" * BIG), cbt.Error),
    ("span name", lambda: cbt.span("s" * BIG).begin(), cbt.Error),
    ("span attribute", lambda: cbt.span("cb.check", **{"a" * BIG: [1]}).begin(), TypeError),
    ("event type by number", lambda: cbt.publish(10 ** 100000, "r"), ValueError),
    ("mp_root_end", lambda: cbt.init(mp_root_end="m" * BIG), ValueError),
    ("trace_level", lambda: cbt.init(trace_level="g" * BIG), ValueError),
    ("otlp_protocol", lambda: cbt.init(otlp_protocol="p" * BIG), ValueError),
    ("otlp_endpoint", lambda: cbt.init(otlp_endpoint="e" * BIG), Exception),
    ("spans_path", lambda: cbt.init(spans_path="/nonexistent-dir/" + "p" * 100_000), cbt.Error),
    ("flush timeout", lambda: cbt.flush(10 ** 100000), OverflowError),
    ("strerror", lambda: cbt.strerror(-(10 ** 100000)), OverflowError),
    ("ts_ns", lambda: cbt.publish("mp.store.start", "r", ts_ns=-(10 ** 100000)), ValueError),
])
def test_errors_echo_a_short_prefix(what, call, exc):
    msg = _msg_of(call, exc)
    assert len(msg) < 500, f"{what}: a {len(msg)}-character message"
    assert not cbt.enabled()


def test_echo_says_the_length_and_shows_the_start():
    msg = _msg_of(lambda: cbt.publish("abc" + "x" * BIG, "r"), ValueError)
    assert "'abcxxx" in msg and f"({BIG + 3} characters)" in msg, msg
    # a short input is shown whole
    assert "'mp.nope'" in _msg_of(lambda: cbt.publish("mp.nope", "r"), ValueError)
    msg = _msg_of(lambda: cbt.flush(10 ** 100000), OverflowError)
    assert "an int of 332193 bits" in msg and "timeout_ms" in msg, msg


# ---- a bad config field -----------------------------------------------------------------


def test_config_error_names_the_field_and_the_rule(capfd):
    # issue 23: this blamed max_lanes, which was never set
    with pytest.raises(cbt.Error) as ei:
        cbt.init(queue_capacity=1 << 20, lane_capacity=1 << 22)
    e = ei.value
    assert e.status == cbt._cbt.ERR_INVAL and e.field == "lane_capacity"
    msg = str(e)
    assert "lane_capacity 4194304" in msg and "max_lanes 64" in msg and "4096 MiB" in msg, msg
    assert "at most 524288" in msg and "named on stderr" not in msg, msg
    cbt.init(queue_capacity=1 << 20, lane_capacity=524288, otlp_endpoint="")  # what it said fits
    cbt.shutdown()
    for kw, field, says in ((dict(queue_capacity=100), "queue_capacity", "power of two"),
                            (dict(max_lanes=300), "max_lanes", "at most 256"),
                            (dict(span_pool=0), "span_pool", "[1, 65535]"),
                            (dict(poll_interval_us=0), "poll_interval_us", "[1, 1000000]")):
        with pytest.raises(cbt.Error) as ei:
            cbt.init(**kw)
        assert ei.value.field == field and says in str(ei.value), (kw, str(ei.value))
    capfd.readouterr()
    # other cbt.Errors have no field
    with pytest.raises(cbt.Error) as ei:
        cbt.extract("nope")
    assert ei.value.field is None


def test_recording_config_error_names_its_field(tmp_path):
    if not cbt._cbt.HAVE_RECORDING:
        pytest.skip("this build has no trace recording (msgpack-c missing)")
    with pytest.raises(cbt.Error) as ei:
        cbt.init(trace_level="gpu", trace_output=str(tmp_path / "x.lct"), trace_buffer_kib=10)
    assert ei.value.field == "trace_buffer_kib" and "[64," in str(ei.value), str(ei.value)


# ---- unsigned ints name the argument and the range ------------------------------------------


@pytest.mark.parametrize("call, exc, names", [
    (lambda: cbt.publish("mp.store.start", "r", ts_ns=-1), ValueError, "ts_ns"),
    (lambda: cbt.publish("mp.store.start", "r", -1), ValueError, "ts_ns"),
    (lambda: cbt.publish("mp.store.start", "r", ts_ns=2 ** 64), OverflowError, "ts_ns"),
    (lambda: cbt.publish("mp.store.start", "r", pair=-1), ValueError, "pair"),
    (lambda: cbt.publish("mp.store.start", "r", pair=2 ** 64), OverflowError, "pair"),
    (lambda: cbt.publish_on_stream(-1, "mp.store.start", "r"), ValueError, "cudaStream_t"),
    (lambda: cbt.publish_on_stream(2 ** 64, "mp.store.start", "r"), OverflowError,
     "cudaStream_t"),
    (lambda: cbt.flush(-1), ValueError, "timeout_ms"),
    (lambda: cbt.CpuStream(-1), ValueError, "capacity"),
    (lambda: cbt.init(queue_capacity=-1), ValueError, "queue_capacity"),
])
def test_unsigned_ints_name_the_argument_and_range(call, exc, names):
    msg = _msg_of(call, exc)
    assert names in msg and "[0, " in msg, msg


def test_unsigned_ints_take_the_whole_range(tmp_path):
    spans = str(tmp_path / "s.jsonl")
    cbt.init(spans_path=spans, otlp_endpoint="")
    cbt.publish("mp.request.start", "r-top", pair=2 ** 64 - 1)
    cbt.publish("mp.request.end", "r-top", pair=2 ** 64 - 1, ts_ns=2 ** 63 + 5)
    cbt.flush()
    assert cbt.metrics()["published"] == 2
    cbt.shutdown()


# ---- a CpuStream callable that raises -----------------------------------------------------


class Boom(Exception):
    pass


def test_cpu_stream_sync_raises_what_its_work_raised(capfd):
    ran = []
    with cbt.CpuStream() as st:
        def bad(i):
            def f():
                ran.append(i)
                raise Boom(f"boom {i}")
            return f
        st.enqueue(bad(1))
        st.enqueue(lambda: ran.append("ok"))
        st.enqueue(bad(2))
        with pytest.raises(Boom, match="boom 1") as ei:
            st.sync()
        assert ran == [1, "ok", 2]
        notes = getattr(ei.value, "__notes__", [])
        if sys.version_info >= (3, 11):
            assert any("2 of its callables raised" in n for n in notes), notes
        # the worker's frames are in the traceback
        tb = ei.value.__traceback__
        names = []
        while tb:
            names.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        assert "f" in names, names
        stats = st.stats()
        assert stats["items_failed"] == 2 and stats["items_completed"] == 1, stats
        st.sync()  # reported once
        st.enqueue(bad(3))
        with pytest.raises(Boom, match="boom 3"):
            st.close()  # close drains: it reports too
    # nothing was printed as "Exception ignored" when the callables raised
    assert "Exception ignored" not in capfd.readouterr().err


def test_cpu_stream_never_reported_failure_is_unraisable():
    out, err = run_py("""
        import gc, json, sys, cbt
        seen = []
        sys.unraisablehook = lambda u: seen.append((type(u.exc_value).__name__, str(u.object)))
        st = cbt.CpuStream()
        st.enqueue(lambda: 1 / 0)
        del st
        gc.collect()
        print(json.dumps(seen))
    """)
    assert len(out) == 1 and out[0][0] == "ZeroDivisionError", out
    assert "1 failed callable" in out[0][1], out


def test_cpu_stream_freed_while_an_exception_is_raised_keeps_it():
    # The stream's last reference dies on an error path (the sort's key
    # raised KeyError, dropping the list of keys that held it): its
    # deallocation says the unreported failure as unraisable, and the
    # KeyError being raised must reach the caller untouched (it once became
    # "SystemError: ... returned NULL without setting an exception").
    out, err = run_py("""
        import json, sys, time, cbt
        seen = []
        sys.unraisablehook = lambda u: seen.append(type(u.exc_value).__name__)
        def key(x):
            if x == 1:
                s = cbt.CpuStream()
                s.enqueue(lambda: 1 / 0)
                time.sleep(0.2)
                return s
            raise KeyError("mine")
        try:
            [1, 2].sort(key=key)
            got = "no exception"
        except BaseException as e:
            got = type(e).__name__ + ": " + str(e)
        print(json.dumps([got, seen]))
    """)
    assert out[0] == "KeyError: 'mine'", (out, err)
    assert out[1] == ["ZeroDivisionError"], (out, err)


def test_cpu_stream_closed_during_a_pinned_call_says_drained_failures():
    # close() while a call pins the stream returns before the queue drains;
    # the work that fails in the drain is said to sys.unraisablehook when the
    # last call holding the stream ends, not lost
    out, err = run_py("""
        import json, sys, time, cbt
        seen = []
        sys.unraisablehook = lambda u: seen.append((type(u.exc_value).__name__, str(u.object)))
        st = cbt.CpuStream()
        st.enqueue(lambda: time.sleep(0.3))
        st.enqueue(lambda: 1 / 0)
        class ClosingType:  # its .value closes the stream inside the pinned call
            def __hash__(self):
                return id(self) >> 4
            @property
            def value(self):
                st.close()  # returns before the queue ran: nothing failed yet
                return "mp.store.start"
        try:
            cbt.publish_on_stream(st, ClosingType(), "r1")
        except cbt.Error:
            pass
        print(json.dumps(seen))
    """)
    assert len(out) == 1 and out[0][0] == "ZeroDivisionError", (out, err)
    assert "closed while a call used it" in out[0][1], (out, err)


# ---- NaN and the infinities -------------------------------------------------------------------

NONFINITE = {"v_nan": float("nan"), "v_inf": float("inf"), "v_ninf": float("-inf")}
AS_JSON = {"v_nan": "NaN", "v_inf": "Infinity", "v_ninf": "-Infinity"}


def _publish_nonfinite():
    cbt.publish("mp.request.start", "r-nan", **NONFINITE, ok=0.5)
    cbt.publish("mp.request.end", "r-nan")
    with cbt.span("cb.check", session_id="s-nan", **NONFINITE):
        pass


def _check_json_attrs(attrs):
    for k, want in AS_JSON.items():
        assert attrs.get(k) == want, (k, attrs)


def test_nonfinite_values_reach_the_span_and_trace_files(tmp_path):
    spans, trace = str(tmp_path / "s.jsonl"), str(tmp_path / "t.json")
    cbt.init(spans_path=spans, trace_path=trace, otlp_endpoint="")
    _publish_nonfinite()
    fin = cbt.shutdown()
    assert fin["rejected"] == 0 and fin["names_refused"] == 0
    got = {s["name"]: s["attributes"] for s in read_spans(spans)}
    _check_json_attrs(got["request"])
    assert got["request"]["ok"] == 0.5
    _check_json_attrs(got["cb.check"])
    with open(trace) as f:
        doc = json.load(f)  # still strict JSON (no bare NaN)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    args = [e.get("args", {}) for e in events if e.get("name") in ("request", "cb.check")]
    assert args and all(all(a.get(k) == v for k, v in AS_JSON.items()) for a in args), args


def _pb_fields(buf):
    """(field number, wire type, value) of one protobuf message's fields."""
    i, out = 0, []
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        out.append((num, wt, v))
    return out


def _varint(buf, i):
    shift = v = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, i


def _pb_doubles(body):
    """Every KeyValue {key, AnyValue{double_value}} in an ExportTraceServiceRequest."""
    found = {}

    def walk(msg, depth):
        if depth > 8:
            return
        fields = _pb_fields(msg)
        keys = [v for n, wt, v in fields if n == 1 and wt == 2]
        vals = [v for n, wt, v in fields if n == 2 and wt == 2]
        if len(keys) == 1 and len(vals) == 1:  # a KeyValue?
            try:
                inner = _pb_fields(vals[0])
            except (ValueError, IndexError):
                inner = []
            if len(inner) == 1 and inner[0][0] == 4 and inner[0][1] == 1:  # double_value
                found[keys[0].decode("utf-8", "replace")] = struct.unpack("<d", inner[0][2])[0]
                return
        for n, wt, v in fields:
            if wt == 2:
                try:
                    walk(v, depth + 1)
                except (ValueError, IndexError):
                    pass

    walk(body, 0)
    return found


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_nonfinite_values_reach_otlp(protocol, monkeypatch):
    if not hasattr(cbt._cbt, "_otlp_config"):
        pytest.skip("this build has no OTLP exporter")
    from test_api import _Collector
    for v in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "OTEL_SDK_DISABLED",
              "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    col = _Collector()
    try:
        cbt.init(otlp_endpoint=col.url, otlp_protocol=protocol)
        _publish_nonfinite()
        fin = cbt.shutdown()
    finally:
        col.close()
    assert fin["otlp"]["spans_exported"] == 2, fin
    bodies = [b for path, _, b in col.got if path == "/v1/traces"]
    assert bodies
    if protocol == "http/json":
        attrs = {}
        for b in bodies:
            for rs in json.loads(b)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for sp in ss["spans"]:
                        for kv in sp.get("attributes", []):
                            if kv["key"] in AS_JSON:
                                attrs.setdefault(kv["key"], set()).add(
                                    kv["value"].get("doubleValue"))
        assert attrs == {k: {v} for k, v in AS_JSON.items()}, attrs  # proto3 JSON's mapping
    else:
        got = {}
        for b in bodies:
            got.update(_pb_doubles(b))
        assert math.isnan(got["v_nan"]) and got["v_inf"] == math.inf, got
        assert got["v_ninf"] == -math.inf, got


def test_nonfinite_values_survive_a_recording_and_its_replay(tmp_path):
    if not cbt._cbt.HAVE_RECORDING:
        pytest.skip("this build has no trace recording (msgpack-c missing)")
    lct, live, again = (str(tmp_path / n) for n in ("r.lct", "live.jsonl", "again.jsonl"))
    cbt.init(trace_level="gpu", trace_output=lct, spans_path=live, otlp_endpoint="")
    _publish_nonfinite()
    cbt.shutdown()
    cbt.replay(lct, spans_path=again)
    got = {s["name"]: s["attributes"] for s in read_spans(again)}
    _check_json_attrs(got["request"])
    _check_json_attrs(got["cb.check"])


def test_the_bridge_keeps_nonfinite_floats():
    from cbt.lmcache import _translate as tr
    for v in (float("nan"), float("inf"), float("-inf")):
        ok, cv, why = tr.classify(v)
        assert ok and why == "" and (cv == v or (math.isnan(cv) and math.isnan(v)))
    dropped = {k: 0 for k in tr.DROP_KEYS}
    out = tr.values({"n": float("nan"), "i": float("inf")}, dropped)
    assert set(out) == {"n", "i"} and not any(dropped.values())


# ---- a stream closed during a call on it --------------------------------------------------------


class ClosingKey(str):
    """A value key whose hash (cbt resolves keys by a dict lookup) closes a
    stream: Python code running in the middle of publish_on_stream. Armed
    after the keyword dict is built (building it hashes the key too)."""

    stream = None

    def __hash__(self):
        st, ClosingKey.stream = ClosingKey.stream, None
        if st is not None:
            st.close()
        return str.__hash__(self)

    def __eq__(self, other):
        return str.__eq__(self, other)


class ClosingType:
    """An event type whose .value (as LMCache's EventType members have)
    closes the stream first."""

    def __init__(self, stream):
        self.stream = stream

    def __hash__(self):
        return id(self) >> 4

    @property
    def value(self):
        self.stream.close()
        return "mp.store.start"


def test_stream_closed_by_the_event_type_during_publish_on_stream(capfd):
    st = cbt.CpuStream()
    with pytest.raises(cbt.Error) as ei:
        cbt.publish_on_stream(st, ClosingType(st), "r")
    assert ei.value.status == cbt._cbt.ERR_STOPPED and "closed during the call" in str(ei.value)
    assert st.closed
    with pytest.raises(cbt.Error):
        st.stats()  # freed once the call let go of it


def test_stream_closed_by_a_key_during_publish_on_stream_and_span():
    cbt.init(otlp_endpoint="")  # a span opens (and its end publishes) only under a tracer
    try:
        st = cbt.CpuStream()
        kw = {ClosingKey("k_close"): 1}
        ClosingKey.stream = st
        with pytest.raises(cbt.Error) as ei:
            cbt.publish_on_stream(st, "mp.store.start", "r", **kw)
        assert ei.value.status == cbt._cbt.ERR_STOPPED, str(ei.value)
        assert "closed during the call" in str(ei.value) and ClosingKey.stream is None
        # a span begun on a stream with an attribute whose key closes it
        st2 = cbt.CpuStream()
        attrs = {ClosingKey("k_close2"): 1}
        ClosingKey.stream = st2
        with pytest.raises(cbt.Error) as ei:
            cbt._cbt.span_begin("cb.check", None, "", 0, st2, attrs)
        assert ei.value.status == cbt._cbt.ERR_STOPPED and ClosingKey.stream is None
        # a span begun on a stream, then ended with an attribute whose key closes it
        st3 = cbt.CpuStream()
        ps = cbt._cbt.span_begin("cb.check", None, "", 0, st3, None)
        assert ps.open
        attrs = {ClosingKey("k_close3"): 1}
        ClosingKey.stream = st3
        with pytest.raises(cbt.Error) as ei:
            ps.end(attrs)
        assert ei.value.status == cbt._cbt.ERR_STOPPED and not ps.open
        assert ClosingKey.stream is None
        assert st.closed and st2.closed and st3.closed
    finally:
        ClosingKey.stream = None
        cbt.shutdown()


def test_stream_closed_by_another_thread_while_publishing(tmp_path):
    """Racing threads: publishers whose event type's hash gives up the GIL
    (so a closer runs in the middle of building the event) against a thread
    closing the streams. Each publish goes out or raises ERR_STOPPED; under
    the ASan build of the extension (docs/testing.md) nothing is read after
    it is freed."""
    out, err = run_py("""
        import json, threading, time, cbt
        cbt.init(otlp_endpoint="")

        class SlowType:
            def __hash__(self):
                time.sleep(0.0002)   # the GIL goes to the closer
                return 1
            def __eq__(self, o):
                return self is o
            value = "mp.store.start"

        outcomes = {"ok": 0, "stopped": 0, "other": []}
        for round_ in range(40):
            st = cbt.CpuStream()
            go = threading.Event()
            def publisher():
                go.wait()
                for i in range(50):
                    try:
                        cbt.publish_on_stream(st, SlowType(), "race", pair=i, v=i)
                        outcomes["ok"] += 1
                    except cbt.Error as e:
                        if e.status == cbt._cbt.ERR_STOPPED:
                            outcomes["stopped"] += 1
                        else:
                            outcomes["other"].append(str(e))
            ths = [threading.Thread(target=publisher) for _ in range(3)]
            for t in ths:
                t.start()
            go.set()
            time.sleep(0.001 * (round_ % 5))
            st.close()
            for t in ths:
                t.join()
        cbt.shutdown()
        print(json.dumps(outcomes))
    """)
    assert not out["other"], out
    assert out["ok"] + out["stopped"] == 40 * 3 * 50, out
    assert out["stopped"] > 0, out
