"""tests/python/test_lmcache_bridge.py — cbt.lmcache against the real LMCache 0.5.6.

LMCache comes from PyPI as tests/lmcache/setup_env.sh fetches it (the wheel's
.py files, sha256 checked, cached in $CBT_LMCACHE_ENV, default
build/lmcache-env) and is imported without torch by tests/lmcache/
lmcache_import.py. Without a reachable package index every test here is
skipped with a "SKIP: python: lmcache bridge: ..." reason.

What is pinned:
- the same generated event stream (tests/lmcache/generator.py), published
  through LMCache's real EventBus started by the real init_observability with
  its drain thread, gives with LMCache's own tracing subscribers and with the
  bridge the same span forests, minus the intended differences
  (tests/lmcache/compare.py, intended.py; docs/spans.md);
- LMCache's logging subscribers see every event they subscribe to, with and
  without the bridge; has_subscribers answers as LMCache's own;
- a disabled bus, a stopped bus, a full bus and tracing off behave as
  LMCache's own (the same counts, no spans with tracing off);
- the stand-ins' subscriptions are the originals', the OTLP endpoint rule,
  publish_on_stream on a CPU StubStream and on a CUDA handle cbt cannot use
  (LMCache's path, counted), the CLI wrapper. The CUDA mark itself needs a
  device: skipped here with its reason.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import types
from collections import Counter

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LMDIR = os.path.join(ROOT, "tests", "lmcache")
sys.path.insert(0, LMDIR)

ENV = os.environ.get("CBT_LMCACHE_ENV", os.path.join(ROOT, "build", "lmcache-env"))
SEED = int(os.environ.get("CBT_BRIDGE_SEED", "20240506"))
N_MP = int(os.environ.get("CBT_BRIDGE_MP", "150"))
N_CB = int(os.environ.get("CBT_BRIDGE_CB", "150"))
RULE = "transfer_end"  # LMCache's MP root-end rule, so root times agree exactly


def _skip(why: str):
    # tests/python/conftest.py prints "SKIP: python: <test>: <reason>" for each
    # skipped test where make test's log has it; the reason names the suite
    pytest.skip(f"lmcache bridge: {why}")


@pytest.fixture(scope="session")
def lm():
    """LMCache 0.5.6 imported from the cached unpacked wheel, without torch."""
    try:
        import cbt  # noqa: F401
    except ImportError as x:
        pytest.fail(f"the cbt package is not installed: {x}")
    for mod in ("msgspec", "opentelemetry.sdk"):
        try:
            __import__(mod)
        except ImportError:
            _skip(f"{mod} is not installed (the Makefile's python step installs it)")
    p = subprocess.run([os.path.join(LMDIR, "setup_env.sh"), ENV], capture_output=True,
                       text=True, timeout=900)
    if p.returncode == 77:
        _skip((p.stdout.strip().splitlines() or ["setup_env.sh: 77"])[-1])
    assert p.returncode == 0, f"tests/lmcache/setup_env.sh {ENV}: {p.returncode}\n{p.stderr}"
    import lmcache_import

    h = lmcache_import.load(os.path.join(ENV, "whl"))
    import logging
    # LMCache's loggers are made per module at import; keep the generated
    # timeouts' warnings out of the test output (the subscribers still run)
    logging.disable(logging.CRITICAL)
    from lmcache.v1.mp_observability import config, event_bus, otel_init
    h.config, h.event_bus, h.otel_init = config, event_bus, otel_init
    h.tracing = sys.modules["lmcache.v1.mp_observability.subscribers.tracing"]
    # the subscriber package is bare (its __init__ imports torch): give it the
    # names its __init__ re-exports, as a real install has them
    from lmcache.v1.mp_observability.subscribers.tracing import span_registry
    for n in ("MPServerTracingSubscriber", "BlendTracingSubscriber",
              "TimeoutTracingSubscriber", "TransferPhaseTracingSubscriber"):
        setattr(h.tracing, n, getattr(h, n))
    h.tracing.SpanRegistry = span_registry.SpanRegistry
    h.tracing.get_span_registry = span_registry.get_span_registry
    return h


@pytest.fixture
def bridge(lm, tmp_path):
    """install() with a JSONL span sink; uninstall() after."""
    import cbt.lmcache

    spans = tmp_path / "spans.jsonl"
    warnings: list[str] = []
    cbt.lmcache.install(spans_path=str(spans), mp_root_end=RULE, otlp_endpoint="",
                        warn=warnings.append)
    ns = types.SimpleNamespace(spans=spans, warnings=warnings, mod=cbt.lmcache)
    yield ns
    cbt.lmcache.uninstall()


class _Clock:
    """Stands in for event_bus's `time` so that EventBus.publish stamps each
    event with the generated time (it overwrites event.timestamp)."""

    def __init__(self, real):
        self.now, self.monotonic = 0.0, real.monotonic

    def time(self):
        return self.now


def _obs(lm, *, tracing=True, logging=True, enabled=True, queue=1_000_000):
    return lm.config.ObservabilityConfig(
        enabled=enabled, metrics_enabled=False, logging_enabled=logging,
        tracing_enabled=tracing, otlp_endpoint="http://127.0.0.1:4317", max_queue_size=queue)


def _count_logging(bus) -> Counter:
    """Wrap the logging subscribers' callbacks on bus: calls per subscriber."""
    calls: Counter = Counter()
    for t, cbs in bus._subscribers.items():
        for i, cb in enumerate(cbs):
            owner = getattr(cb, "__self__", None)
            if owner is not None and ".subscribers.logging." in type(owner).__module__:
                def wrap(ev, cb=cb, n=type(owner).__name__):
                    calls[n] += 1
                    return cb(ev)
                wrap.__self__ = owner  # noqa: B010 - EventBus names exceptions by it
                cbs[i] = wrap
    return calls


def _expected_logging(bus, events) -> Counter:
    want: Counter = Counter()
    for sub in bus._registered_subscribers:
        if ".subscribers.logging." in type(sub).__module__:
            keys = set(sub.get_subscriptions())
            want[type(sub).__name__] = sum(1 for e in events if e.event_type in keys)
    return want


def _run_bus(lm, events, obs, *, real_tracing=False):
    """init_observability(obs), publish events with their generated times, stop.
    (bus, logging calls, expected logging calls)."""
    saved = {}
    if real_tracing:  # LMCache's own run: its gRPC exporter is not installed here
        saved["init_otel_tracing"] = lm.otel_init.init_otel_tracing
        lm.otel_init.init_otel_tracing = lambda **kw: None
    real_time = lm.event_bus.time
    clock = _Clock(real_time)
    lm.event_bus.time = clock
    try:
        bus = lm.config.init_observability(obs, start_prometheus_http_server=False)
        calls = _count_logging(bus)
        for e in events:
            clock.now = e.timestamp
            bus.publish(e)
        want = _expected_logging(bus, events)
        bus.stop()
    finally:
        lm.event_bus.time = real_time
        if saved:
            lm.otel_init.init_otel_tracing = saved["init_otel_tracing"]
    return bus, calls, want


