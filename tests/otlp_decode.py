#!/usr/bin/env python3
"""tests/otlp_decode.py — cbt's OTLP bytes read by the official decoder.

    python otlp_decode.py <path of the test_otlp_encode binary>
    python otlp_decode.py --metrics <path of the test_otlp_metrics binary>

Runs `test_otlp_encode --emit <dir>/spans.pb <dir>/spans.json <dir>/spans.otlp.jsonl`, then
  1. decodes spans.pb with the official opentelemetry-proto package
     (ExportTraceServiceRequest) and compares it, field by field and span by
     span, with the values below: the fixed set of tests/test_otlp_encode.c
     (emit_resource, emit_spans), written out here independently, span
     events (Span.events, dropped_events_count) included;
  2. checks the bytes are protobuf's canonical encoding of that message
     (the same bytes the official serializer writes);
  3. reads spans.json as OTLP/JSON: ids lowercase hex, int64 values as
     strings, then (hex ids turned into base64, which is what the generic
     proto3 JSON mapping expects for bytes) parses it with
     google.protobuf.json_format.Parse into ExportTraceServiceRequest, which
     refuses unknown field names, and compares it with the protobuf decode;
  4. reads spans.otlp.jsonl, the same spans through the OTLP JSON file sink
     (the collector file exporter's format): each line alone parsed by
     json_format into an ExportTraceServiceRequest with the resource and
     scope, the lines' spans in order equal to the protobuf's.

With --metrics it runs `test_otlp_metrics --emit ...` instead and does the
same three steps for ExportMetricsServiceRequest: the fixed snapshot of
tests/test_otlp_metrics.c (emit_set), written out below (METRIC_*), every
counter a cumulative monotonic Sum, every histogram a cumulative Histogram
with its buckets, bounds, sum/min/max and exemplars; then cbt's own health,
the cbt.* instruments (emit_self's fixed figures, SELF_*: Sums and Gauges,
attributes, doubles in seconds). Then it runs `test_otlp_metrics
--emit-workload ...`, a known workload through the real tracer and exporter
(run_workload), and checks that the last metrics request it sent, decoded
here, carries the counts the workload implies (WORKLOAD), in protobuf and,
parsed by json_format, in OTLP/JSON.

Exit 0: pass; 1: a difference (printed); 77: the package is not importable.
scripts/run-pytest-venv.sh runs it with the venv scripts/pydeps.sh makes.
"""
import base64
import json
import os
import re
import subprocess
import sys
import tempfile

try:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
    from opentelemetry.proto.metrics.v1 import metrics_pb2
