"""bench/bench_python_peers.py — what cbt.publish is compared with, per event,
in the same Python process (bench/bench_python.py prints them beside cbt's):

- LMCache 0.5.6's ``EventBus.publish``: a real bus (enabled, started: its
  drain thread running, no subscribers, a queue that never fills), the event
  built per call as LMCache's publishers do (``Event(event_type, metadata,
  session_id)``), and publish alone on a prebuilt event;
- the OpenTelemetry Python SDK 1.40's ``tracer.start_span(name, attributes)``
  then ``span.end()`` per event, with a ``BatchSpanProcessor`` in front of an
  exporter that drops everything (the SDK's own cost, no I/O).

LMCache comes from the unpacked wheel tests/lmcache/setup_env.sh makes
(``--lmcache-root``, default build/lmcache-env/whl), imported without torch
(tests/lmcache/lmcache_import.py). Each figure is the best of ``repeats``
runs of ``n`` events, in ns per event.

  python bench/bench_python_peers.py [--n 200000] [--repeats 5] [--lmcache-root DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
META = {"engine_id": 0, "device": "cuda:0", "num_tokens": 256, "model_name": "m"}


def _best(fn, n: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(n)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def load_lmcache(root: str | None = None):
    """LMCache's Event, EventType and event_bus module from the unpacked wheel."""
    root = root or os.path.join(ROOT, "build", "lmcache-env", "whl")
    if "lmcache.v1.mp_observability.event_bus" not in sys.modules:
        sys.path.insert(0, os.path.join(ROOT, "tests", "lmcache"))
        import lmcache_import

        lmcache_import.load(root)
    from lmcache.v1.mp_observability import event_bus
    from lmcache.v1.mp_observability.event import Event, EventType

    return Event, EventType, event_bus


def lmcache_publish_ns(n: int = 200_000, repeats: int = 5, root: str | None = None) -> dict:
    """ns per event: {"lmcache_event_and_publish", "lmcache_publish"}."""
    Event, EventType, eb = load_lmcache(root)
    bus = eb.EventBus(eb.EventBusConfig(enabled=True, max_queue_size=1 << 30))
    bus.start()
    et = EventType.MP_STORE_START
    try:
        def build_and_publish(k):
            pub = bus.publish
            for i in range(k):
                pub(Event(event_type=et, metadata={"engine_id": 0, "device": "cuda:0",
                                                   "num_tokens": i, "model_name": "m"},
                          session_id="req-1"))

        events = [Event(event_type=et, metadata=dict(META), session_id="req-1")
                  for _ in range(n)]

        def publish_only(k):
            pub = bus.publish
            for e in events[:k]:
                pub(e)

        out = {"lmcache_event_and_publish": _best(build_and_publish, n, repeats),
               "lmcache_publish": _best(publish_only, n, repeats)}
    finally:
        bus.stop()
    return out


def otel_span_ns(n: int = 200_000, repeats: int = 5) -> dict:
    """ns per event: {"otel_start_span_end"}."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (BatchSpanProcessor, SpanExporter,
                                                SpanExportResult)

    class _Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop(), max_queue_size=1 << 16))
    tracer = provider.get_tracer("bench")

    def spans(k):
        start = tracer.start_span
        for i in range(k):
            s = start("mp.store", attributes={"engine_id": 0, "device": "cuda:0",
                                              "num_tokens": i, "model_name": "m"})
            s.end()

    try:
        return {"otel_start_span_end": _best(spans, n, repeats)}
    finally:
        provider.shutdown()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--lmcache-root")
    a = ap.parse_args(argv)
    figs = lmcache_publish_ns(a.n, a.repeats, a.lmcache_root)
    figs.update(otel_span_ns(a.n, a.repeats))
    for k, v in figs.items():
        print(f"{k:28s} {v:8.1f} ns/event")
    return 0


if __name__ == "__main__":
    sys.exit(main())
