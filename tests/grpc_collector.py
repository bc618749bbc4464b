#!/usr/bin/env python3
"""tests/grpc_collector.py — a loopback OTLP/gRPC collector for cbt's tests,
built from the official pieces only.

    grpc_collector.py serve --out FILE [--port N] [--script S] [--metrics-script S]
                      [--control FILE] [--tls DIR [--require-client-cert]]
                      [--max-recv-bytes N] [--max-connection-age-ms N]
                      [--lifetime S] [--exit-on-stdin-eof]
    grpc_collector.py certs DIR

serve: a grpcio server on 127.0.0.1 (never another address) serving
TraceService/Export and MetricsService/Export through the servicers and
message classes generated in opentelemetry-proto (the `*_pb2_grpc` modules):
the request is parsed by the official ExportTraceServiceRequest /
ExportMetricsServiceRequest class, nothing of ours. It prints `PORT <n>` on
stdout once it is serving, and appends one JSON object per line to --out:

  {"kind": "request", "n": 0, "service": "traces" | "metrics",
   "method": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
   "action": "UNAVAILABLE", "outcome": "ok" | "partial" | "<CODE>" |
             "deadline" | "killed", "rejected": 0,
   "t": <unix seconds>, "compression": "gzip" | "identity",
   "wire_bytes": <the message as it crossed the wire, compressed or not>,
   "bytes": <its decoded size>, "timeout_ms": <the client's deadline left>,
   "peer": "ipv4:127.0.0.1:<client port>", "metadata": {key: value},
   "tls": null | {"version": "TLSv1.3", "client_cn": "..."},
   "items": <spans or data points>, "request": <json_format.MessageToDict>}
  {"kind": "event", "event": "ready" | "goaway" | "restarted" | "exit",
   "t": ..., ...}

How the compression is seen: gRPC core would inflate a gzip message before
any handler sees it and tells the handler nothing, so the server runs with
per-message decompression off (the channel argument
grpc.per_message_decompression = 0): the handler's deserializer gets the
message as it crossed the wire, records its size and whether it is a gzip
member (protobuf's first byte of these messages is a field tag, never 0x1f),
inflates it with Python's gzip and hands it to the official class. The
receive limit stays gRPC's default (4 MiB), as in the OpenTelemetry
Collector, unless --max-recv-bytes says otherwise: a larger message is
refused by gRPC core with RESOURCE_EXHAUSTED before any handler runs.

The script: what to answer, request by request (traces and metrics have a
script each; after its end every request is answered `ok`). A
comma-separated list of actions, each optionally `*N` (N requests):
  ok                    success (an empty response)
  <CODE>                fail with that gRPC status (UNAVAILABLE, INVALID_ARGUMENT, ...)
  <CODE>@<MS>           the same, with a google.rpc.Status in
                        grpc-status-details-bin carrying google.rpc.RetryInfo
                        (retry_delay MS milliseconds), as grpcio-status writes it
  stall=<MS>            hold the call MS ms (the client's deadline normally ends
                        it first: outcome "deadline"), then answer ok
  partial=<N>[:<MSG>]   success with partial_success (rejected_spans, or
                        rejected_data_points for metrics, = N; error_message MSG)
  goaway                answer ok, then stop the server (gRPC sends GOAWAY on
                        every connection) and serve again on the same port
  kill                  log the request, then exit at once without answering:
                        the connection dies mid-call (the test starts a new
                        collector with --port to bring it back)
--control FILE: each time the file changes, its lines `traces <script>` /
`metrics <script>` replace what is left of that service's script.

TLS (--tls DIR): DIR/server.pem and DIR/server.key (`certs` makes them),
and with --require-client-cert a client certificate signed by DIR/ca.pem is
required (gRPC refuses the handshake otherwise).

It always ends by itself: after --lifetime seconds (default 120; event
"exit", reason "lifetime", exit status 4), at SIGTERM / SIGINT, at EOF on
stdin with --exit-on-stdin-eof (how a test stops it, and how it notices the
test died), or at a `kill` action (exit status 3).

certs DIR: a self-signed CA (ca.pem, ca.key), a server certificate for
127.0.0.1 and localhost (server.pem, server.key) and a client certificate
(client.pem, client.key, CN "cbt test client"), all signed by the CA, made
with the openssl command line, valid for two days.

Exit 77 with `SKIP: <why>` when grpcio or opentelemetry-proto is not
importable (scripts/pydeps.sh installs them into the test venv).
"""
import argparse
import base64
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # before grpc loads: no INFO lines
try:
    import grpc
    from concurrent import futures
    from google.protobuf import any_pb2, duration_pb2, json_format
    from google.rpc import code_pb2, error_details_pb2, status_pb2
    from grpc_status import rpc_status
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
except Exception as e:  # ImportError, or a protobuf runtime that does not fit
    print(f"SKIP: grpcio / grpcio-status / opentelemetry-proto not importable with {sys.executable}: {e!r}")
    sys.exit(77)

TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
METRICS_METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
EXIT_KILLED, EXIT_LIFETIME = 3, 4


# ---- the script --------------------------------------------------------------------------

def parse_script(text):
    """'UNAVAILABLE*2,ok,RESOURCE_EXHAUSTED@300' -> a list of action tuples, one a request."""
    out = []
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        times = 1
        m = re.fullmatch(r"(.*)\*(\d+)", item)
        if m:
            item, times = m.group(1), int(m.group(2))
        out += [parse_action(item)] * times
    return out


def parse_action(item):
    low = item.lower()
    if low == "ok":
        return ("ok",)
    if low in ("goaway", "kill"):
        return (low,)
    m = re.fullmatch(r"stall=(\d+)", low)
    if m:
        return ("stall", int(m.group(1)))
    m = re.fullmatch(r"partial=(\d+)(?::(.*))?", item, re.I)
    if m:
        return ("partial", int(m.group(1)), m.group(2) or "")
    m = re.fullmatch(r"([A-Za-z_]+)(?:@(\d+))?", item)
    if m and m.group(1).upper() in grpc.StatusCode.__members__ and m.group(1).upper() != "OK":
        return ("fail", m.group(1).upper(), None if m.group(2) is None else int(m.group(2)))
    raise ValueError(f"unknown script action {item!r}")


def action_text(a):
    if a[0] == "fail":
        return a[1] + ("" if a[2] is None else f"@{a[2]}")
    if a[0] == "stall":
        return f"stall={a[1]}"
    if a[0] == "partial":
        return f"partial={a[1]}" + (f":{a[2]}" if a[2] else "")
    return a[0]


# ---- the collector -------------------------------------------------------------------------

