#!/usr/bin/env python3
"""tests/grpc_collector_selftest.py — the loopback gRPC collector
(tests/grpc_collector.py) and its checker (tests/grpc_check.py) proven with
grpcio's own client, independently of cbt.

    python grpc_collector_selftest.py        (scripts/run-pytest-venv.sh runs it)

Each check starts the collector as tests/test_otlp_grpc.c does (a
subprocess, stdin a pipe, `PORT <n>` read from stdout) and talks to it with
the TraceService / MetricsService stubs generated in opentelemetry-proto:
every scripted answer reaches a real gRPC client as the status, the
google.rpc.RetryInfo, the partial_success or the dead connection it
promises; gzip and metadata are recorded; GOAWAY and a killed server are
survived by a client that reconnects; the 4 MiB receive limit is gRPC's;
TLS with the test CA, and a required client certificate, are enforced; the
collector ends by itself (its lifetime, stdin's EOF). The checker is shown
to pass spans that match a span file and to fail on each kind of
difference it promises to see. Prints `ok - <check>` / `FAIL - <check>`
and closes with `N passed, N failed`; exit 0 only when every check passed,
77 (SKIP) when the packages are not importable.
"""
import base64
import copy
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # before grpc loads: no INFO lines
try:
    import grpc
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
    from opentelemetry.proto.trace.v1 import trace_pb2