except Exception as e:  # ImportError, or a protobuf runtime that does not fit
    print(f"SKIP: opentelemetry-proto is not importable with {sys.executable}: {e!r}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- the fixed set, as test_otlp_encode.c documents it -------------------------------

T0 = 1700000000000000000
SERVER, INTERNAL, CLIENT, PRODUCER, CONSUMER = 2, 1, 3, 4, 5
UNSET, OK, ERROR = 0, 1, 2


def seq(first, n):
    return bytes((first + i) & 0xFF for i in range(n))


S, I, D, B = "string_value", "int_value", "double_value", "bool_value"

RESOURCE = [
    ("service.name", S, "cbt-test"),
    ("service.instance.id", S, "00000000-0000-4000-8000-000000000001"),
    ("host.name", S, "emit-host"),
    ("process.pid", I, 4242),
    ("cbt.gpu.name", S, "NVIDIA H200"),
    ("deployment.environment", S, "ci"),
    ("team", S, "kv"),
]

TRACE = seq(0x01, 16)
SPANS = [
    dict(trace_id=TRACE, span_id=seq(0xA1, 8), parent=b"", flags=1, name="request",
         kind=SERVER, start=T0, end=T0 + 5_000_000, status=OK, dropped=0,
         attrs=[("session_id", S, "sess-0001"), ("hit_tokens", I, 256),
                ("requested_tokens", I, 512), ("hit_rate", D, 0.5)]),
    dict(trace_id=TRACE, span_id=seq(0xB1, 8), parent=seq(0xA1, 8), flags=1, name="mp.store",
         kind=INTERNAL, start=T0 + 1000, end=T0 + 2_000_000, status=UNSET, dropped=0,
         attrs=[("session_id", S, "0123456789abcdefghijklmnopqrstuvwxyzABCD"),
                ("stored_count", I, -7), ("device", S, "cuda:0"), ("worker", B, True),
                ("num_tokens", I, 0)]),
    dict(trace_id=TRACE, span_id=seq(0xC1, 8), parent=seq(0xA1, 8), flags=0, name="mp.retrieve",
         kind=CLIENT, start=T0 + 3000, end=T0 + 4_000_000, status=ERROR, dropped=3,
         attrs=[("found_count", I, 2**63 - 1), ("user_value", I, -(2**63)), ("gbps", D, 1e-300),
                ("cbt.incomplete", B, True)]),
    dict(trace_id=TRACE, span_id=seq(0xD1, 8), parent=seq(0xC1, 8), flags=1, name="cb.scatter",
         kind=PRODUCER, start=T0 + 5000, end=T0 + 6000, status=UNSET, dropped=0,
         attrs=[("device", S, "gpu\ufffd\ufffd0"), ("note", S, 'h\u00e9llo \u2713 "q" \\ \n'),
                ("tail", S, "ab\ufffd\ufffd"), ("empty", S, ""), ("flag", B, False),
                ("ratio", D, -2.25)]),
    dict(trace_id=seq(0xF0, 16), span_id=seq(0xE1, 8), parent=seq(0x11, 8), flags=0,
         name="cb.l2_load", kind=CONSUMER, start=T0 + 7000, end=T0 + 7000, status=OK, dropped=0,
         attrs=[], events=[dict(time=0, name="mark", attrs=[], dropped=0)]),
    # LMCache 0.5.6's timeout span: an `exception` span event (and one more)
    dict(trace_id=TRACE, span_id=seq(0xF1, 8), parent=seq(0xA1, 8), flags=1, name="timeout",
         kind=INTERNAL, start=T0 + 8000, end=T0 + 8000, status=ERROR, dropped=0,
         attrs=[("session_id", S, "sess-0001"), ("count", I, 7)],
         events=[dict(time=T0 + 8000, name="exception", dropped=0,
                      attrs=[("exception.type", S, "TimeoutError"),
                             ("exception.message", S, "retrieve timed out after 30 s"),
                             ("exception.stacktrace", S,
                              'Traceback (most recent call last):\n  File "x.py", line 1\n'
                              "TimeoutError")]),
                 dict(time=T0 + 8500, name="retry", dropped=1,
                      attrs=[("attempt", I, 2), ("backoff_s", D, 0.5), ("final", B, False)])],
         dropped_events=2),
]


def cbt_version():
    """The version the build gave CBT_VERSION_STRING: project(cbt VERSION ...)."""
    with open(os.path.join(HERE, "..", "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r'project\(cbt VERSION ([0-9.]+)', f.read())
    if not m:
        sys.exit("otlp_decode.py: no 'project(cbt VERSION ...)' in CMakeLists.txt")
    return m.group(1)


# ---- comparison -----------------------------------------------------------------------

errors = []


def check(cond, what):
    if not cond:
        errors.append(what)
    return cond


def check_eq(got, want, what):
    return check(got == want, f"{what}: got {got!r}, want {want!r}")


def check_attrs(kvs, want, where):
    check_eq(len(kvs), len(want), f"{where}: number of attributes")
    for i, (kv, (key, kind, value)) in enumerate(zip(kvs, want)):
        w = f"{where} attribute {i} ({key})"
        check_eq(kv.key, key, f"{w} key")
        check_eq(kv.value.WhichOneof("value"), kind, f"{w} value type")
        check_eq(getattr(kv.value, kind), value, f"{w} value")


def check_request(req, version):
    check_eq(len(req.resource_spans), 1, "resource_spans")
    rs = req.resource_spans[0]
    check(rs.HasField("resource"), "resource present")
    check_attrs(rs.resource.attributes, RESOURCE, "resource")
    check_eq(rs.resource.dropped_attributes_count, 0, "resource dropped_attributes_count")
    check_eq(rs.schema_url, "", "resource schema_url")
    check_eq(len(rs.scope_spans), 1, "scope_spans")
    ss = rs.scope_spans[0]
    check_eq(ss.scope.name, "cbt", "scope name")
    check_eq(ss.scope.version, version, "scope version")
    check_eq(len(ss.scope.attributes), 0, "scope attributes")
    check_eq(len(ss.spans), len(SPANS), "number of spans")
    for i, (sp, want) in enumerate(zip(ss.spans, SPANS)):
        w = f"span {i} ({want['name']})"
        check_eq(sp.trace_id, want["trace_id"], f"{w} trace_id")
        check_eq(sp.span_id, want["span_id"], f"{w} span_id")
        check_eq(sp.parent_span_id, want["parent"], f"{w} parent_span_id")
        check_eq(sp.trace_state, "", f"{w} trace_state")
        check_eq(sp.flags, want["flags"], f"{w} flags")
        check_eq(sp.name, want["name"], f"{w} name")
        check_eq(sp.kind, want["kind"], f"{w} kind")
        check_eq(sp.start_time_unix_nano, want["start"], f"{w} start_time_unix_nano")
        check_eq(sp.end_time_unix_nano, want["end"], f"{w} end_time_unix_nano")
        check_attrs(sp.attributes, want["attrs"], w)
        check_eq(sp.dropped_attributes_count, want["dropped"], f"{w} dropped_attributes_count")
        events = want.get("events", [])
        check_eq(len(sp.events), len(events), f"{w} events")
        for j, (ev, we) in enumerate(zip(sp.events, events)):
            v = f"{w} event {j} ({we['name']})"
            check_eq(ev.time_unix_nano, we["time"], f"{v} time_unix_nano")
            check_eq(ev.name, we["name"], f"{v} name")
            check_attrs(ev.attributes, we["attrs"], v)
            check_eq(ev.dropped_attributes_count, we["dropped"], f"{v} dropped_attributes_count")
        check_eq(sp.dropped_events_count, want.get("dropped_events", 0),
                 f"{w} dropped_events_count")
        check_eq(len(sp.links), 0, f"{w} links")
        check_eq(sp.HasField("status"), want["status"] != UNSET, f"{w} status present")
        check_eq(sp.status.code, want["status"], f"{w} status code")
        check_eq(sp.status.message, "", f"{w} status message")


HEX = {"traceId": 32, "spanId": 16, "parentSpanId": 16}


def hex_ids_to_base64(doc):
    """OTLP/JSON writes ids as hex; json_format expects base64 for bytes."""
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for key, digits in HEX.items():
                    if key not in sp:
                        continue
                    v = sp[key]
                    if check(isinstance(v, str) and re.fullmatch("[0-9a-f]{%d}" % digits, v),
                             f"JSON {key} {v!r} is not {digits} lowercase hex digits"):
                        sp[key] = base64.b64encode(bytes.fromhex(v)).decode()


def int_values(doc):
    """Every intValue in the JSON document, as written."""
    out = []

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "intValue":
                    out.append(v)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    return out


# ---- metrics: the fixed snapshot, as test_otlp_metrics.c documents it -----------------

M_SNAP = T0 + 60_000_000_000
# (name, unit) of every counter, in cbt/blend_metrics.h order
COUNTERS = [
    ("lmcache_blend.lookup_requests", "{request}"),
    ("lmcache_blend.lookup_requested_tokens", "{token}"),
    ("lmcache_blend.lookup_hit_tokens", "{token}"),
    ("lmcache_blend.lookup_prefix_hit_tokens", "{token}"),
    ("lmcache_blend.lookup_non_prefix_hit_tokens", "{token}"),
    ("lmcache_blend.lookup_fingerprint_hits", "{match}"),
    ("lmcache_blend.lookup_storage_hits", "{chunk}"),
    ("lmcache_blend.lookup_stale_chunks", "{chunk}"),
    ("lmcache_blend.retrieve_requests", "{request}"),
    ("lmcache_blend.retrieve_failures", "{request}"),
    ("lmcache_blend.retrieve_noops", "{request}"),
    ("lmcache_blend.scatter_tokens", "{token}"),
    ("lmcache_blend.scatter_slot_writes", "{slot}"),
    ("lmcache_blend.shifted_tokens", "{token}"),
    ("lmcache_blend.l2_load_chunks", "{chunk}"),
    ("lmcache_blend.l2_load_bytes", "By"),
    ("lmcache_blend.chunks_evicted", "{chunk}"),
    ("lmcache_blend.fingerprints_registered", "{fingerprint}"),
]
HISTOGRAMS = [
    "lmcache_blend.lookup_duration",
    "lmcache_blend.fingerprint_match_duration",
    "lmcache_blend.coordinator_match_duration",
    "lmcache_blend.sparse_prefetch_duration",
    "lmcache_blend.l2_load_duration",
    "lmcache_blend.retrieve_duration",
    "lmcache_blend.scatter_duration",
]
BOUNDS = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
          2500.0, 10000.0]


def counter_value(i, name):
    if name == "lmcache_blend.chunks_evicted":
        return 0
    if name == "lmcache_blend.l2_load_bytes":
        return 5_000_000_000_000
    return (i + 1) * 1000 + 7


LOOKUP_VALUES = [0.05, 0.1, 0.07, 1.0, 10000.0, 10000.5, 0.0]


def lookup_sum():
    s = 0.0
    for v in LOOKUP_VALUES:  # the C side's order of additions
        s += v
    return s


def ex(value, end, trace0, span0, rid):
    return dict(value=value, time=end, trace_id=seq(trace0, 16), span_id=seq(span0, 8), rid=rid)


HIST_POINTS = {
    "lmcache_blend.lookup_duration": dict(
        count=7, sum=lookup_sum(), min=0.0, max=10000.5,
        buckets=[2, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1],
        exemplars=[ex(0.05, T0 + 1000, 0x01, 0xA1, "req-1"),
                   ex(1.0, T0 + 3000, 0x21, 0xC1, "req-3"),
                   ex(10000.5, T0 + 2000, 0x01, 0xB1, None)]),
    "lmcache_blend.scatter_duration": dict(
        count=1, sum=3.0, min=3.0, max=3.0,
        buckets=[0, 0, 0, 0, 0, 0, 1] + [0] * 10,
        exemplars=[ex(3.0, T0 + 4000, 0x31, 0xD1, "req-4")]),
}
EMPTY_POINT = dict(count=0, sum=0.0, min=None, max=None, buckets=[0] * 17, exemplars=[])


def header_descriptions():
    """name -> description, read from cbt/blend_metrics.h's X-macros."""
    with open(os.path.join(HERE, "..", "include", "cbt", "blend_metrics.h"), encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    out = {}
    for m in re.finditer(r'X\(\s*\w+\s*,\s*"([^"]+)"\s*,\s*("(?:[^"]*)"\s*,\s*)?"([^"]*)"\s*\)',
                         text):
        out[m.group(1)] = m.group(3)
    return out


def check_metrics_request(req, version):
    check_eq(len(req.resource_metrics), 1, "resource_metrics")
    rm = req.resource_metrics[0]
    check(rm.HasField("resource"), "resource present")
    check_attrs(rm.resource.attributes, RESOURCE, "resource")
    check_eq(rm.schema_url, "", "resource schema_url")
    check_eq(len(rm.scope_metrics), 1, "scope_metrics")
    sm = rm.scope_metrics[0]
    check_eq(sm.scope.name, "cbt", "scope name")
    check_eq(sm.scope.version, version, "scope version")
    check_eq(len(sm.metrics), len(COUNTERS) + len(HISTOGRAMS) + len(SELF), "number of metrics")
    descs = header_descriptions()
    check_eq(len(descs), len(COUNTERS) + len(HISTOGRAMS), "descriptions found in the header")
    cumulative = metrics_pb2.AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    for i, (m, (name, unit)) in enumerate(zip(sm.metrics, COUNTERS)):
        w = f"counter {i} ({name})"
        check_eq(m.name, name, f"{w} name")
        check_eq(m.unit, unit, f"{w} unit")
        check_eq(m.description, descs.get(name), f"{w} description")
        check_eq(m.WhichOneof("data"), "sum", f"{w} data")
        check_eq(m.sum.aggregation_temporality, cumulative, f"{w} temporality")
        check_eq(m.sum.is_monotonic, True, f"{w} is_monotonic")
        check_eq(len(m.sum.data_points), 1, f"{w} data points")
        p = m.sum.data_points[0]
        check_eq(p.WhichOneof("value"), "as_int", f"{w} value type")
        check_eq(p.as_int, counter_value(i, name), f"{w} value")
        check_eq(p.start_time_unix_nano, T0, f"{w} start")
        check_eq(p.time_unix_nano, M_SNAP, f"{w} time")
        check_eq(len(p.attributes) + len(p.exemplars) + p.flags, 0, f"{w} extras")
    for m, name in zip(sm.metrics[len(COUNTERS):], HISTOGRAMS):
        w = f"histogram {name}"
        want = HIST_POINTS.get(name, EMPTY_POINT)
        check_eq(m.name, name, f"{w} name")
        check_eq(m.unit, "ms", f"{w} unit")
        check_eq(m.description, descs.get(name), f"{w} description")
        check_eq(m.WhichOneof("data"), "histogram", f"{w} data")
        check_eq(m.histogram.aggregation_temporality, cumulative, f"{w} temporality")
        check_eq(len(m.histogram.data_points), 1, f"{w} data points")
        p = m.histogram.data_points[0]
        check_eq(p.start_time_unix_nano, T0, f"{w} start")
        check_eq(p.time_unix_nano, M_SNAP, f"{w} time")
        check_eq(p.count, want["count"], f"{w} count")
        check(p.HasField("sum"), f"{w} sum present")
        check_eq(p.sum, want["sum"], f"{w} sum")
        check_eq(list(p.bucket_counts), want["buckets"], f"{w} bucket_counts")
        check_eq(sum(p.bucket_counts), p.count, f"{w} buckets add up to count")
        check_eq(list(p.explicit_bounds), BOUNDS, f"{w} explicit_bounds")
        for k in ("min", "max"):
            check_eq(p.HasField(k), want[k] is not None, f"{w} {k} present")
            if want[k] is not None:
                check_eq(getattr(p, k), want[k], f"{w} {k}")
        check_eq(len(p.exemplars), len(want["exemplars"]), f"{w} exemplars")
        for j, (e, x) in enumerate(zip(p.exemplars, want["exemplars"])):
            v = f"{w} exemplar {j}"
            check_eq(e.WhichOneof("value"), "as_double", f"{v} value type")
            check_eq(e.as_double, x["value"], f"{v} value")
            check_eq(e.time_unix_nano, x["time"], f"{v} time")
            check_eq(e.trace_id, x["trace_id"], f"{v} trace_id")
            check_eq(e.span_id, x["span_id"], f"{v} span_id")
            check_attrs(e.filtered_attributes,
                        [("request_id", S, x["rid"])] if x["rid"] else [], v)
    check_self_metrics(sm.metrics[len(COUNTERS) + len(HISTOGRAMS):], SELF_VALUES, T0, M_SNAP,
                       "fixed set")


# ---- cbt's own health: the cbt.* instruments (test_otlp_metrics.c, emit_self) ------------
# (name, unit, kind, attribute key) in the order they are sent; kind "sum" is
# a cumulative monotonic Sum of ints, "gauge" a Gauge of ints, "gauge_s" a
# Gauge of doubles (seconds)
SELF_TRACER = [
    ("cbt.events.published", "{event}", "sum", None),
    ("cbt.events.dropped", "{event}", "sum", "cbt.drop.reason"),
    ("cbt.events.truncated_values", "{value}", "sum", None),
    ("cbt.spans.started", "{span}", "sum", None),
    ("cbt.spans.ended", "{span}", "sum", None),
    ("cbt.spans.dropped", "{span}", "sum", None),
    ("cbt.spans.unsampled", "{span}", "sum", None),
    ("cbt.spans.lost", "{span}", "sum", None),
    ("cbt.harvester.lag", "s", "gauge_s", None),
    ("cbt.harvester.max_lag", "s", "gauge_s", None),
    ("cbt.harvester.wakeups", "{wakeup}", "sum", None),
]
SELF_EXPORTER = [
    ("cbt.exporter.queue.size", "{span}", "gauge", None),
    ("cbt.exporter.queue.capacity", "{span}", "gauge", None),
    ("cbt.exporter.spans.exported", "{span}", "sum", None),
    ("cbt.exporter.spans.dropped", "{span}", "sum", None),
    ("cbt.exporter.retries", "{retry}", "sum", None),
    ("cbt.exporter.failures", "{export}", "sum", "error.type"),
]
SELF = SELF_TRACER + SELF_EXPORTER
# name -> value, or {attribute value: value}, in that order
SELF_VALUES = {
    "cbt.events.published": 1001,
    "cbt.events.dropped": {"queue_full": 11, "rejected": 12, "session_too_long": 13,
                           "stream_mark_lost": 14},
    "cbt.events.truncated_values": 15,
    "cbt.spans.started": 2001,
    "cbt.spans.ended": 1990,
    "cbt.spans.dropped": 21,
    "cbt.spans.unsampled": 22,
    "cbt.spans.lost": 23,
    "cbt.harvester.lag": 0.0015,
    "cbt.harvester.max_lag": 0.25,
    "cbt.harvester.wakeups": 31,
    "cbt.exporter.queue.size": 7,
    "cbt.exporter.queue.capacity": 32768,
    "cbt.exporter.spans.exported": 1900,
    "cbt.exporter.spans.dropped": 41,
    "cbt.exporter.retries": 42,
    "cbt.exporter.failures": {"transport": 51, "3xx": 53, "4xx": 54, "5xx": 55},
}
# the known workload (test_otlp_metrics.c, run_workload): what its last
# metrics request carries; None: present, its value up to timing
WORKLOAD = {
    "cbt.events.published": 16,
    "cbt.events.dropped": {"queue_full": 0, "rejected": 2, "session_too_long": 1,
                           "stream_mark_lost": 0},
    "cbt.events.truncated_values": 1,
    "cbt.spans.started": 8,
    "cbt.spans.ended": 8,
    "cbt.spans.dropped": 0,
    "cbt.spans.unsampled": 0,
    "cbt.spans.lost": 0,
    "cbt.harvester.lag": None,
    "cbt.harvester.max_lag": None,
    "cbt.harvester.wakeups": None,
    "cbt.exporter.queue.size": 0,
    "cbt.exporter.queue.capacity": 1000,
    "cbt.exporter.spans.exported": 8,
    "cbt.exporter.spans.dropped": 0,
    "cbt.exporter.retries": 1,
    "cbt.exporter.failures": {"transport": 0, "3xx": 0, "4xx": 1, "5xx": 0},
}


def check_self_metrics(metrics, values, start, time, where):
    """The cbt.* instruments `metrics` (a list of Metric) against SELF and
    `values`; `start` / `time` the Sums' start and every point's time (None:
    read from the first point, and only checked to be equal everywhere)."""
    cumulative = metrics_pb2.AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    check_eq([m.name for m in metrics], [n for n, _, _, _ in SELF], f"{where}: cbt.* names, in order")
    first = metrics[0].sum.data_points[0] if metrics and metrics[0].HasField("sum") else None
    if start is None and first is not None:
        start, time = first.start_time_unix_nano, first.time_unix_nano
        check(start > T0 and time > start, f"{where}: start {start} / time {time} are not now")
    for m, (name, unit, kind, key) in zip(metrics, SELF):
        w = f"{where} {name}"
        check_eq(m.unit, unit, f"{w} unit")
        check(len(m.description) > 10, f"{w} has no description")
        data = "sum" if kind == "sum" else "gauge"
        check_eq(m.WhichOneof("data"), data, f"{w} data")
        if kind == "sum":
            check_eq(m.sum.aggregation_temporality, cumulative, f"{w} temporality")
            check_eq(m.sum.is_monotonic, True, f"{w} is_monotonic")
        points = getattr(m, data).data_points
        want = values[name]
        got = {}
        for p in points:
            check_eq(p.WhichOneof("value"), "as_double" if kind == "gauge_s" else "as_int",
                     f"{w} value type")
            check_eq(p.start_time_unix_nano, start if kind == "sum" else 0, f"{w} start")
            check_eq(p.time_unix_nano, time, f"{w} time")
            check_eq(len(p.exemplars) + p.flags, 0, f"{w} extras")
            v = p.as_double if kind == "gauge_s" else p.as_int
            if key is None:
                check_eq(len(p.attributes), 0, f"{w} attributes")
                got = v
            else:
                check_eq([(a.key, a.value.WhichOneof("value")) for a in p.attributes],
                         [(key, S)], f"{w} attribute")
                if p.attributes:
                    got[p.attributes[0].value.string_value] = v
        if key is None:
            check_eq(len(points), 1, f"{w} data points")
        if want is None:
            check(isinstance(got, (int, float)) and got >= 0, f"{w}: {got!r} is not >= 0")
        elif isinstance(want, dict):
            check_eq(list(got.items()), list(want.items()), f"{w} points")
        else:
            check_eq(got, want, f"{w} value")
    return start, time


def metrics_ids_to_base64(doc):
    for rm in doc.get("resourceMetrics", []):
        for sm in rm.get("scopeMetrics", []):
            for m in sm.get("metrics", []):
                for p in m.get("histogram", {}).get("dataPoints", []):
                    for e in p.get("exemplars", []):
                        for key, digits in (("traceId", 32), ("spanId", 16)):
                            if key not in e:
                                continue
                            v = e[key]
                            if check(isinstance(v, str)
                                     and re.fullmatch("[0-9a-f]{%d}" % digits, v),
                                     f"JSON exemplar {key} {v!r} is not {digits} lowercase hex"):
                                e[key] = base64.b64encode(bytes.fromhex(v)).decode()


def main_metrics(binary):
    version = cbt_version()
    with tempfile.TemporaryDirectory(prefix="cbt-otlp-") as d:
        pb_path, js_path = os.path.join(d, "metrics.pb"), os.path.join(d, "metrics.json")
        r = subprocess.run([binary, "--emit", pb_path, js_path], capture_output=True, text=True,
                           timeout=60)
        if r.returncode != 0:
            print(f"FAIL: {binary} --emit exited {r.returncode}: {r.stderr.strip()}")
            return 1
        with open(pb_path, "rb") as f:
            data = f.read()
        with open(js_path, "rb") as f:
            js_text = f.read().decode("utf-8")

    req = metrics_service_pb2.ExportMetricsServiceRequest()
    try:
        req.ParseFromString(data)
    except Exception as e:
        print(f"FAIL: the official decoder refused our protobuf: {e!r}")
        return 1
    check_metrics_request(req, version)
    check(req.SerializeToString(deterministic=True) == data,
          "protobuf bytes differ from the official serializer's for the same message")

    doc = json.loads(js_text)
    check_json_types(doc)
    metrics_ids_to_base64(doc)
    from_json = metrics_service_pb2.ExportMetricsServiceRequest()
    try:
        json_format.Parse(json.dumps(doc), from_json)
    except Exception as e:
        print(f"FAIL: json_format.Parse refused our OTLP/JSON: {e!r}")
        return 1
    if not check(from_json == req, "the JSON and the protobuf decode to different messages"):
        print("--- from protobuf:\n" + str(req) + "--- from JSON:\n" + str(from_json))

    n_workload = check_workload(binary)

    if errors:
        for e in errors:
            print("FAIL:", e)
        return 1
    import google.protobuf
    import opentelemetry.proto.version as v
    print(f"PASS: {len(req.resource_metrics[0].scope_metrics[0].metrics)} metrics, "
          f"{len(data)} protobuf bytes and {len(js_text)} JSON bytes match; the workload's "
          f"{n_workload} cbt.* instruments carry its counts "
          f"(opentelemetry-proto {v.__version__}, protobuf {google.protobuf.__version__})")
    return 0


def check_json_types(doc):
    """OTLP/JSON's own rules: 64-bit integers as decimal strings, the
    temporality enum as an integer."""
    for m in doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]:
        data = m.get("sum", m.get("histogram", m.get("gauge", {})))
        pts = data.get("dataPoints", [])
        for p in pts:
            for key in ("startTimeUnixNano", "timeUnixNano", "asInt", "count"):
                if key in p:
                    check(isinstance(p[key], str) and re.fullmatch(r"-?[0-9]+", p[key]),
                          f"JSON {m['name']} {key} {p[key]!r} is not a decimal string")
            for b in p.get("bucketCounts", []):
                check(isinstance(b, str), f"JSON {m['name']} bucketCounts {b!r} is not a string")
        if "gauge" in m:
            check("aggregationTemporality" not in m["gauge"], f"JSON {m['name']} gauge has a "
                  "temporality")
            continue
        t = data.get("aggregationTemporality")
        check(t == 2, f"JSON {m['name']} aggregationTemporality {t!r} is not the integer 2")


def check_workload(binary):
    """The known workload's last metrics request (protobuf, then OTLP/JSON
    through json_format) against WORKLOAD. Returns the instruments seen."""
    with tempfile.TemporaryDirectory(prefix="cbt-otlp-") as d:
        pb_path, js_path = os.path.join(d, "workload.pb"), os.path.join(d, "workload.json")
        r = subprocess.run([binary, "--emit-workload", pb_path, js_path], capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0:
            errors.append(f"{binary} --emit-workload exited {r.returncode}: {r.stderr.strip()}")
            return 0
        with open(pb_path, "rb") as f:
            data = f.read()
        with open(js_path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    req = metrics_service_pb2.ExportMetricsServiceRequest()
    try:
        req.ParseFromString(data)
    except Exception as e:
        errors.append(f"the official decoder refused the workload's protobuf: {e!r}")
        return 0
    check(req.SerializeToString(deterministic=True) == data,
          "workload: protobuf bytes differ from the official serializer's")
    check_eq(len(req.resource_metrics), 1, "workload resource_metrics")
    sm = req.resource_metrics[0].scope_metrics[0]
    check_eq(sm.scope.name, "cbt", "workload scope")
    check_self_metrics(sm.metrics, WORKLOAD, None, None, "workload (protobuf)")
    check_json_types(doc)
    from_json = metrics_service_pb2.ExportMetricsServiceRequest()
    try:
        json_format.Parse(json.dumps(doc), from_json)
    except Exception as e:
        errors.append(f"json_format.Parse refused the workload's OTLP/JSON: {e!r}")
        return 0
    check_self_metrics(from_json.resource_metrics[0].scope_metrics[0].metrics, WORKLOAD, None,
                       None, "workload (JSON)")
    return len(sm.metrics)


def check_otlp_file(text, req):
    """The sink's file: whole lines, one request each, flushed after spans 1
    and 3 (test_otlp_encode.c, emit_file), so 2, 2 and the rest."""
    if not check(text.endswith("\n"), "the OTLP JSON file does not end with a whole line"):
        return
    lines = text[:-1].split("\n")
    want = [2, 2, len(SPANS) - 4]
    spans = []
    for n, line in enumerate(lines, 1):
        try:
            doc = json.loads(line)
        except ValueError as e:
            check(False, f"OTLP JSON file line {n} is not JSON on its own: {e}")
            return
        hex_ids_to_base64(doc)
        one = trace_service_pb2.ExportTraceServiceRequest()
        try:
            json_format.Parse(json.dumps(doc), one)
        except Exception as e:
            check(False, f"json_format.Parse refused OTLP JSON file line {n}: {e!r}")
            return
        check(len(one.resource_spans) == 1 and len(one.resource_spans[0].scope_spans) == 1,
              f"OTLP JSON file line {n}: not one ResourceSpans with one ScopeSpans")
        rs = one.resource_spans[0]
        check(rs.resource == req.resource_spans[0].resource,
              f"OTLP JSON file line {n}: its resource differs from the protobuf's")
        check(rs.scope_spans[0].scope == req.resource_spans[0].scope_spans[0].scope,
              f"OTLP JSON file line {n}: its scope differs from the protobuf's")
        spans.append(list(rs.scope_spans[0].spans))
    check([len(s) for s in spans] == want,
          f"OTLP JSON file: spans per line {[len(s) for s in spans]}, not {want}")
    check([s for line in spans for s in line] == list(req.resource_spans[0].scope_spans[0].spans),
          "OTLP JSON file: its spans, line after line, differ from the protobuf's")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--metrics":
        return main_metrics(sys.argv[2])
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} [--metrics] <test_otlp_encode | test_otlp_metrics binary>")
        return 2
    version = cbt_version()
    with tempfile.TemporaryDirectory(prefix="cbt-otlp-") as d:
        pb_path, js_path = os.path.join(d, "spans.pb"), os.path.join(d, "spans.json")
        file_path = os.path.join(d, "spans.otlp.jsonl")
        r = subprocess.run([sys.argv[1], "--emit", pb_path, js_path, file_path],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            print(f"FAIL: {sys.argv[1]} --emit exited {r.returncode}: {r.stderr.strip()}")
            return 1
        with open(pb_path, "rb") as f:
            data = f.read()
        with open(js_path, "rb") as f:
            js_text = f.read().decode("utf-8")  # must be UTF-8
        with open(file_path, "rb") as f:
            file_text = f.read().decode("utf-8")

    # 1. protobuf, through the official decoder
    req = trace_service_pb2.ExportTraceServiceRequest()
    try:
        req.ParseFromString(data)
    except Exception as e:
        print(f"FAIL: the official decoder refused our protobuf: {e!r}")
        return 1
    check_request(req, version)

    # 2. canonical bytes
    check(req.SerializeToString(deterministic=True) == data,
          "protobuf bytes differ from the official serializer's for the same message")

    # 3. OTLP/JSON
    doc = json.loads(js_text)
    for iv in int_values(doc):
        check(isinstance(iv, str) and re.fullmatch(r"-?[0-9]+", iv),
              f"JSON intValue {iv!r} is not a decimal string")
    for sp in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("startTimeUnixNano", "endTimeUnixNano"):
            check(isinstance(sp.get(key), str), f"JSON {key} is not a string")
        for ev in sp.get("events", []):
            check(isinstance(ev.get("timeUnixNano"), str), "JSON event timeUnixNano is not a string")
        check(isinstance(sp.get("kind"), int), "JSON kind is not an integer")
    hex_ids_to_base64(doc)
    from_json = trace_service_pb2.ExportTraceServiceRequest()
    try:
        json_format.Parse(json.dumps(doc), from_json)
    except Exception as e:
        print(f"FAIL: json_format.Parse refused our OTLP/JSON: {e!r}")
        return 1
    if check(from_json == req, "the JSON and the protobuf decode to different messages"):
        pass
    else:
        print("--- from protobuf:\n" + str(req) + "--- from JSON:\n" + str(from_json))

    # 4. the OTLP JSON file (the collector file exporter's format): every
    # line alone an ExportTraceServiceRequest json_format parses, each with
    # the resource and scope, the lines' spans together the protobuf's
    check_otlp_file(file_text, req)

    if errors:
        for e in errors:
            print("FAIL:", e)
        return 1
    import google.protobuf
    import opentelemetry.proto.version as v
    print(f"PASS: {len(SPANS)} spans, {len(data)} protobuf bytes and {len(js_text)} JSON bytes "
          f"match (opentelemetry-proto {v.__version__}, protobuf {google.protobuf.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