def _events(lm, stream):
    return [lm.Event(event_type=lm.EventType(e.type), timestamp=e.ts,
                     metadata=copy.deepcopy(e.meta), session_id=e.session)
            for e in stream.events]


def _compare(lm, stream, lm_spans, shutdown_ns, cbt_lines):
    import compare
    import intended
    from conformance import to_cbt_lines

    cbt_events, notes = to_cbt_lines(stream)
    L = compare.from_otel(lm_spans, shutdown_ns)
    C = compare.from_cbt_jsonl(cbt_lines)
    res = compare.compare(L, C)
    ctx = intended.Context.build(cbt_events, notes, RULE)
    bad = [d for d in res.diffs if intended.classify(d, ctx) is None]
    return L, C, res, bad


# ---- the forests ---------------------------------------------------------------------------

def test_same_forests_as_lmcache(lm, bridge):
    import time

    import generator

    stream = generator.generate(SEED, N_MP, N_CB, 3)
    # LMCache's own tracing subscribers on one bus (uninstall for this part)
    bridge.mod.uninstall()
    lm.exporter.clear()
    ref_bus, ref_calls, ref_want = _run_bus(lm, _events(lm, stream), _obs(lm), real_tracing=True)
    shutdown_ns = time.time_ns()
    lm_spans = list(lm.exporter.get_finished_spans())
    assert lm_spans, "LMCache's own subscribers built no spans"
    assert ref_calls == ref_want
    ref_has = {t: ref_bus.has_subscribers(t) for t in lm.EventType}
    ref_names = [type(s).__name__ for s in ref_bus._registered_subscribers]

    # the bridge on another
    bridge.mod.install(spans_path=str(bridge.spans), mp_root_end=RULE, otlp_endpoint="",
                       warn=bridge.warnings.append)
    lm.exporter.clear()
    events = _events(lm, stream)
    bus, calls, want = _run_bus(lm, events, _obs(lm))
    assert not lm.exporter.get_finished_spans(), "LMCache built spans with the bridge on"
    assert [type(s).__name__ for s in bus._registered_subscribers] == ref_names
    assert all(type(s).__module__ == "cbt.lmcache" for s in bus._registered_subscribers
               if "Tracing" in type(s).__name__)
    assert calls == want == ref_want, "LMCache's logging subscribers missed events"
    extra = {lm.EventType[t] for t in bridge.mod.EXTRA_EVENT_TYPES}
    assert {t: v for t, v in ref_has.items() if t not in extra} == \
        {t: bus.has_subscribers(t) for t in lm.EventType if t not in extra}
    assert bus.dropped_events_count() == ref_bus.dropped_events_count() == 0
    # the same exceptions in LMCache's other subscribers; none in the stand-ins
    ref_exc = {k: v for k, v in ref_bus.subscriber_exception_counts().items()
               if "Tracing" not in k}
    assert bus.subscriber_exception_counts() == ref_exc

    c = bridge.mod.counters()
    fed = [e for e in events if e.event_type.name in bridge.mod._OWNER
           or e.event_type.name in bridge.mod.EXTRA_EVENT_TYPES]
    assert c["events_in"] == len(fed), c
    assert c["events_refused"] == 0, c
    lines = bridge.spans.read_text().splitlines()
    L, C, res, bad = _compare(lm, stream, lm_spans, shutdown_ns, lines)
    fm = getattr(bridge.mod._bridge, "final_metrics", None)
    assert len(res.pairs) > 0.9 * len(L), (len(res.pairs), len(L), len(C), {k: v for k, v in (fm or {}).items() if v})
    assert not bad, f"{len(bad)} unexpected differences, e.g.:\n" + "\n".join(
        f"  {d.kind} {d.name} {d.key}: {d.detail}" for d in bad[:10])


def test_standin_subscriptions_are_the_originals(lm, bridge):
    reg = lm.SpanRegistry()
    orig = {"MPServerTracingSubscriber": lm.MPServerTracingSubscriber(reg),
            "BlendTracingSubscriber": lm.BlendTracingSubscriber(reg),
            "TimeoutTracingSubscriber": lm.TimeoutTracingSubscriber(reg),
            "TransferPhaseTracingSubscriber": lm.TransferPhaseTracingSubscriber(reg)}
    for name, sub in orig.items():
        standin = getattr(lm.tracing, name)(lm.tracing.get_span_registry())
        assert type(standin).__module__ == "cbt.lmcache"
        assert list(standin.get_subscriptions()) == list(sub.get_subscriptions()), name
    assert lm.otel_init.init_otel_tracing.__module__ == "cbt.lmcache"


def test_extra_types_are_not_gated_by_any_publisher(lm):
    import cbt.lmcache

    gated = set()
    for d, _, files in os.walk(os.path.join(ENV, "whl", "lmcache")):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(d, f), encoding="utf-8") as fh:
                    src = fh.read()
                gated |= set(re.findall(r"has_subscribers\(\s*EventType\.(\w+)", src))
    assert gated, "found no has_subscribers(EventType.X) in the wheel: the search is broken"
    assert not gated & set(cbt.lmcache.EXTRA_EVENT_TYPES), gated


# ---- buses that do not dispatch --------------------------------------------------------------

def _some_events(lm, n, session="r1"):
    return [lm.Event(event_type=lm.EventType.MP_STORE_START if i % 2 == 0
                     else lm.EventType.MP_STORE_END, metadata={"engine_id": 0}, session_id=session)
            for i in range(n)]


def _hand_bus(lm, *, enabled=True, queue=10_000, bridged):
    bus = lm.event_bus.EventBus(lm.event_bus.EventBusConfig(enabled=enabled,
                                                            max_queue_size=queue))
    reg = lm.tracing.get_span_registry() if bridged else lm.SpanRegistry()
    for n in ("MPServerTracingSubscriber", "BlendTracingSubscriber",
              "TimeoutTracingSubscriber", "TransferPhaseTracingSubscriber"):
        cls = getattr(lm.tracing, n) if bridged else getattr(lm, n)
        bus.register_subscriber(cls(reg))
    return bus


