#!/usr/bin/env python3
"""tests/grpc_check.py — what the loopback gRPC collector received, checked
against what cbt says it sent.

    grpc_check.py --got COLLECTED.jsonl [--spans CBT_SPANS.jsonl]
                  [--max-request-bytes N] [--allow-duplicates]

COLLECTED.jsonl is tests/grpc_collector.py's log (one JSON object a line:
every request it decoded, with its outcome, and its events). CBT_SPANS.jsonl
is cbt's own span file (cbt_config.jsonl_path; docs/spans.md's schema): the
spans cbt's sinks were handed, the OTLP exporter's included.

Each request's message is read again from its JSON with the official
classes (google.protobuf.json_format.ParseDict into
ExportTraceServiceRequest / ExportMetricsServiceRequest, which refuses an
unknown field). A request the collector accepted (outcome ok or partial) is
"accepted"; its spans must each be in the span file and equal to it, field
by field: trace id, span id, parent, name, kind, start and end, status,
every attribute with its type (int -> int_value, double -> double_value,
bool -> bool_value, string -> string_value; cbt.incomplete = true on an
incomplete span), dropped attribute counts, every span event (name, time,
typed attributes, dropped count) in order, and the dropped event count. A
span id accepted twice is a failure unless --allow-duplicates. Every trace
request carries one ResourceSpans with the scope "cbt"; with
--max-request-bytes no request (as it crossed the wire) is larger.

Prints a summary, one `key value` line each (tests/test_otlp_grpc.c reads
it), then `FAIL: ...` lines for what did not hold; exit 0 when everything
held, 1 otherwise, 77 (SKIP) when the official packages are not importable.
Keys:
  traces.requests / traces.accepted        trace requests received / accepted
  traces.outcome.<OUTCOME>                 trace requests by outcome (ok, partial,
                                           UNAVAILABLE, deadline, killed, ...)
  metrics.requests / metrics.accepted      the same for metrics
  metrics.outcome.<OUTCOME>
  spans.received                           spans in every trace request
  spans.accepted / spans.unique            in accepted requests / distinct ids
  spans.refused                            in trace requests not accepted
  spans.rejected                           partial_success.rejected_spans, summed
  spans.cbt / spans.missing                in the span file / of those never accepted
  spans.unknown / spans.mismatched         accepted but not in the file / not equal to it
  <service>.compression.gzip / .identity   requests by compression (traces, metrics)
  gzip.not_smaller                         gzip requests (either) not smaller on the wire
  wire_bytes.max                           the largest request as it crossed the wire
  traces.bytes.total                       the trace requests' decoded sizes, summed
  timeout_ms.max                           the largest deadline left a request had
  peers                                    distinct client addresses of trace requests
                                           (a new connection, a new port)
  retry.gap_ms                             from the first refused trace request to
                                           the next trace request (-1: none)
  events.<name>                            collector events (ready, goaway, restarted, exit)
  metadata.<key>                           gRPC metadata of the last trace request
  tls.version / tls.client_cn              of the last trace request ("none")
  resource.<key>                           the resource of the last accepted trace request
  metric.<name>                            the last accepted metrics request: a Sum's int
                                           value, a Histogram's count (metric.<name>.count)
"""
import argparse
import json
import sys

try:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
except Exception as e:  # ImportError, or a protobuf runtime that does not fit
    print(f"SKIP: opentelemetry-proto is not importable with {sys.executable}: {e!r}")
    sys.exit(77)

