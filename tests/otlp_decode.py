#!/usr/bin/env python3
"""tests/otlp_decode.py — cbt's OTLP bytes read by the official decoder.

    python otlp_decode.py <path of the test_otlp_encode binary>

Runs `test_otlp_encode --emit <dir>/spans.pb <dir>/spans.json`, then
  1. decodes spans.pb with the official opentelemetry-proto package
     (ExportTraceServiceRequest) and compares it, field by field and span by
     span, with the values below: the fixed set of tests/test_otlp_encode.c
     (emit_resource, emit_spans), written out here independently;
  2. checks the bytes are protobuf's canonical encoding of that message
     (the same bytes the official serializer writes);
  3. reads spans.json as OTLP/JSON: ids lowercase hex, int64 values as
     strings, then (hex ids turned into base64, which is what the generic
     proto3 JSON mapping expects for bytes) parses it with
     google.protobuf.json_format.Parse into ExportTraceServiceRequest, which
     refuses unknown field names, and compares it with the protobuf decode.

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
         attrs=[]),
]


def cbt_version():
    with open(os.path.join(HERE, "..", "include", "cbt.h"), encoding="utf-8") as f:
        m = re.search(r'#define CBT_VERSION_STRING "([^"]*)"', f.read())
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
        check_eq(len(sp.events), 0, f"{w} events")
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


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} <test_otlp_encode binary>")
        return 2
    version = cbt_version()
    with tempfile.TemporaryDirectory(prefix="cbt-otlp-") as d:
        pb_path, js_path = os.path.join(d, "spans.pb"), os.path.join(d, "spans.json")
        r = subprocess.run([sys.argv[1], "--emit", pb_path, js_path], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            print(f"FAIL: {sys.argv[1]} --emit exited {r.returncode}: {r.stderr.strip()}")
            return 1
        with open(pb_path, "rb") as f:
            data = f.read()
        with open(js_path, "rb") as f:
            js_text = f.read().decode("utf-8")  # must be UTF-8

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