@pytest.mark.parametrize("case", ["full", "stopped", "disabled"])
def test_bus_states_behave_as_lmcaches(lm, bridge, case):
    import cbt

    results = {}
    for side in ("lmcache", "bridge"):
        if side == "lmcache":
            bridge.mod.uninstall()
        else:
            bridge.mod.install(spans_path=str(bridge.spans), mp_root_end=RULE, otlp_endpoint="",
                               warn=bridge.warnings.append)
        lm.exporter.clear()
        bus = _hand_bus(lm, bridged=side == "bridge", enabled=case != "disabled",
                        queue=5 if case == "full" else 10_000)
        seen = Counter()
        bus.subscribe(lm.EventType.MP_STORE_START, lambda e: seen.update(["start"]))
        if case == "stopped":
            bus.start()
            for e in _some_events(lm, 4):
                bus.publish(e)
            bus.stop()
            before = (seen["start"], bridge.mod.counters().get("events_in", 0))
            for e in _some_events(lm, 6, "late"):
                bus.publish(e)  # queued on a stopped bus: nobody drains it
            import time
            time.sleep(0.3)
            after = (seen["start"], bridge.mod.counters().get("events_in", 0))
            results[side] = (before, after, bus.queue_depth(), bus.dropped_events_count())
        else:
            for e in _some_events(lm, 20):  # not started: the queue fills (full case)
                bus.publish(e)
            depth, dropped = bus.queue_depth(), bus.dropped_events_count()
            bus.stop()  # the final drain, then shutdown
            results[side] = (depth, dropped, seen["start"],
                             bridge.mod.counters().get("events_in", 0) if side == "bridge"
                             else None)
    lmr, brr = results["lmcache"], results["bridge"]
    if case == "full":
        assert lmr[:3] == brr[:3] == (5, 15, 3), results
        assert brr[3] == 5, results  # the bridge got the 5 the bus kept, as LMCache did
    elif case == "disabled":
        assert lmr[:3] == brr[:3] == (0, 0, 0), results
        assert brr[3] == 0, results
    else:
        assert lmr[0][0] == brr[0][0] == 2 and lmr[1][0] == brr[1][0] == 2, results
        assert brr[0][1] == brr[1][1] == 4, results  # nothing after stop reached cbt
        assert lmr[2:] == brr[2:] == (6, 0), results


def test_tracing_off_no_spans(lm, bridge):
    import cbt

    events = _some_events(lm, 10)
    bus, calls, want = _run_bus(lm, events, _obs(lm, tracing=False))
    assert calls == want
    assert not any("Tracing" in type(s).__name__ for s in bus._registered_subscribers)
    assert bridge.mod.counters()["events_in"] == 0
    assert not cbt.enabled(), "cbt started with tracing off"
    assert not bridge.spans.exists() or not bridge.spans.read_text().strip()


def test_init_otel_tracing_maps_the_endpoint(lm, tmp_path):
    """LMCache's own value (host:4317) reaches cbt.init as an OTLP/gRPC
    endpoint, unrewritten and without a warning."""
    import cbt
    import cbt.lmcache

    warnings: list[str] = []
    cbt.lmcache.install(spans_path=str(tmp_path / "s.jsonl"), warn=warnings.append)
    try:
        seen = {}
        real_init = cbt.init

        def fake_init(**cfg):  # what the stand-in asked cbt for, without exporting
            seen.update(cfg)
            cfg["otlp_endpoint"] = ""
            real_init(**cfg)
        cbt.init = fake_init
        try:
            lm.otel_init.init_otel_tracing(otlp_endpoint="localhost:4317",
                                           resource_attributes={"service.instance.id": "x"})
        finally:
            cbt.init = real_init
        assert cbt.enabled()
        assert seen["otlp_endpoint"] == "http://localhost:4317", seen
        assert seen["otlp_protocol"] == "grpc", seen
        assert warnings == [], warnings
    finally:
        cbt.lmcache.uninstall()
    assert not cbt.enabled()


def test_init_otel_tracing_http_endpoint_stays_http(lm, tmp_path):
    """An OTLP/HTTP value (port 4318) reaches cbt.init as OTLP/HTTP; a
    config that names otlp_endpoint itself wins over the flag, protocol
    untouched."""
    import cbt
    import cbt.lmcache

    for install_cfg, flag, want in [
        ({}, "http://otel:4318", {"otlp_endpoint": "http://otel:4318/v1/traces",
                                  "otlp_protocol": "http/protobuf"}),
        ({"otlp_endpoint": "http://mine:4318"}, "otel:4317",
         {"otlp_endpoint": "http://mine:4318"}),
    ]:
        cbt.lmcache.install(spans_path=str(tmp_path / "s.jsonl"), warn=pytest.fail,
                            **install_cfg)
        try:
            seen = {}
            real_init = cbt.init

            def fake_init(**cfg):
                seen.update(cfg)
                cfg["otlp_endpoint"] = ""
                cfg.pop("otlp_protocol", None)
                real_init(**cfg)
            cbt.init = fake_init
            try:
                lm.otel_init.init_otel_tracing(otlp_endpoint=flag)
            finally:
                cbt.init = real_init
            got = {k: seen[k] for k in ("otlp_endpoint", "otlp_protocol") if k in seen}
            assert got == want, (flag, seen)
        finally:
            cbt.lmcache.uninstall()
        assert not cbt.enabled()


# One case per row of docs/lmcache-bridge.md's table (and the forms in it):
# (--otlp-endpoint, the URL cbt gets, the protocol)
ENDPOINT_TABLE = [
    # not given
    (None, None, None), ("", None, None),
    # as LMCache takes it: gRPC, the collector's base URL
    ("http://localhost:4317", "http://localhost:4317", "grpc"),
    ("localhost:4317", "http://localhost:4317", "grpc"),
    ("grpc://otel:4317", "http://otel:4317", "grpc"),
    ("otel:14317", "http://otel:14317", "grpc"),
    ("http://otel:9000/otlp", "http://otel:9000", "grpc"),
    ("[::1]:4317", "http://[::1]:4317", "grpc"),
    ("http://otel:4317/", "http://otel:4317", "grpc"),
    # https: gRPC over TLS
    ("https://otel.example:4317", "https://otel.example:4317", "grpc"),
    ("https://otel.example/", "https://otel.example", "grpc"),
    # port 4318: OTLP/HTTP, /v1/traces appended
    ("http://otel:4318", "http://otel:4318/v1/traces", "http/protobuf"),
    ("https://otel:4318/base/", "https://otel:4318/base/v1/traces", "http/protobuf"),
    ("otel:4318", "http://otel:4318/v1/traces", "http/protobuf"),
    # a /v1/traces URL: OTLP/HTTP, as is
    ("http://otel:4318/v1/traces", "http://otel:4318/v1/traces", "http/protobuf"),
    ("http://otel:9000/otlp/v1/traces", "http://otel:9000/otlp/v1/traces", "http/protobuf"),
]


@pytest.mark.parametrize("given,want,protocol", ENDPOINT_TABLE)
def test_otlp_endpoint_rule(given, want, protocol):
    from cbt.lmcache import otlp_export_target

    assert otlp_export_target(given) == (want, protocol)


@pytest.mark.parametrize("given", ["ftp://x:1", "http://", "otel:notaport", "otel:99999"])
def test_otlp_endpoint_rule_refuses(given):
    from cbt.lmcache import otlp_export_target

    with pytest.raises(ValueError):
        otlp_export_target(given)