class Collector:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.out = open(args.out, "a", encoding="utf-8")
        self.scripts = {"traces": parse_script(args.script),
                        "metrics": parse_script(args.metrics_script)}
        self.control_sig = None
        self.n = 0
        self.server = None
        self.port = args.port
        self.done = threading.Event()
        self.exit_status = 0
        self.exit_reason = "lifetime"

    # -- the log
    def log(self, obj):
        obj.setdefault("t", time.time())
        line = json.dumps(obj, separators=(",", ":"))
        with self.lock:
            self.out.write(line + "\n")
            self.out.flush()

    def event(self, name, **kw):
        self.log(dict(kind="event", event=name, **kw))

    # -- the script
    def read_control(self):
        """Caller holds self.lock."""
        path = self.args.control
        if not path:
            return
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        sig = (st.st_mtime_ns, st.st_size)
        if sig == self.control_sig:
            return
        self.control_sig = sig
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.strip().split(None, 1)
                if parts and parts[0] in self.scripts:
                    self.scripts[parts[0]] = parse_script(parts[1] if len(parts) > 1 else "")

    def next_action(self, service):
        with self.lock:
            self.read_control()
            s = self.scripts[service]
            n = self.n
            self.n += 1
            return n, (s.pop(0) if s else ("ok",))

    # -- one request
    def deserializer(self, official_from_string, meta):
        """Wraps the official class's FromString: sees the wire bytes first."""
        def deser(b):
            meta["wire_bytes"] = len(b)
            if b[:2] == b"\x1f\x8b":
                meta["compression"] = "gzip"
                b = gzip.decompress(b)
            else:
                meta["compression"] = "identity"
            meta["bytes"] = len(b)
            return official_from_string(b)
        return deser

    def handle(self, service, req, ctx, wire):
        n, action = self.next_action(service)
        md = {}
        for k, v in ctx.invocation_metadata():
            md[k] = base64.b64encode(v).decode() if isinstance(v, bytes) else v
        tls = None
        auth = ctx.auth_context()
        if auth.get("transport_security_type") == [b"ssl"]:
            tls = {"version": b"".join(auth.get("ssl_tls_version", [b""])).decode(),
                   "client_cn": b"".join(auth.get("x509_common_name", [b""])).decode() or None}
        if service == "traces":
            items = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
        else:
            items = sum(data_points(m) for rm in req.resource_metrics for sm in rm.scope_metrics
                        for m in sm.metrics)
        rem = ctx.time_remaining()
        rec = dict(kind="request", n=n, service=service,
                   method=TRACES_METHOD if service == "traces" else METRICS_METHOD,
                   action=action_text(action), outcome="ok", rejected=0, t=time.time(),
                   compression=wire.get("compression"), wire_bytes=wire.get("wire_bytes"),
                   bytes=wire.get("bytes"),
                   timeout_ms=None if rem is None else int(rem * 1000),
                   peer=ctx.peer(), metadata=md, tls=tls, items=items,
                   request=json_format.MessageToDict(req))
        resp_cls = (trace_service_pb2.ExportTraceServiceResponse if service == "traces"
                    else metrics_service_pb2.ExportMetricsServiceResponse)
        kind = action[0]
        if kind == "kill":
            rec["outcome"] = "killed"
            self.log(rec)
            self.event("exit", reason="kill")
            os._exit(EXIT_KILLED)  # mid-call: no answer, no GOAWAY
        if kind == "stall":
            until = time.monotonic() + action[1] / 1000.0
            while ctx.is_active() and time.monotonic() < until:
                time.sleep(0.01)
            if not ctx.is_active():
                rec["outcome"] = "deadline"  # the client gave up (its deadline, or a cancel)
                self.log(rec)
                return resp_cls()
        if kind == "fail":
            rec["outcome"] = action[1]
            self.log(rec)
            code = grpc.StatusCode[action[1]]
            msg = f"scripted {action_text(action)}"
            if action[2] is None:
                ctx.abort(code, msg)
            delay = duration_pb2.Duration()
            delay.FromMilliseconds(action[2])
            detail = any_pb2.Any()
            detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
            st = status_pb2.Status(code=code.value[0], message=msg, details=[detail])
            ctx.abort_with_status(rpc_status.to_status(st))
        resp = resp_cls()
        if kind == "partial":
            rec["outcome"] = "partial"
            rec["rejected"] = action[1]
            if service == "traces":
                resp.partial_success.rejected_spans = action[1]
            else:
                resp.partial_success.rejected_data_points = action[1]
            resp.partial_success.error_message = action[2]
        self.log(rec)
        if kind == "goaway":
            # after this call's answer has gone out: stop (GOAWAY), serve again
            ctx.add_callback(lambda: threading.Thread(target=self.goaway, daemon=True).start())
        return resp

    # -- the server
    def options(self):
        opts = [("grpc.per_message_decompression", 0)]
        if self.args.max_recv_bytes:
            opts.append(("grpc.max_receive_message_length", self.args.max_recv_bytes))
        if self.args.max_connection_age_ms:
            opts.append(("grpc.max_connection_age_ms", self.args.max_connection_age_ms))
            opts.append(("grpc.max_connection_age_grace_ms", 2000))
        return opts

    def start_server(self):
        srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=self.options())
        handlers = []
        for service, add, servicer_base, req_cls in (
                ("traces", trace_service_pb2_grpc.add_TraceServiceServicer_to_server,
                 trace_service_pb2_grpc.TraceServiceServicer,
                 trace_service_pb2.ExportTraceServiceRequest),
                ("metrics", metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server,
                 metrics_service_pb2_grpc.MetricsServiceServicer,
                 metrics_service_pb2.ExportMetricsServiceRequest)):
            handlers += self.generated_handlers(service, add, servicer_base, req_cls)
        srv.add_generic_rpc_handlers(handlers)
        addr = f"127.0.0.1:{self.port or 0}"
        if self.args.tls:
            rd = lambda name: open(os.path.join(self.args.tls, name), "rb").read()
            creds = grpc.ssl_server_credentials(
                [(rd("server.key"), rd("server.pem"))],
                root_certificates=rd("ca.pem") if self.args.require_client_cert else None,
                require_client_auth=bool(self.args.require_client_cert))
            port = srv.add_secure_port(addr, creds)
        else:
            port = srv.add_insecure_port(addr)
        if not port:
            raise OSError(f"cannot listen on {addr}")
        srv.start()
        self.server, self.port = srv, port

    def generated_handlers(self, service, add, servicer_base, req_cls):
        """The generated add_*_to_server registers the servicer; we keep its
        handler and put our wire-bytes reader in front of its deserializer."""
        coll = self

        class Servicer(servicer_base):
            def Export(self, request, context):
                return coll.handle(service, request, context, context._cbt_wire)

        class Capture:
            def add_generic_rpc_handlers(self, hs):
                self.handlers = list(hs)

            def add_registered_method_handlers(self, name, hs):  # newer generated code
                self.handlers = [grpc.method_handlers_generic_handler(name, hs)]

        cap = Capture()
        add(Servicer(), cap)

        class Front(grpc.GenericRpcHandler):
            def __init__(self, inner):
                self.inner = inner

            def service(self, details):
                h = self.inner.service(details)
                if h is None or h.unary_unary is None:
                    return h
                wire = {}
                behaviour = h.unary_unary

                def call(request, context):
                    context._cbt_wire = wire
                    return behaviour(request, context)
                return h._replace(request_deserializer=coll.deserializer(req_cls.FromString, wire),
                                  unary_unary=call)
        return [Front(h) for h in cap.handlers]

    def goaway(self):
        self.server.stop(grace=2).wait()
        self.event("goaway")
        self.start_server()
        self.event("restarted", port=self.port)

    def run(self):
        self.start_server()
        self.event("ready", port=self.port, tls=bool(self.args.tls),
                   require_client_cert=bool(self.args.require_client_cert), pid=os.getpid())
        print(f"PORT {self.port}", flush=True)
        if self.args.exit_on_stdin_eof:
            def watch():
                # os.read, not sys.stdin: a daemon thread blocked inside the
                # buffered reader holds its lock, and the interpreter aborts
                # at exit (lifetime, SIGTERM) when it finds the lock taken
                try:
                    while os.read(0, 4096):
                        pass
                except OSError:
                    pass
                self.exit_reason = "stdin closed"
                self.done.set()
            threading.Thread(target=watch, daemon=True).start()
        if not self.done.wait(self.args.lifetime):
            self.exit_status = EXIT_LIFETIME
        self.server.stop(grace=0.5).wait()
        self.event("exit", reason=self.exit_reason)
        return self.exit_status


