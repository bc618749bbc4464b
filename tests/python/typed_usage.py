"""tests/python/typed_usage.py — the documented API as a user's code uses it,
for tests/python/test_types.py's mypy --strict check (it is not run).

A line ending in ``# E: CODE`` must get a mypy error with that code (the
stubs refuse what the runtime refuses); every other line must get none.
"""

from __future__ import annotations

import enum
from pathlib import Path

import cbt
from cbt import _cbt  # docs/python.md: ERR_*, HAVE_RECORDING live here


class Kind(enum.Enum):  # an event type given as an Enum member (LMCache's EventType)
    STORE_START = "mp.store.start"


class Rank(enum.IntEnum):
    ZERO = 0


def paths(d: Path) -> None:
    # path-like where the runtime takes a file name
    with cbt.tracer(spans_path=d / "spans.jsonl", trace_path=d / "trace.json"):
        cbt.publish(Kind.STORE_START, "req-1", engine_id=Rank.ZERO)
    cbt.init(trace_level="gpu", trace_output=d / "run.lct", trace_buffer_kib=64)
    cbt.shutdown()
    if _cbt.HAVE_RECORDING:
        r = cbt.replay(d / "run.lct", spans_path=d / "replay.jsonl", on_span=print)
        print(r["records"])


def status_of_flush() -> int:
    try:
        cbt.flush(100)
    except cbt.Error as e:
        if e.status == _cbt.ERR_TIMEOUT:
            return 1
        raise
    return 0


def returns_inside_span() -> int:
    # cbt.span's __exit__ never swallows: no "missing return statement"
    with cbt.span("cb.schedule", session_id="req-1", kind="server", n=1) as s:
        s.set(ok=True)
        return 1


def returns_inside_stream() -> int:
    with cbt.CpuStream(capacity=16) as st:
        st.enqueue(lambda: None)
        st.sync()
        cbt.publish_on_stream(st, "mp.store.end", "req-1", pair=0, engine_id=0)
        return st.stats()["items_enqueued"]


def returns_inside_tracer() -> float:
    with cbt.tracer(queue_capacity=1024, enabled=True) as t:
        return 1.0 if t.final_metrics is None else 0.0


def contexts() -> str:
    ctx = cbt.context_begin(None, "req-1")
    parent = cbt.extract(ctx.traceparent) if ctx.span_id != "0" * 16 else ctx
    with cbt.span("cb.lookup.rpc", parent=parent) as s:
        header = cbt.inject()
        return header + cbt.inject(s) + s.context.trace_id


def refused() -> None:
    cbt.init(bogus=1)  # E: call-arg
    cbt.init(enabled="false")  # E: arg-type
    cbt.init(otlp_protocol="http")  # E: arg-type
    cbt.publish(3.5, "req-1")  # E: arg-type
    cbt.publish("mp.store.start", "req-1", engine_id={0: 1})  # E: arg-type
    cbt.span("x", kind="sideways")  # E: arg-type
    cbt.CpuStream().enqueue(1)  # E: arg-type
    cbt.replay(3)  # E: arg-type