@pytest.mark.parametrize("given,want,protocol", [c for c in ENDPOINT_TABLE if c[0]])
def test_otlp_endpoint_reaches_the_config(given, want, protocol, monkeypatch):
    """What the bridge passes to cbt.init is what the exporter's config gets:
    the protocol and, for gRPC, the base URL for both signals."""
    import cbt
    from cbt.lmcache import otlp_export_target

    if not hasattr(cbt._cbt, "_otlp_config"):
        pytest.skip("this build has no OTLP exporter")
    for var in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(var, raising=False)
    url, proto = otlp_export_target(given)
    cfg = cbt._cbt._otlp_config(otlp_endpoint=url, otlp_protocol=proto)
    assert cfg["protocol"] == protocol
    assert cfg["endpoint"] == want
    if protocol == "grpc":
        assert cfg["metrics_endpoint"] == want
    else:
        assert cfg["metrics_endpoint"] == want[:-len("/v1/traces")] + "/v1/metrics"


# ---- values, streams ------------------------------------------------------------------------

def test_values_cbt_cannot_hold_are_counted(lm, bridge):
    bus = _hand_bus(lm, bridged=True)
    bus.publish(lm.Event(event_type=lm.EventType.MP_STORE_START, session_id="v1", metadata={
        "engine_id": 1, "keys": [1, 2], "mixed": [1, "a"], "d": {}, "n": None, "b": b"x",
        "big": 1 << 70, "nan": float("nan"), "ok": True, "x" * 80: 1, "f": 0.5}))
    bus.stop()
    c = bridge.mod.counters()
    assert c["events_in"] == 1 and c["events_out"] == 1, c
    assert (c["dropped_list"], c["dropped_dict"], c["dropped_none"], c["dropped_bytes"],
            c["dropped_int_range"], c["dropped_key"]) == \
        (1, 1, 1, 1, 1, 1), c
    assert c["dropped"] == 6, c
    spans = [json.loads(x) for x in bridge.spans.read_text().splitlines()]
    st = [s for s in spans if s["name"] == "mp.store"]
    assert st and st[0]["attributes"].get("f") == 0.5 and st[0]["attributes"].get("ok") is True
    # a homogeneous list is an array value (docs/lmcache-bridge.md), kept typed
    assert st[0]["attributes"].get("keys") == [1, 2], st[0]["attributes"]
    # NaN is a value: kept, written as protobuf's JSON mapping writes it (docs/python.md)
    assert st[0]["attributes"].get("nan") == "NaN", st[0]["attributes"]


class _StubStream:
    """As LMCache's CPU StubStream: ptr 0, the host function runs at once."""

    ptr = 0
    cuda_stream = 0

    def __init__(self):
        self.launched = 0

    def launch_host_func(self, fn, arg):
        self.launched += 1
        fn(arg)


def test_stub_stream_keeps_lmcaches_path(lm, bridge):
    bus = _hand_bus(lm, bridged=True)
    s = _StubStream()
    bus.publish_on_stream(s, lm.Event(event_type=lm.EventType.MP_STORE_START, session_id="s1",
                                      metadata={"engine_id": 0}))
    bus.stop()
    c = bridge.mod.counters()
    assert s.launched == 1 and c["stream_marks"] == 0 and c["events_in"] == 1, c


def test_disabled_bus_publish_on_stream_is_a_noop(lm, bridge):
    bus = _hand_bus(lm, bridged=True, enabled=False)
    s = _StubStream()
    s.ptr = 0x1234
    bus.publish_on_stream(s, lm.Event(event_type=lm.EventType.MP_STORE_START, session_id="s1"))
    bus.stop()
    assert s.launched == 0 and bridge.mod.counters()["events_in"] == 0


def _has_cuda_device() -> str:
    """'' when cbt can mark a CUDA stream here, else why not."""
    import cbt

    try:
        import ctypes
        rt = ctypes.CDLL("libcudart.so")
    except OSError:
        try:
            rt = ctypes.CDLL("libcudart.so.13")
        except OSError:
            return "no CUDA runtime (libcudart) on this machine"
    n = ctypes.c_int(0)
    if rt.cudaGetDeviceCount(ctypes.byref(n)) != 0 or n.value == 0:
        return "no CUDA device"
    was = cbt.enabled()
    try:
        if not was:
            cbt.init()
        h = ctypes.c_void_p()
        rt.cudaStreamCreate(ctypes.byref(h))
        cbt.publish_on_stream(h.value, "mp.store.start", "probe")
    except cbt.Error as x:
        return f"this cbt cannot mark a CUDA stream: {x}"
    finally:
        if not was:
            cbt.shutdown()
    return ""


def test_cuda_handle_without_cuda_falls_back(lm, bridge):
    why = _has_cuda_device()
    if not why:
        pytest.skip("a CUDA device is here: test_cuda_stream_mark covers the stream path")
    bus = _hand_bus(lm, bridged=True)
    s = _StubStream()
    s.ptr = 0x1234  # a handle cbt cannot use here: LMCache's host-callback path
    ev = lm.Event(event_type=lm.EventType.MP_STORE_START, session_id="s2",
                  metadata={"engine_id": 0})
    bus.publish_on_stream(s, ev)
    bus.stop()
    c = bridge.mod.counters()
    assert s.launched == 1 and c["stream_fallbacks"] == 1 and c["stream_marks"] == 0, c
    assert any("host callback from now on" in w for w in bridge.warnings), bridge.warnings
    assert not bridge.mod._bridge.stream_ok


def test_cuda_stream_mark(lm, bridge):
    why = _has_cuda_device()
    if why:
        _skip(f"the CUDA stream path: {why} (the GPU script covers it on a device)")
    import ctypes

    rt = ctypes.CDLL("libcudart.so")
    h = ctypes.c_void_p()
    assert rt.cudaStreamCreate(ctypes.byref(h)) == 0
    stream = _StubStream()  # LMCache's host callback still runs, for its other subscribers
    stream.ptr = h.value
    bus = _hand_bus(lm, bridged=True)
    seen = []
    bus.subscribe(lm.EventType.MP_STORE_END, seen.append)
    for t in ("MP_STORE_START", "MP_STORE_END"):
        bus.publish_on_stream(stream, lm.Event(event_type=lm.EventType[t], session_id="g1",
                                               metadata={"engine_id": 0}))
    rt.cudaStreamSynchronize(h)
    bus.stop()
    c = bridge.mod.counters()
    assert c["stream_marks"] == 2 and len(seen) == 1, (c, seen)
    spans = [json.loads(x) for x in bridge.spans.read_text().splitlines()]
    assert any(s["name"] == "mp.store" for s in spans), spans


# ---- the command ------------------------------------------------------------------------------