def data_points(m):
    for field in ("gauge", "sum", "histogram", "exponential_histogram", "summary"):
        if m.HasField(field):
            return len(getattr(m, field).data_points)
    return 0


# ---- certificates ----------------------------------------------------------------------

def make_certs(d):
    os.makedirs(d, exist_ok=True)

    def ossl(*a):
        subprocess.run(["openssl", *a], check=True, cwd=d,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
         "-days", "2", "-subj", "/CN=cbt test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name, cn, ext in (
            ("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                    "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
            ("client", "cbt test client", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")):
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext)
        ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={cn}")
        ossl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    ossl("verify", "-CAfile", "ca.pem", "server.pem", "client.pem")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--out", required=True)
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--script", default="")
    s.add_argument("--metrics-script", default="")
    s.add_argument("--control")
    s.add_argument("--tls")
    s.add_argument("--require-client-cert", action="store_true")
    s.add_argument("--max-recv-bytes", type=int, default=0)
    s.add_argument("--max-connection-age-ms", type=int, default=0)
    s.add_argument("--lifetime", type=float, default=120.0)
    s.add_argument("--exit-on-stdin-eof", action="store_true")
    c = sub.add_parser("certs")
    c.add_argument("dir")
    a = p.parse_args(argv)
    if a.cmd == "certs":
        try:
            make_certs(a.dir)
        except FileNotFoundError:
            print("SKIP: the openssl command is not installed (Debian: openssl)")
            return 77
        except subprocess.CalledProcessError as e:
            print(f"grpc_collector: openssl failed: {e} {e.stderr.decode(errors='replace')}",
                  file=sys.stderr)
            return 1
        return 0
    try:  # fail on a bad script before serving, not at the request that reaches it
        parse_script(a.script)
        parse_script(a.metrics_script)
    except ValueError as e:
        print(f"grpc_collector: {e}", file=sys.stderr)
        return 2
    coll = Collector(a)

    def stop(signum, frame):
        coll.exit_reason = signal.Signals(signum).name
        coll.done.set()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return coll.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