KIND = {"unspecified": 0, "internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
STATUS = {"unset": 0, "ok": 1, "error": 2}
ACCEPTED = ("ok", "partial")


def any_value(v):
    """An AnyValue as (type, value)."""
    which = v.WhichOneof("value")
    return (which, getattr(v, which)) if which else (None, None)


def cbt_value(v):
    """A span-file attribute value as the (type, value) OTLP must carry."""
    if isinstance(v, bool):
        return ("bool_value", v)
    if isinstance(v, int):
        return ("int_value", v)
    if isinstance(v, float):
        return ("double_value", v)
    if isinstance(v, str):
        return ("string_value", v)
    return (None, None)  # null: a value the span could not hold; not encoded


def compare_attrs(where, want, got_kvs, want_dropped, got_dropped, incomplete=False):
    """want: the span file's object; got_kvs: OTLP KeyValues. Returns differences."""
    diffs = []
    got = {}
    for kv in got_kvs:
        if kv.key in got:
            diffs.append(f"{where}: attribute {kv.key!r} twice")
        got[kv.key] = any_value(kv.value)
    exp = {}
    nulls = 0
    for k, v in want.items():
        t = cbt_value(v)
        if t[0] is None:
            nulls += 1
            continue
        exp[k] = t
    if incomplete:
        exp["cbt.incomplete"] = ("bool_value", True)
    for k in sorted(set(exp) | set(got)):
        if k not in got:
            diffs.append(f"{where}: attribute {k!r} missing")
        elif k not in exp:
            diffs.append(f"{where}: attribute {k!r} = {got[k]} is not cbt's")
        elif exp[k] != got[k]:
            diffs.append(f"{where}: attribute {k!r}: cbt {exp[k]}, collector {got[k]}")
    if got_dropped != want_dropped + nulls:
        diffs.append(f"{where}: dropped_attributes_count {got_dropped}, cbt {want_dropped}"
                     f" (+{nulls} not encodable)")
    return diffs


def compare_span(c, p):
    """c: a span-file object; p: an official Span. Returns differences."""
    where = f"span {c['name']} {c['span_id']}"
    d = []

    def eq(what, want, got):
        if want != got:
            d.append(f"{where}: {what}: cbt {want!r}, collector {got!r}")
    eq("trace_id", c["trace_id"], p.trace_id.hex())
    eq("parent_span_id", c["parent_span_id"], p.parent_span_id.hex())
    eq("name", c["name"], p.name)
    eq("kind", KIND[c["kind"]], p.kind)
    eq("start", c["start_ns"], p.start_time_unix_nano)
    eq("end", c["end_ns"], p.end_time_unix_nano)
    eq("status", STATUS[c["status"]], p.status.code)
    d += compare_attrs(where, c["attributes"], p.attributes, c["dropped_attributes"],
                       p.dropped_attributes_count, c.get("incomplete", False))
    eq("events", [e["name"] for e in c["events"]], [e.name for e in p.events])
    for i, (ce, pe) in enumerate(zip(c["events"], p.events)):
        eq(f"event {i} time", ce["time_unix_nano"], pe.time_unix_nano)
        d += compare_attrs(f"{where} event {i} {ce['name']}", ce["attributes"], pe.attributes,
                           ce["dropped_attributes"], pe.dropped_attributes_count)
    eq("dropped_events_count", c["dropped_events"], p.dropped_events_count)
    return d


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--got", required=True)
    ap.add_argument("--spans")
    ap.add_argument("--max-request-bytes", type=int, default=0)
    ap.add_argument("--allow-duplicates", action="store_true")
    a = ap.parse_args(argv)

    fails = []
    out = {}

    def count(key, n=1):
        out[key] = out.get(key, 0) + n

    recs = []
    with open(a.got, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                recs.append(json.loads(line))
            except ValueError as e:
                fails.append(f"collector line {i + 1} is not JSON: {e}")
    reqs = sorted((r for r in recs if r.get("kind") == "request"), key=lambda r: (r["t"], r["n"]))
    for r in recs:
        if r.get("kind") == "event":
            count(f"events.{r['event']}")

    cbt = {}
    if a.spans:
        with open(a.spans, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if line.strip():
                    s = json.loads(line)
                    if s["span_id"] in cbt:
                        fails.append(f"cbt's span file has span {s['span_id']} twice")
                    cbt[s["span_id"]] = s
    out["spans.cbt"] = len(cbt)

    accepted_ids = {}
    peers = set()
    first_refused_t = None
    gap = -1
    last_trace = None
    last_metrics = None
    for key in ("traces.requests", "traces.accepted", "metrics.requests", "metrics.accepted",
                "spans.received", "spans.accepted", "spans.refused", "spans.rejected",
                "spans.unknown", "traces.bytes.total",
                "spans.mismatched", "traces.compression.gzip", "traces.compression.identity",
                "gzip.not_smaller", "wire_bytes.max", "timeout_ms.max"):
        out[key] = 0
    for r in reqs:
        svc = r["service"]
        count(f"{svc}.requests")
        count(f"{svc}.outcome.{r['outcome']}")
        count(f"{svc}.compression.{r['compression']}")
        if r["compression"] == "gzip" and r["wire_bytes"] >= r["bytes"]:
            count("gzip.not_smaller")
        out["wire_bytes.max"] = max(out["wire_bytes.max"], r["wire_bytes"])
        if r.get("timeout_ms") is not None:
            out["timeout_ms.max"] = max(out["timeout_ms.max"], r["timeout_ms"])
        if a.max_request_bytes and r["wire_bytes"] > a.max_request_bytes:
            fails.append(f"request {r['n']} ({svc}) is {r['wire_bytes']} bytes on the wire, "
                         f"over {a.max_request_bytes}")
        ok = r["outcome"] in ACCEPTED
        if ok:
            count(f"{svc}.accepted")
        cls = (metrics_service_pb2.ExportMetricsServiceRequest if svc == "metrics"
               else trace_service_pb2.ExportTraceServiceRequest)
        try:
            msg = json_format.ParseDict(r["request"], cls())
        except json_format.ParseError as e:
            fails.append(f"request {r['n']} ({svc}) is not an {cls.__name__}: {e}")
            continue
        if svc == "metrics":
            if ok:
                last_metrics = msg
            continue
        last_trace = r
        count("traces.bytes.total", r["bytes"])
        peers.add(r["peer"])
        if first_refused_t is None and not ok:
            first_refused_t = r["t"]
        elif first_refused_t is not None and gap < 0:
            gap = int(round((r["t"] - first_refused_t) * 1000))
        if len(msg.resource_spans) != 1:
            fails.append(f"request {r['n']}: {len(msg.resource_spans)} ResourceSpans, not 1")
        for rs in msg.resource_spans:
            if ok:
                out.update({f"resource.{kv.key}": any_value(kv.value)[1]
                            for kv in rs.resource.attributes})
            for ss in rs.scope_spans:
                if ss.scope.name != "cbt":
                    fails.append(f"request {r['n']}: scope {ss.scope.name!r}, not 'cbt'")
                for sp in ss.spans:
                    count("spans.received")
                    if not ok:
                        count("spans.refused")
                        continue
                    count("spans.accepted")
                    sid = sp.span_id.hex()
                    accepted_ids[sid] = accepted_ids.get(sid, 0) + 1
                    if accepted_ids[sid] == 2 and not a.allow_duplicates:
                        fails.append(f"span {sp.name} {sid} accepted twice")
                    if a.spans:
                        if sid not in cbt:
                            count("spans.unknown")
                            fails.append(f"span {sp.name} {sid} accepted but not in cbt's span file")
                            continue
                        diffs = compare_span(cbt[sid], sp)
                        if diffs:
                            count("spans.mismatched")
                            fails += diffs
        if ok:
            count("spans.rejected", r.get("rejected", 0))
    out["spans.unique"] = len(accepted_ids)
    out["spans.missing"] = sum(1 for sid in cbt if sid not in accepted_ids)
    out["peers"] = len(peers)
    out["retry.gap_ms"] = gap
    out["tls.version"] = "none"
    out["tls.client_cn"] = "none"
    if last_trace:
        for k, v in last_trace["metadata"].items():
            out[f"metadata.{k}"] = v
        if last_trace["tls"]:
            out["tls.version"] = last_trace["tls"]["version"] or "none"
            out["tls.client_cn"] = last_trace["tls"]["client_cn"] or "none"
    if last_metrics:
        for rm in last_metrics.resource_metrics:
            for sm in rm.scope_metrics:
                if sm.scope.name != "cbt":
                    fails.append(f"metrics scope {sm.scope.name!r}, not 'cbt'")
                for m in sm.metrics:
                    if m.HasField("sum") and m.sum.data_points:
                        out[f"metric.{m.name}"] = m.sum.data_points[-1].as_int
                    elif m.HasField("histogram") and m.histogram.data_points:
                        out[f"metric.{m.name}.count"] = m.histogram.data_points[-1].count

    for k in sorted(out):
        v = out[k]
        v = str(v).lower() if isinstance(v, bool) else str(v)
        print(k, v.replace("\n", " "))
    for f in fails[:50]:
        print("FAIL:", f)
    if len(fails) > 50:
        print(f"FAIL: ... and {len(fails) - 50} more")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