def test_main_help():
    p = subprocess.run([sys.executable, "-m", "cbt.lmcache", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "python -m cbt.lmcache server" in p.stdout, p


def test_main_passes_every_argument(lm, monkeypatch):
    import cbt.lmcache
    import cbt.lmcache.__main__ as m

    got = {}
    cli = types.ModuleType("lmcache.cli.main")
    cli.main = lambda argv: got.setdefault("argv", list(argv))
    monkeypatch.setitem(sys.modules, "lmcache.cli", types.ModuleType("lmcache.cli"))
    monkeypatch.setitem(sys.modules, "lmcache.cli.main", cli)
    try:
        argv = ["server", "--enable-tracing", "--otlp-endpoint", "h:4317", "--help"]
        assert m.main(argv) == 0
        assert got["argv"] == argv and cbt.lmcache.installed()
    finally:
        cbt.lmcache.uninstall()


def test_main_takes_cbts_trace_level(lm, monkeypatch):
    """--trace-level gpu and its --trace-output are cbt's: taken out of LMCache's
    arguments (its parser knows storage/events only) and given to install; its
    own levels stay LMCache's."""
    import cbt.lmcache
    import cbt.lmcache.__main__ as m

    got = {}
    cli = types.ModuleType("lmcache.cli.main")
    cli.main = lambda argv: got.setdefault("argv", list(argv))
    monkeypatch.setitem(sys.modules, "lmcache.cli", types.ModuleType("lmcache.cli"))
    monkeypatch.setitem(sys.modules, "lmcache.cli.main", cli)
    seen = {}
    real_install = cbt.lmcache.install
    monkeypatch.setattr(cbt.lmcache, "install", lambda **kw: (seen.update(kw), real_install(**kw)))
    try:
        argv = ["server", "--enable-tracing", "--trace-level", "gpu", "--otlp-endpoint", "h:4317",
                "--trace-output=/tmp/x.lct", "--port", "1"]
        assert m.main(argv) == 0
        assert got["argv"] == ["server", "--enable-tracing", "--otlp-endpoint", "h:4317",
                               "--port", "1"]
        assert seen["trace_level"] == "gpu" and seen["trace_output"] == "/tmp/x.lct"
    finally:
        cbt.lmcache.uninstall()
    # LMCache's own level: every argument passes, cbt records nothing
    own = ["server", "--trace-level", "events", "--trace-output", "e.lct"]
    assert m.take_trace_args(own) == (own, {})
    assert m.take_trace_args(["s", "--trace-level=gpu"]) == (["s"], {"trace_level": "gpu"})
    with pytest.raises(ValueError, match="--trace-output"):
        m.take_trace_args(["s", "--trace-level", "gpu", "--trace-output"])
    with pytest.raises(ValueError, match="--trace-output"):  # a flag is not a file name
        m.take_trace_args(["s", "--trace-level", "gpu", "--trace-output", "--port", "8000"])
    with pytest.raises(ValueError, match="mixed"):
        m.take_trace_args(["s", "--trace-level", "gpu", "--trace-level", "events"])
    with pytest.raises(ValueError, match="twice"):
        m.take_trace_args(["s", "--trace-output", "a", "--trace-level", "gpu",
                           "--trace-output", "b"])
    # --trace-output before --trace-level, the level repeated: all taken
    assert m.take_trace_args(["s", "--trace-output", "o.lct", "--trace-level", "gpu", "-p",
                              "--trace-level=gpu"]) == (["s", "-p"], {"trace_level": "gpu",
                                                                     "trace_output": "o.lct"})
    # after --: not ours
    tail = ["s", "--", "--trace-level", "gpu"]
    assert m.take_trace_args(tail) == (tail, {})
    # without --enable-tracing there is no tracer to record: refused, exit 2
    assert m.main(["server", "--trace-level", "gpu"]) == 2


# ---- the stream path's failures, counters, install order, uninstall ---------------------------

class _FakeStreamCbt:
    """cbt.publish_on_stream and cbt.publish stand-ins (no device needed):
    fail(i) says what the i-th publish_on_stream call raises (None: accepted)."""

    def __init__(self, monkeypatch, fail):
        import cbt

        self.marks, self.host, self.n, self.fail = [], [], 0, fail
        real_publish = cbt.publish

        def publish_on_stream(handle, etype, session, pair=None, **vals):
            x = self.fail(self.n)
            self.n += 1
            if x is not None:
                raise x
            self.marks.append((etype, session, vals))

        def publish(etype, session, ts_ns, pair=None, **vals):
            self.host.append((etype, session, vals))
            return real_publish(etype, session, ts_ns, pair=pair, **vals)

        monkeypatch.setattr(cbt, "publish_on_stream", publish_on_stream)
        monkeypatch.setattr(cbt, "publish", publish)


def _status_error(name):
    import cbt
    from cbt import _cbt

    x = cbt.Error(f"planted {name}")
    x.status = getattr(_cbt, name)
    return x


def _stream_event(lm, t="MP_STORE_START", session="f1", **meta):
    return lm.Event(event_type=lm.EventType[t], session_id=session,
                    metadata={"engine_id": 0, **meta})


def test_stream_refusal_falls_back_for_that_event_only(lm, bridge, monkeypatch):
    fake = _FakeStreamCbt(monkeypatch, lambda i: _status_error("ERR_FULL") if i == 0 else None)
    bus = _hand_bus(lm, bridged=True)
    s = _StubStream()
    s.ptr = 0x1234
    bus.publish_on_stream(s, _stream_event(lm))          # refused: LMCache's path, once
    bus.publish_on_stream(s, _stream_event(lm, "MP_STORE_END"))  # a mark again
    bus.stop()
    c = bridge.mod.counters()
    assert bridge.mod._bridge.stream_ok, "one refusal turned the stream path off"
    assert c["stream_refused"] == 1 and c["stream_fallbacks"] == 0 and c["stream_marks"] == 1, c
    assert [m[0] for m in fake.marks] == ["mp.store.end"], fake.marks
    assert [h[0] for h in fake.host] == ["mp.store.start"], fake.host
    assert c["events_in"] == 2 and c["events_out"] == 2, c
    assert not any("host callback" in w for w in bridge.warnings), bridge.warnings


@pytest.mark.parametrize("status", ["ERR_UNSUPPORTED", "ERR_NO_DEVICE", "ERR_CUDA"])
def test_stream_off_only_on_no_cuda_statuses(lm, bridge, monkeypatch, status):
    fake = _FakeStreamCbt(monkeypatch, lambda i: _status_error(status))
    bus = _hand_bus(lm, bridged=True)
    s = _StubStream()
    s.ptr = 0x1234
    for t in ("MP_STORE_START", "MP_STORE_END"):
        bus.publish_on_stream(s, _stream_event(lm, t))
    bus.stop()
    c = bridge.mod.counters()
    assert not bridge.mod._bridge.stream_ok
    assert fake.n == 1 and c["stream_fallbacks"] == 1 and c["stream_refused"] == 0, c
    assert s.launched == 2 and len(fake.host) == 2 and c["events_in"] == 2, (c, fake.host)
    assert sum("host callback from now on" in w for w in bridge.warnings) == 1, bridge.warnings


@pytest.mark.parametrize("exc", [TypeError, ValueError, OverflowError])
def test_stream_python_errors_do_not_escape(lm, bridge, monkeypatch, exc):
    _FakeStreamCbt(monkeypatch, lambda i: exc("planted"))
    bus = _hand_bus(lm, bridged=True)
    s = _StubStream()
    s.ptr = 0x1234
    bus.publish_on_stream(s, _stream_event(lm))  # must not raise into LMCache's publisher
    bus.stop()
    c = bridge.mod.counters()
    assert bridge.mod._bridge.stream_ok
    assert c["stream_refused"] == 1 and s.launched == 1 and c["events_in"] == 1, c


def test_stream_real_cbt_value_errors_do_not_escape(lm, bridge):
    """cbt's own refusals of a value (a NUL in a string) on the stream path."""
    bus = _hand_bus(lm, bridged=True)
    s = _StubStream()
    s.ptr = 0x1234
    bus.publish_on_stream(s, _stream_event(lm, session="nul\x00here", note="a\x00b"))
    bus.stop()
    c = bridge.mod.counters()
    assert s.launched == 1 and c["events_in"] == 1, c


def _phase_samples(lm, n):
    samples = [("d2h", "store", 0, 1.0 + i, 4096, f"k{i}", 1.0, 2.0) for i in range(n)]
    return lm.Event(event_type=lm.EventType.MP_TRANSFER_PHASE_SAMPLES, session_id="",
                    metadata={"samples": samples, "ended_transfer_key": "k0"})


def test_stream_partial_translation_reaches_cbt_once(lm, bridge, monkeypatch):
    # 3 samples + the batch end = 4 cbt events; the 2nd stream mark fails
    fake = _FakeStreamCbt(monkeypatch, lambda i: ValueError("planted") if i == 1 else None)
    bus = _hand_bus(lm, bridged=True)
    s = _StubStream()
    s.ptr = 0x1234
    bus.publish_on_stream(s, _phase_samples(lm, 3))
    bus.stop()
    c = bridge.mod.counters()
    keys = [v.get("transfer_key", v.get("ended_transfer_key")) for _, _, v in
            fake.marks + fake.host]
    assert keys == ["k0", "k1", "k2", "k0"], (fake.marks, fake.host)
    assert len(fake.marks) == 1 and len(fake.host) == 3, (fake.marks, fake.host)
    assert c["stream_partial"] == 1 and c["events_in"] == 1 and c["events_out"] == 4, c
    assert s.launched == 1  # LMCache's other subscribers still get it


def test_stream_mark_keeps_lmcaches_host_callback(lm, bridge, monkeypatch):
    """Marked events still go through LMCache's publish_on_stream (the host
    callback stamps them for LMCache's metrics subscribers); the stand-ins
    skip them there."""
    fake = _FakeStreamCbt(monkeypatch, lambda i: None)
    bus = _hand_bus(lm, bridged=True)
    seen = []
    bus.subscribe(lm.EventType.MP_STORE_END, seen.append)
    s = _StubStream()
    s.ptr = 0x1234
    for t in ("MP_STORE_START", "MP_STORE_END"):
        bus.publish_on_stream(s, _stream_event(lm, t))
    bus.stop()
    c = bridge.mod.counters()
    assert s.launched == 2, "LMCache's host callback was bypassed"
    assert len(fake.marks) == 2 and fake.host == [], (fake.marks, fake.host)
    assert c["stream_marks"] == 2 and c["events_in"] == 2 and len(seen) == 1, c


def test_stream_mark_native_recorder_marker(lm, bridge, monkeypatch):
    """With LMCache's native recorder the Event is rebuilt from its metadata:
    the fed marker travels there, and forward() skips the rebuilt event."""
    monkeypatch.setattr(lm.event_bus, "_has_native_recorder", True, raising=False)
    recorded = []

    class _Ops:
        @staticmethod
        def record_event_on_stream(ptr, name, sid, str_meta, int_meta):
            recorded.append((name, sid, dict(str_meta), dict(int_meta)))

        @staticmethod
        def drain_recorded_events():
            out = [(n, sid, 1.0, sm, im) for n, sid, sm, im in recorded]
            recorded.clear()
            return out

    monkeypatch.setattr(lm.event_bus, "_device_ops", _Ops, raising=False)
    fake = _FakeStreamCbt(monkeypatch, lambda i: None)
    bus = _hand_bus(lm, bridged=True)
    s = _StubStream()
    s.ptr = 0x1234
    bus.publish_on_stream(s, _stream_event(lm))
    bus.stop()
    c = bridge.mod.counters()
    assert len(fake.marks) == 1 and fake.host == [], (fake.marks, fake.host)
    assert c["events_in"] == 1, c


def test_counters_are_thread_safe(lm, bridge, monkeypatch):
    import threading

    _FakeStreamCbt(monkeypatch, lambda i: None)
    br = bridge.mod._bridge
    n, k = 4000, 4
    ev = _stream_event(lm)
    orig = bridge.mod._translate.to_cbt

    def slow_to_cbt(event, dropped):  # widen the read-modify-write window
        import time
        time.sleep(0)
        return orig(event, dropped)

    monkeypatch.setattr(bridge.mod._translate, "to_cbt", slow_to_cbt)
    sys.setswitchinterval(1e-6)
    try:
        def fwd():
            for _ in range(n):
                br.forward(ev)

        def mark():
            for _ in range(n):
                br.on_stream(0x1234, ev)
        ts = [threading.Thread(target=f) for f in (fwd, mark) * (k // 2)]
        br.start()  # cbt with the fixture's config
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        sys.setswitchinterval(0.005)
    c = bridge.mod.counters()
    assert c["events_in"] == n * k and c["stream_marks"] == n * (k // 2), c


def test_install_after_init_observability_warns(lm, tmp_path):
    import cbt.lmcache

    obs = _obs(lm)
    saved = lm.otel_init.init_otel_tracing
    lm.otel_init.init_otel_tracing = lambda **kw: None
    try:
        bus = lm.config.init_observability(obs, start_prometheus_http_server=False)
    finally:
        lm.otel_init.init_otel_tracing = saved
    warnings: list[str] = []
    try:
        cbt.lmcache.install(spans_path=str(tmp_path / "s.jsonl"), otlp_endpoint="",
                            warn=warnings.append)
        assert sum("after LMCache's init_observability" in w for w in warnings) == 1, warnings
    finally:
        cbt.lmcache.uninstall()
        bus.stop()
        lm.event_bus._global_bus = lm.event_bus.EventBus(
            lm.event_bus.EventBusConfig(enabled=False))


def test_install_first_does_not_warn(lm, bridge):
    assert not any("init_observability" in w for w in bridge.warnings), bridge.warnings


def test_uninstall_unsubscribes_the_standins(lm, bridge):
    import weakref

    bus = lm.event_bus.EventBus(lm.event_bus.EventBusConfig(enabled=True))
    bus.subscribe(lm.EventType.MP_STORE_START, lambda e: None)
    before = {t: bus.has_subscribers(t) for t in lm.EventType}
    reg = lm.tracing.get_span_registry()
    for n in bridge.mod.STANDIN_SUBSCRIPTIONS:
        bus.register_subscriber(getattr(lm.tracing, n)(reg))
    assert bus.has_subscribers(lm.EventType.MP_RETRIEVE_START)
    assert bridge.mod._bridge.buses.__class__ is weakref.WeakSet
    bridge.mod.uninstall()
    assert {t: bus.has_subscribers(t) for t in lm.EventType} == before
    assert not any(type(s).__module__ == "cbt.lmcache" for s in bus._registered_subscribers)
    bus.stop()
    bridge.mod.install(spans_path=str(bridge.spans), mp_root_end=RULE, otlp_endpoint="",
                       warn=bridge.warnings.append)


def _grpc_collector(tmp_path):
    """tests/grpc_collector.py (grpcio + opentelemetry-proto's servicers) in
    the venv scripts/pydeps.sh makes: (process, port, out file); skipped,
    saying why, without that venv."""
    venv = os.environ.get("CBT_PYVENV", os.path.join(ROOT, ".venv"))
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        _skip(f"no {py}: scripts/pydeps.sh makes it (the gRPC collector needs grpcio)")
    if subprocess.run([py, "-c", "import grpc, opentelemetry.proto.collector.trace.v1."
                       "trace_service_pb2_grpc"], capture_output=True, timeout=60).returncode:
        _skip(f"{py} lacks grpcio or opentelemetry-proto (scripts/pydeps.sh installs them)")
    out = tmp_path / "collector.jsonl"
    p = subprocess.Popen([py, os.path.join(ROOT, "tests", "grpc_collector.py"), "serve",
                          "--out", str(out), "--lifetime", "120", "--exit-on-stdin-eof"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("PORT "):
        p.kill()
        pytest.fail(f"the gRPC collector did not start: {line!r}")
    return p, int(line.split()[1]), out


def test_lmcache_endpoint_delivers_to_a_real_grpc_collector(lm, tmp_path):
    """LMCache's --otlp-endpoint as LMCache users write it (http://host:4317,
    OTLP/gRPC) through LMCache's own init_observability and the bridge: every
    span cbt ended reaches a real gRPC collector (grpcio with
    opentelemetry-proto's TraceService servicer), decoded by the official
    classes, none lost."""
    import cbt
    import cbt.lmcache
    import generator

    proc, port, out = _grpc_collector(tmp_path)
    spans = tmp_path / "spans.jsonl"
    try:
        cbt.lmcache.install(spans_path=str(spans), mp_root_end=RULE, warn=pytest.fail)
        try:
            stream = generator.generate(SEED, 30, 30, 2)
            obs = lm.config.ObservabilityConfig(
                enabled=True, metrics_enabled=False, logging_enabled=False,
                tracing_enabled=True, otlp_endpoint=f"http://127.0.0.1:{port}",
                max_queue_size=1_000_000)
            _run_bus(lm, _events(lm, stream), obs)
        finally:
            cbt.lmcache.uninstall()
        ended = len(spans.read_text().splitlines())
        assert ended > 0
        got = 0
        for ln in out.read_text().splitlines():
            r = json.loads(ln)
            if r.get("kind") == "request" and r.get("service") == "traces":
                assert r["outcome"] == "ok", r
                got += r["items"]
        assert got == ended, (got, ended)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


# -- LMCache 0.5.7's token trace ------------------------------------------------

def _translate_rules():
    import cbt.lmcache._translate as t
    return t


@pytest.mark.parametrize("value, want", [
    ([], (True, [], "")), ((1, 2), (True, [1, 2], "")), ([True, False], (True, [True, False], "")),
    ([0.5, 1.5], (True, [0.5, 1.5], "")), (["a", "b"], (True, ["a", "b"], "")),
    ([1, 1 << 70], (False, None, "int_range")), ([1, 2.0], (False, None, "list")),
    ([1, True], (False, None, "list")), ([[1]], (False, None, "list")),
    ([None], (False, None, "list")), ([b"x"], (False, None, "list")),
])
def test_lists_are_array_values(value, want):
    """A list of one scalar kind is an array value (0.5.7's token_ids); a
    mixed, nested or unholdable one is dropped with its reason."""
    assert _translate_rules().classify(value) == want


def test_token_ids_list_is_kept_whole():
    import enum
    t = _translate_rules()
    ids = list(range(131072))  # a 128 k-token prompt
    ok, v, _ = t.classify(ids)
    assert ok and v == ids and v is not ids
    e = enum.IntEnum("E", {"A": 7})
    assert t.classify([e.A, 8]) == (True, [7, 8], "")


def test_main_token_trace_on_056(lm, monkeypatch):
    """0.5.6's parser has no --enable-token-trace: the bridge takes it, adds
    --enable-tracing as 0.5.7 does, and installs with token_trace=True."""
    import cbt.lmcache
    import cbt.lmcache.__main__ as m

    got = {}
    cli = types.ModuleType("lmcache.cli.main")
    cli.main = lambda argv: got.setdefault("argv", list(argv))
    monkeypatch.setitem(sys.modules, "lmcache.cli", types.ModuleType("lmcache.cli"))
    monkeypatch.setitem(sys.modules, "lmcache.cli.main", cli)
    seen = {}
    real_install = cbt.lmcache.install
    monkeypatch.setattr(cbt.lmcache, "install",
                        lambda **kw: (seen.update(kw), real_install(**kw, warn=lambda m: None)))
    assert not m.lmcache_knows_token_trace()  # 0.5.6's ObservabilityConfig
    try:
        assert m.main(["server", "--enable-token-trace", "--otlp-endpoint", "h:4317"]) == 0
        assert got["argv"] == ["server", "--otlp-endpoint", "h:4317", "--enable-tracing"]
        assert seen["token_trace"] is True
    finally:
        cbt.lmcache.uninstall()
    # --enable-tracing given too: not twice; after `--`: LMCache's
    assert m.take_token_trace(["server", "--enable-tracing", "--enable-token-trace"], False) == \
        (["server", "--enable-tracing"], True)
    assert m.take_token_trace(["server", "--", "--enable-token-trace"], False) == \
        (["server", "--", "--enable-token-trace"], False)
    # an LMCache whose parser has it (0.5.7): passed through, LMCache does it
    assert m.take_token_trace(["server", "--enable-token-trace"], True) == \
        (["server", "--enable-token-trace"], True)


def test_token_trace_standin_subscribes_mp_lookup(lm):
    """MP_LOOKUP joins the MP stand-in's subscriptions with token tracing on,
    as 0.5.7's MPServerTracingSubscriber(token_trace_enabled=True) does, and
    not otherwise (has_subscribers(MP_LOOKUP) makes 0.5.6 build the event)."""
    import cbt.lmcache

    look = lm.EventType.MP_LOOKUP
    cbt.lmcache.install(otlp_endpoint="", warn=lambda m: None)
    try:
        reg = lm.tracing.get_span_registry()
        # 0.5.7's init_observability passes the flag to the subscriber itself:
        # before cbt starts, it turns token traces on
        s = lm.tracing.MPServerTracingSubscriber(reg, token_trace_enabled=True)
        assert look in s.get_subscriptions()
    finally:
        cbt.lmcache.uninstall()
    late: list[str] = []
    cbt.lmcache.install(otlp_endpoint="", warn=late.append)
    try:
        reg = lm.tracing.get_span_registry()
        assert look not in lm.tracing.MPServerTracingSubscriber(reg).get_subscriptions()
        # cbt now runs without token traces: the ids would be copied for
        # nothing, so MP_LOOKUP is not asked for, and that is said
        s = lm.tracing.MPServerTracingSubscriber(reg, token_trace_enabled=True)
        assert look not in s.get_subscriptions()
        assert any("no mp.request.trace spans" in w for w in late), late
    finally:
        cbt.lmcache.uninstall()
    warned: list[str] = []
    cbt.lmcache.install(otlp_endpoint="", token_trace=True, warn=warned.append)
    try:
        subs = lm.tracing.MPServerTracingSubscriber(lm.tracing.get_span_registry())
        assert look in subs.get_subscriptions()
        assert look not in lm.tracing.BlendTracingSubscriber(None).get_subscriptions()
        # torch-free LMCache: the lookup modules cannot be imported; said so
        assert any("get no token_ids" in w for w in warned), warned
    finally:
        cbt.lmcache.uninstall()


def test_token_ids_added_where_056_publishes_mp_lookup(lm, tmp_path, monkeypatch):
    """LMCache 0.5.6 publishes MP_LOOKUP without token_ids; under token_trace
    the bridge adds list(key.token_ids) there, as 0.5.7 does, only to that
    key's request's event; uninstall() puts the method and Event back."""
    import cbt.lmcache

    mod = types.ModuleType("cbt_test_fake_lookup")
    mod.Event = lm.Event
    published = []

    def request_handler(fn):
        fn.__lmcache_rpc_method__ = "lookup"  # as LMCache's decorator marks it
        return fn

    class LookupModule:
        @request_handler
        def lookup(self, key, tp_size):
            """LMCache's docstring."""
            published.append(mod.Event(event_type=lm.EventType.MP_LOOKUP,
                                       session_id=key.request_id,
                                       metadata={"model_name": "m", "seq_len": 3}))
            published.append(mod.Event(event_type=lm.EventType.MP_LOOKUP, session_id="other",
                                       metadata={"model_name": "m"}))
            published.append(mod.Event(event_type=lm.EventType.MP_REQUEST_START,
                                       session_id=key.request_id))
            published.append(mod.Event(event_type=lm.EventType.MP_LOOKUP,
                                       session_id=key.request_id,
                                       metadata={"model_name": "m", "token_ids": [9]}))

    mod.LookupModule = LookupModule
    orig = LookupModule.__dict__["lookup"]
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(cbt.lmcache, "LOOKUP_HOOKS", ((mod.__name__, "LookupModule", "lookup"),))
    key = types.SimpleNamespace(request_id="r1", token_ids=(5, 6, 7))
    cbt.lmcache.install(otlp_endpoint="", token_trace=True, warn=lambda m: None)
    try:
        hooked = LookupModule.__dict__["lookup"]
        assert hooked is not orig and hooked.__lmcache_rpc_method__ == "lookup"
        assert hooked.__doc__ == orig.__doc__ and hooked.__wrapped__ is orig
        LookupModule().lookup(key, 1)
        assert published[0].metadata["token_ids"] == [5, 6, 7]
        assert "token_ids" not in published[1].metadata  # another session's
        assert "token_ids" not in published[2].metadata  # not MP_LOOKUP
        assert type(published[0]) is lm.Event
        c = cbt.lmcache.counters()
        assert (c["token_ids_added"], c["token_ids_unmatched"]) == (1, 1), c
        # an event that has them already (0.5.7 publishes them) keeps its own
        assert published[3].metadata["token_ids"] == [9]
    finally:
        cbt.lmcache.uninstall()
    assert LookupModule.__dict__["lookup"] is orig and mod.Event is lm.Event
    published.clear()
    LookupModule().lookup(key, 1)
    assert "token_ids" not in published[0].metadata


def test_token_ids_reach_cbt_as_an_array(lm, bridge):
    """An MP_LOOKUP with token_ids (0.5.7's, or 0.5.6's with the hook) reaches
    cbt with its ids as one array value: nothing dropped, nothing refused."""
    import cbt.lmcache

    cbt.lmcache.uninstall()
    cbt.lmcache.install(spans_path=str(bridge.spans), mp_root_end=RULE, otlp_endpoint="",
                        token_trace=True, warn=lambda m: None)
    bus = _hand_bus(lm, bridged=True)
    ids = list(range(4096))
    bus.publish(lm.Event(event_type=lm.EventType.MP_REQUEST_START, session_id="t1"))
    bus.publish(lm.Event(event_type=lm.EventType.MP_LOOKUP, session_id="t1",
                         metadata={"model_name": "m", "token_ids": ids}))
    bus.publish(lm.Event(event_type=lm.EventType.MP_REQUEST_END, session_id="t1"))
    bus.stop()
    c = cbt.lmcache.counters()
    assert c["events_in"] == 3 and c["events_out"] == 3 and c["events_refused"] == 0, c
    assert c["dropped"] == 0, c
    cbt.lmcache.uninstall()  # cbt shut down: the span file is whole
    spans = [json.loads(x) for x in bridge.spans.read_text().splitlines()]
    root = [s for s in spans if s["name"] == "request"]
    tr = [s for s in spans if s["name"] == "mp.request.trace"]
    assert len(root) == 1 and len(tr) == 1, [s["name"] for s in spans]
    t = tr[0]
    assert t["parent_span_id"] == root[0]["span_id"] and t["start_ns"] == t["end_ns"]
    assert t["attributes"]["session_id"] == "t1" and t["attributes"]["lmcache.model"] == "m"
    assert t["attributes"]["lmcache.input_ids"] == ids


def test_the_recording_schema_follows_the_running_lmcache(monkeypatch):
    """A recording's LMCT schema is the running LMCache's (docs/recording.md):
    0.5.6's 1, 0.5.7's 2 (told apart from another "version 2" by MemoryTags),
    and nothing cbt cannot name."""
    import types
    import cbt.lmcache as br

    def fake(version, memory_tags):
        fmt = types.ModuleType("lmcache.v1.mp_observability.trace.format")
        fmt.TRACE_SCHEMA_VERSION = version
        api = types.ModuleType("lmcache.v1.distributed.api")
        if memory_tags:
            api.MemoryTags = object
        monkeypatch.setitem(sys.modules, "lmcache.v1.mp_observability.trace.format", fmt)
        monkeypatch.setitem(sys.modules, "lmcache.v1.distributed.api", api)

    fake(1, False)
    assert br.lmcache_trace_schema() == 1
    fake(2, True)
    assert br.lmcache_trace_schema() == 2
    fake(2, False)  # pull request #4871's "version 2": not 0.5.7's layout
    assert br.lmcache_trace_schema() is None
    fake(3, True)
    assert br.lmcache_trace_schema() is None