except Exception as e:
    print(f"SKIP: grpcio / grpcio-status / opentelemetry-proto not importable with {sys.executable}: {e!r}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
COLLECTOR = os.path.join(HERE, "grpc_collector.py")
CHECK = os.path.join(HERE, "grpc_check.py")
TMP = tempfile.mkdtemp(prefix="cbt-grpc-selftest-")
STARTED = []  # every collector we started, so none outlives us


class Collector:
    def __init__(self, *args, out="out.jsonl", port=0, stdin_eof=True):
        self.out = os.path.join(TMP, out)
        cmd = [sys.executable, COLLECTOR, "serve", "--out", self.out, "--lifetime", "60"]
        if port:
            cmd += ["--port", str(port)]
        if stdin_eof:
            cmd.append("--exit-on-stdin-eof")
        self.p = subprocess.Popen(cmd + list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        STARTED.append(self.p)
        r, _, _ = select.select([self.p.stdout], [], [], 30)
        line = self.p.stdout.readline().decode() if r else ""
        if not line.startswith("PORT "):
            raise AssertionError(f"the collector did not say its port: {line!r}, rc {self.p.poll()}")
        self.port = int(line.split()[1])
        self.target = f"127.0.0.1:{self.port}"

    def stop(self):
        if self.p.stdin and not self.p.stdin.closed:
            self.p.stdin.close()
        return self.p.wait(10)

    def log(self):
        with open(self.out) as f:
            return [json.loads(l) for l in f if l.strip()]

    def requests(self):
        return sorted((r for r in self.log() if r["kind"] == "request"), key=lambda r: r["n"])


def traces_stub(target, creds=None):
    ch = grpc.secure_channel(target, creds) if creds else grpc.insecure_channel(target)
    return trace_service_pb2_grpc.TraceServiceStub(ch), ch


def small_request(name="s", n=1, pad=0, first_id=0):
    req = trace_service_pb2.ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    ss.scope.name = "cbt"
    for i in range(first_id, first_id + n):
        sp = ss.spans.add()
        sp.name = name + "x" * pad
        sp.span_id = i.to_bytes(8, "big")
        sp.trace_id = bytes(16)
    return req


def code_of(fn):
    try:
        fn()
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


# ---- the checks ------------------------------------------------------------------------

def check_scripted_answers():
    c = Collector("--script", "UNAVAILABLE*2,RESOURCE_EXHAUSTED@300,RESOURCE_EXHAUSTED,"
                  "INVALID_ARGUMENT,partial=2:too old,stall=3000,ok", out="answers.jsonl")
    stub, ch = traces_stub(c.target)
    req = small_request(n=3)
    codes = [code_of(lambda: stub.Export(req, timeout=5)) for _ in range(2)]
    expect(codes == [grpc.StatusCode.UNAVAILABLE] * 2, f"UNAVAILABLE*2: {codes}")
    try:
        stub.Export(req, timeout=5)
        raise AssertionError("RESOURCE_EXHAUSTED@300 answered OK")
    except grpc.RpcError as e:
        expect(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, f"code {e.code()}")
        st = rpc_status.from_call(e)
        expect(st is not None and len(st.details) == 1, "no google.rpc.Status with one detail")
        ri = error_details_pb2.RetryInfo()
        expect(st.details[0].Unpack(ri), f"the detail is {st.details[0].type_url}, not RetryInfo")
        expect(ri.retry_delay.ToMilliseconds() == 300, f"delay {ri.retry_delay}")
    try:
        stub.Export(req, timeout=5)
        raise AssertionError("RESOURCE_EXHAUSTED answered OK")
    except grpc.RpcError as e:
        expect(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, f"code {e.code()}")
        expect(rpc_status.from_call(e) is None, "plain RESOURCE_EXHAUSTED carries details")
    expect(code_of(lambda: stub.Export(req, timeout=5)) == grpc.StatusCode.INVALID_ARGUMENT,
           "INVALID_ARGUMENT")
    resp = stub.Export(req, timeout=5)
    expect(resp.partial_success.rejected_spans == 2 and
           resp.partial_success.error_message == "too old", f"partial: {resp}")
    t0 = time.monotonic()
    expect(code_of(lambda: stub.Export(req, timeout=0.4)) == grpc.StatusCode.DEADLINE_EXCEEDED,
           "stall: not DEADLINE_EXCEEDED")
    expect(time.monotonic() - t0 < 2, "the stall was not cut by the deadline")
    expect(stub.Export(req, timeout=5) is not None, "ok after the script")
    ch.close()
    expect(c.stop() == 0, "exit status")
    got = [(r["action"], r["outcome"], r["items"]) for r in c.requests()]
    want = [("UNAVAILABLE", "UNAVAILABLE", 3)] * 2 + [
        ("RESOURCE_EXHAUSTED@300", "RESOURCE_EXHAUSTED", 3),
        ("RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED", 3),
        ("INVALID_ARGUMENT", "INVALID_ARGUMENT", 3), ("partial=2:too old", "partial", 3),
        ("stall=3000", "deadline", 3), ("ok", "ok", 3)]
    expect(got == want, f"log {got}")
    stall = c.requests()[6]
    expect(0 < stall["timeout_ms"] <= 400, f"the client's deadline as seen: {stall['timeout_ms']}")
    ev = [r["event"] for r in c.log() if r["kind"] == "event"]
    expect(ev == ["ready", "exit"], f"events {ev}")


def check_gzip_metadata_metrics():
    c = Collector(out="gzip.jsonl")
    stub, ch = traces_stub(c.target)
    stub.Export(small_request(n=20, pad=50), timeout=5, compression=grpc.Compression.Gzip,
                metadata=[("x-cbt-test", "gz"), ("authorization", "Bearer t")])
    stub.Export(small_request(n=20, pad=50, first_id=20), timeout=5, metadata=[("x-cbt-test", "id")])
    mstub = metrics_service_pb2_grpc.MetricsServiceStub(ch)
    mreq = metrics_service_pb2.ExportMetricsServiceRequest()
    sm = mreq.resource_metrics.add().scope_metrics.add()
    sm.scope.name = "cbt"
    m = sm.metrics.add()
    m.name = "lmcache_blend.lookup_requests"
    m.sum.data_points.add().as_int = 42
    mstub.Export(mreq, timeout=5, compression=grpc.Compression.Gzip)
    ch.close()
    c.stop()
    r = c.requests()
    expect([x["service"] for x in r] == ["traces", "traces", "metrics"], "services")
    expect(r[0]["compression"] == "gzip" and r[0]["wire_bytes"] < r[0]["bytes"],
           f"gzip not seen: {r[0]['compression']} {r[0]['wire_bytes']} / {r[0]['bytes']}")
    expect(r[1]["compression"] == "identity" and r[1]["wire_bytes"] == r[1]["bytes"], "identity")
    expect(r[0]["metadata"].get("x-cbt-test") == "gz", f"metadata {r[0]['metadata']}")
    expect(r[0]["items"] == 20 and r[2]["items"] == 1, "items")
    s = run_check("--got", c.out)
    expect(s["rc"] == 0, f"checker: {s}")
    expect(s["metric.lmcache_blend.lookup_requests"] == "42", "metric value")
    expect(s["traces.compression.gzip"] == "1" and s["traces.compression.identity"] == "1" and
           s["gzip.not_smaller"] == "0", "gzip counts")
    # gRPC core sends a message uncompressed when gzip would not make it
    # smaller: the 57-byte metrics request goes out as it is
    expect(r[2]["compression"] == "identity", "a tiny message was sent compressed")
    expect(s["metadata.x-cbt-test"] == "id", "metadata key (of the last trace request)")
    expect(s["spans.unique"] == "40", "spans.unique")


def check_goaway_restart():
    c = Collector("--script", "ok,goaway,ok", out="goaway.jsonl")
    stub, ch = traces_stub(c.target)
    stub.Export(small_request(), timeout=5)
    stub.Export(small_request(), timeout=5)  # answered, then GOAWAY
    time.sleep(0.5)
    # a reconnecting client gets through (wait_for_ready: the restart's window)
    stub.Export(small_request(), timeout=10, wait_for_ready=True)
    ch.close()
    c.stop()
    ev = [r["event"] for r in c.log() if r["kind"] == "event"]
    expect(ev[:3] == ["ready", "goaway", "restarted"], f"events {ev}")
    r = c.requests()
    expect([x["outcome"] for x in r] == ["ok", "ok", "ok"], "outcomes")
    expect(r[2]["peer"] != r[0]["peer"], "the third call reused the connection GOAWAY closed")


def check_max_connection_age():
    c = Collector("--max-connection-age-ms", "300", out="age.jsonl")
    stub, ch = traces_stub(c.target)
    codes = []
    for _ in range(12):
        codes.append(code_of(lambda: stub.Export(small_request(), timeout=5, wait_for_ready=True)))
        time.sleep(0.15)
    ch.close()
    c.stop()
    expect(all(x == grpc.StatusCode.OK for x in codes), f"codes {codes}")
    peers = {r["peer"] for r in c.requests()}
    expect(len(peers) >= 2, f"one connection for 1.8 s with a 300 ms age: {peers}")


def check_kill_and_restart_same_port():
    c = Collector("--script", "kill", out="kill.jsonl")
    stub, ch = traces_stub(c.target)
    expect(code_of(lambda: stub.Export(small_request(), timeout=5)) == grpc.StatusCode.UNAVAILABLE,
           "a killed call is not UNAVAILABLE")
    expect(c.p.wait(10) == 3, "exit status after kill")
    c2 = Collector(out="kill.jsonl", port=c.port)
    expect(c2.port == c.port, "not the same port")
    stub.Export(small_request(), timeout=10, wait_for_ready=True)
    ch.close()
    c2.stop()
    r = c2.requests()
    expect([x["outcome"] for x in r] == ["killed", "ok"], f"outcomes {[x['outcome'] for x in r]}")


def check_receive_limit():
    c = Collector(out="limit.jsonl")
    stub, ch = traces_stub(c.target)
    big = small_request(n=1, pad=5 << 20)
    fits = small_request(n=1, pad=3 << 20)
    expect(code_of(lambda: stub.Export(big, timeout=10)) == grpc.StatusCode.RESOURCE_EXHAUSTED,
           "a 5 MiB message was not refused")
    expect(code_of(lambda: stub.Export(fits, timeout=10)) == grpc.StatusCode.OK, "3 MiB refused")
    ch.close()
    c.stop()
    r = c.requests()
    expect(len(r) == 1 and r[0]["wire_bytes"] > 3 << 20, "the refused message reached the handler")
    s = run_check("--got", c.out, "--max-request-bytes", str(1 << 20))
    expect(s["rc"] == 1 and any("over 1048576" in f for f in s["FAIL"]), "--max-request-bytes")


def check_tls():
    certs = os.path.join(TMP, "certs")
    p = subprocess.run([sys.executable, COLLECTOR, "certs", certs], capture_output=True, text=True)
    expect(p.returncode == 0, f"certs: {p.stdout} {p.stderr}")
    rd = lambda n: open(os.path.join(certs, n), "rb").read()
    c = Collector("--tls", certs, out="tls.jsonl")
    trusted = grpc.ssl_channel_credentials(rd("ca.pem"))
    stub, ch = traces_stub(c.target, trusted)
    stub.Export(small_request(), timeout=5)
    ch.close()
    stub, ch = traces_stub(f"localhost:{c.port}", trusted)  # the other name in the certificate
    stub.Export(small_request(), timeout=5)
    ch.close()
    stub, ch = traces_stub(c.target, grpc.ssl_channel_credentials())  # system roots only
    expect(code_of(lambda: stub.Export(small_request(), timeout=3)) == grpc.StatusCode.UNAVAILABLE,
           "a client that does not trust the test CA got through")
    ch.close()
    stub, ch = traces_stub(c.target)  # plaintext
    expect(code_of(lambda: stub.Export(small_request(), timeout=3)) == grpc.StatusCode.UNAVAILABLE,
           "a plaintext client got through")
    ch.close()
    c.stop()
    r = c.requests()
    expect(len(r) == 2 and r[0]["tls"] and r[0]["tls"]["version"].startswith("TLS"), f"tls {r}")
    expect(r[0]["tls"]["client_cn"] is None, "a client CN without a client certificate")

    c = Collector("--tls", certs, "--require-client-cert", out="mtls.jsonl")
    stub, ch = traces_stub(c.target, trusted)
    expect(code_of(lambda: stub.Export(small_request(), timeout=3)) == grpc.StatusCode.UNAVAILABLE,
           "no client certificate, yet through")
    ch.close()
    with_cert = grpc.ssl_channel_credentials(rd("ca.pem"), rd("client.key"), rd("client.pem"))
    stub, ch = traces_stub(c.target, with_cert)
    stub.Export(small_request(), timeout=5)
    ch.close()
    c.stop()
    r = c.requests()
    expect(len(r) == 1 and r[0]["tls"]["client_cn"] == "cbt test client", f"mtls {r}")
    s = run_check("--got", c.out)
    expect(s["tls.client_cn"] == "cbt test client", "checker's tls.client_cn")


def check_ends_by_itself():
    c = Collector("--lifetime", "1.5", out="life.jsonl", stdin_eof=False)
    t0 = time.monotonic()
    rc = c.p.wait(10)
    expect(rc == 4 and time.monotonic() - t0 < 5, f"lifetime: rc {rc}")
    c.p.stdin.close()
    ev = [r for r in c.log() if r["kind"] == "event"]
    expect(ev[-1]["event"] == "exit" and ev[-1]["reason"] == "lifetime", f"events {ev}")
    # the same with the stdin watcher blocked in its read (what the C test
    # runs): it must still end cleanly, not abort at interpreter exit
    c = Collector("--lifetime", "1.5", out="life-watch.jsonl")
    rc = c.p.wait(10)
    expect(rc == 4, f"lifetime with a stdin watcher: rc {rc}")
    c.p.stdin.close()
    c = Collector(out="term-watch.jsonl")
    c.p.terminate()
    rc = c.p.wait(5)
    expect(rc == 0, f"SIGTERM with a stdin watcher: rc {rc}")
    c.p.stdin.close()
    c = Collector(out="eof.jsonl")
    t0 = time.monotonic()
    expect(c.stop() == 0 and time.monotonic() - t0 < 3, "stdin EOF")
    c = Collector(out="term.jsonl", stdin_eof=False)
    c.p.terminate()
    expect(c.p.wait(5) == 0, "SIGTERM")
    c.p.stdin.close()
    p = subprocess.run([sys.executable, COLLECTOR, "serve", "--out", os.path.join(TMP, "bad.jsonl"),
                        "--script", "ok,sometimes"], capture_output=True, text=True, timeout=30)
    expect(p.returncode == 2 and "sometimes" in p.stderr, f"bad script: {p.returncode} {p.stderr}")


def check_control_file():
    ctl = os.path.join(TMP, "control")
    c = Collector("--control", ctl, out="control.jsonl")
    stub, ch = traces_stub(c.target)
    stub.Export(small_request(), timeout=5)
    with open(ctl, "w") as f:
        f.write("traces UNAVAILABLE,partial=1\n")
    expect(code_of(lambda: stub.Export(small_request(), timeout=5)) == grpc.StatusCode.UNAVAILABLE,
           "the control file was not read")
    expect(stub.Export(small_request(), timeout=5).partial_success.rejected_spans == 1, "partial")
    stub.Export(small_request(), timeout=5)
    ch.close()
    c.stop()
    expect([r["outcome"] for r in c.requests()] == ["ok", "UNAVAILABLE", "partial", "ok"], "outcomes")


# ---- the checker against a span file -------------------------------------------------------

HEX = lambda s: bytes.fromhex(s)
SPAN_FILE = [  # docs/spans.md's schema, as host/spans/sink_jsonl.c writes it
    {"trace_id": "0102030405060708090a0b0c0d0e0f10", "span_id": "a1a2a3a4a5a6a7a8",
     "parent_span_id": "", "name": "request", "kind": "server", "start_ns": 1700000000000000000,
     "end_ns": 1700000000005000000, "status": "ok", "incomplete": False,
     "attributes": {"session_id": "s-1", "hit_tokens": 1536, "hit_rate": 0.75, "late": False},
     "dropped_attributes": 0, "events": [], "dropped_events": 0, "truncated_attributes": 0},
    {"trace_id": "0102030405060708090a0b0c0d0e0f10", "span_id": "b1b2b3b4b5b6b7b8",
     "parent_span_id": "a1a2a3a4a5a6a7a8", "name": "timeout", "kind": "internal",
     "start_ns": 1700000000001000000, "end_ns": 1700000000001000000, "status": "error",
     "incomplete": False, "attributes": {"session_id": "s-1"}, "dropped_attributes": 0,
     "events": [{"name": "exception", "time_unix_nano": 1700000000001000000,
                 "attributes": {"exception.type": "TimeoutError", "exception.message": "late"},
                 "dropped_attributes": 1}],
     "dropped_events": 2, "truncated_attributes": 0},
    {"trace_id": "0102030405060708090a0b0c0d0e0f10", "span_id": "c1c2c3c4c5c6c7c8",
     "parent_span_id": "a1a2a3a4a5a6a7a8", "name": "mp.store", "kind": "internal",
     "start_ns": 1700000000002000000, "end_ns": 1700000000003000000, "status": "unset",
     "incomplete": True, "attributes": {"stored_count": 3, "odd": None},
     "dropped_attributes": 2, "events": [], "dropped_events": 0, "truncated_attributes": 0},
]


def set_value(v, x):
    if isinstance(x, bool):
        v.bool_value = x
    elif isinstance(x, int):
        v.int_value = x
    elif isinstance(x, float):
        v.double_value = x
    else:
        v.string_value = x


def encode_span(c, sp):
    """A reference encoder, written from the span-file schema and
    exporter/otlp_encode.c's comment, independently of cbt's C."""
    sp.trace_id = HEX(c["trace_id"])
    sp.span_id = HEX(c["span_id"])
    sp.parent_span_id = HEX(c["parent_span_id"])
    sp.name = c["name"]
    sp.kind = {"internal": 1, "server": 2, "client": 3}[c["kind"]]
    sp.start_time_unix_nano = c["start_ns"]
    sp.end_time_unix_nano = c["end_ns"]
    nulls = 0
    for k, x in c["attributes"].items():
        if x is None:
            nulls += 1
            continue
        kv = sp.attributes.add()
        kv.key = k
        set_value(kv.value, x)
    if c["incomplete"]:
        kv = sp.attributes.add()
        kv.key = "cbt.incomplete"
        kv.value.bool_value = True
    sp.dropped_attributes_count = c["dropped_attributes"] + nulls
    for e in c["events"]:
        pe = sp.events.add()
        pe.name = e["name"]
        pe.time_unix_nano = e["time_unix_nano"]
        for k, x in e["attributes"].items():
            kv = pe.attributes.add()
            kv.key = k
            set_value(kv.value, x)
        pe.dropped_attributes_count = e["dropped_attributes"]
    sp.dropped_events_count = c["dropped_events"]
    sp.status.code = {"unset": 0, "ok": 1, "error": 2}[c["status"]]


def run_check(*args):
    p = subprocess.run([sys.executable, CHECK, *args], capture_output=True, text=True, timeout=60)
    s = {"rc": p.returncode, "FAIL": []}
    for line in p.stdout.splitlines():
        if line.startswith("FAIL: "):
            s["FAIL"].append(line[6:])
        else:
            k, _, v = line.partition(" ")
            s[k] = v
    return s


def check_checker():
    spans = os.path.join(TMP, "cbt-spans.jsonl")
    with open(spans, "w") as f:
        for s in SPAN_FILE:
            f.write(json.dumps(s) + "\n")
    c = Collector("--script", "UNAVAILABLE", out="check.jsonl")
    stub, ch = traces_stub(c.target)
    for group in (SPAN_FILE[:2], SPAN_FILE[2:]):
        req = trace_service_pb2.ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        kv = rs.resource.attributes.add()
        kv.key, kv.value.string_value = "service.name", "selftest"
        ss = rs.scope_spans.add()
        ss.scope.name = "cbt"
        for s in group:
            encode_span(s, ss.spans.add())
        while code_of(lambda: stub.Export(req, timeout=5)) != grpc.StatusCode.OK:
            time.sleep(0.2)  # the scripted UNAVAILABLE, then a retry
    ch.close()
    c.stop()
    s = run_check("--got", c.out, "--spans", spans)
    expect(s["rc"] == 0, f"matching spans fail the checker: {s['FAIL']}")
    for k, v in (("spans.cbt", "3"), ("spans.unique", "3"), ("spans.missing", "0"),
                 ("spans.received", "5"), ("spans.accepted", "3"), ("traces.requests", "3"),
                 ("traces.outcome.UNAVAILABLE", "1"), ("resource.service.name", "selftest")):
        expect(s.get(k) == v, f"{k} {s.get(k)}, want {v}")
    expect(int(s["retry.gap_ms"]) >= 150, f"retry.gap_ms {s['retry.gap_ms']}")

    # each difference the checker promises to see, planted in a copy of the log
    good = [json.loads(l) for l in open(c.out)]
    ok_req = [r for r in good if r["kind"] == "request" and r["outcome"] == "ok"]

    def planted(name, mutate, want_fail):
        log = copy.deepcopy(good)
        reqs = [r for r in log if r["kind"] == "request" and r["outcome"] == "ok"]
        mutate(reqs)
        path = os.path.join(TMP, f"planted-{name}.jsonl")
        with open(path, "w") as f:
            for r in log:
                f.write(json.dumps(r) + "\n")
        got = run_check("--got", path, "--spans", spans)
        expect(got["rc"] == 1 and any(want_fail in x for x in got["FAIL"]),
               f"planted {name}: rc {got['rc']}, {got['FAIL']}")

    def spans_of(reqs, i):
        return reqs[i]["request"]["resourceSpans"][0]["scopeSpans"][0]["spans"]

    def attr(span, key):
        return next(a for a in span["attributes"] if a["key"] == key)

    def int_as_double(reqs):
        a = attr(spans_of(reqs, 0)[0], "hit_tokens")
        a["value"] = {"doubleValue": 1536.0}
    planted("int-as-double", int_as_double, "'hit_tokens'")

    def bool_as_string(reqs):
        attr(spans_of(reqs, 0)[0], "late")["value"] = {"stringValue": "false"}
    planted("bool-as-string", bool_as_string, "'late'")

    def no_event(reqs):
        del spans_of(reqs, 0)[1]["events"]
    planted("event-missing", no_event, "events")

    def event_attr(reqs):
        spans_of(reqs, 0)[1]["events"][0]["attributes"][1]["value"] = {"stringValue": "early"}
    planted("event-attr", event_attr, "exception.message")

    def parent(reqs):
        spans_of(reqs, 0)[1]["parentSpanId"] = base64.b64encode(HEX("c1c2c3c4c5c6c7c8")).decode()
    planted("parent", parent, "parent_span_id")

    def status(reqs):
        spans_of(reqs, 0)[1]["status"] = {}
    planted("status", status, "status")

    def no_incomplete(reqs):
        sp = spans_of(reqs, 1)[0]
        sp["attributes"] = [a for a in sp["attributes"] if a["key"] != "cbt.incomplete"]
    planted("incomplete", no_incomplete, "cbt.incomplete")

    def end_time(reqs):
        spans_of(reqs, 1)[0]["endTimeUnixNano"] = "1700000000003000001"
    planted("end", end_time, "end")

    def dropped(reqs):
        spans_of(reqs, 1)[0]["droppedAttributesCount"] = 2
    planted("dropped", dropped, "dropped_attributes_count")

    def dup(reqs):
        spans_of(reqs, 1).append(copy.deepcopy(spans_of(reqs, 0)[0]))
    planted("duplicate", dup, "accepted twice")

    def unknown(reqs):
        spans_of(reqs, 1)[0]["spanId"] = base64.b64encode(HEX("d1d2d3d4d5d6d7d8")).decode()
    planted("unknown", unknown, "not in cbt's span file")

    def scope(reqs):
        reqs[0]["request"]["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] = "other"
    planted("scope", scope, "scope")

    def unknown_field(reqs):
        spans_of(reqs, 0)[0]["notAField"] = 1
    planted("unknown-field", unknown_field, "is not an ExportTraceServiceRequest")
    # and a missing span is counted, not hidden
    log = [r for r in good if not (r["kind"] == "request" and r is ok_req[1])]
    path = os.path.join(TMP, "planted-missing.jsonl")
    with open(path, "w") as f:
        for r in log:
            f.write(json.dumps(r) + "\n")
    got = run_check("--got", path, "--spans", spans)
    expect(got["rc"] == 0 and got["spans.missing"] == "1", f"missing: {got}")


CHECKS = [check_scripted_answers, check_gzip_metadata_metrics, check_goaway_restart,
          check_max_connection_age, check_kill_and_restart_same_port, check_receive_limit,
          check_tls, check_ends_by_itself, check_control_file, check_checker]


def main():
    passed = failed = 0
    try:
        for chk in CHECKS:
            name = chk.__name__[len("check_"):]
            t0 = time.monotonic()
            try:
                chk()
                passed += 1
                print(f"ok - {name} ({time.monotonic() - t0:.1f} s)", flush=True)
            except Exception as e:
                failed += 1
                print(f"FAIL - {name}: {e}", flush=True)
                traceback.print_exc()
    finally:
        for p in STARTED:  # none may outlive the selftest
            if p.poll() is None:
                p.kill()
                p.wait()
        if failed == 0:
            shutil.rmtree(TMP, ignore_errors=True)
        else:
            print(f"(the collectors' logs are in {TMP})")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
