"""tests/lmcache/server_check.py — the checks of `make test-lmcache-server`
(tests/lmcache/server_test.sh; docs/testing.md). Runs in the LMCache 0.5.6
venv (OpenTelemetry SDK and protobuf are LMCache's dependencies).

  trees SPANS.jsonl --seq A:B:TP ... [--token-trace EVENTS.pickle] [--otlp-json FILE]
      the request trees cbt built from `lmcache bench server --start A --end B
      --tp-size TP` runs: every request (req-<i>-cold, req-<i>-warm) one
      root span `request`, no other root, no orphan, each child inside its
      root's time; one mp.lookup_prefetch per request; TP mp.store under each
      cold request and none under a warm one; TP mp.retrieve under each warm
      request and none under a cold one. With --token-trace: one zero-length
      mp.request.trace per request under its root, lmcache.model the lookup's
      model and lmcache.input_ids the token ids LMCache's MP_LOOKUP carried
      (from the tap's EVENTS.pickle), which are the ones the bench client
      sent (its own _build_token_ids). With --otlp-json: that file (the
      collector file exporter's format) holds the same spans, ids and names.
  lmcache057 EVENTS.pickle OUT.jsonl --root DIR
      LMCache 0.5.7's own spans for those events: the tap's events, in order,
      through 0.5.7's four tracing subscribers (from the unpacked lmcache-cli
      wheel at DIR, imported without torch: lmcache_import.py) registered as
      0.5.7's init_observability registers them under --enable-token-trace,
      exported by the OpenTelemetry SDK and written as the collector's file
      exporter writes: one ExportTraceServiceRequest per line in OTLP/JSON
      (the SDK's own OTLP encoder, protobuf's JSON mapping, ids in hex).
  records A.jsonl B.jsonl
      the mp.request.trace records (session_id, model, start time, input ids)
      of two OTLP JSON files are the same, and there is at least one.
  reports A.json B.json
      two `lmcache bench trace-analyze --format json` reports are the same but
      for the input and HTML file names.
Exit 0 when the check holds; 1 with each failure on its own line.
"""

from __future__ import annotations

import argparse
import base64
import collections
import json
import os
import pickle
import sys
from typing import Any, Iterator

TRACE = "mp.request.trace"


def fail(msgs: list[str]) -> int:
    for m in msgs:
        print(f"server_check: FAIL: {m}")
    return 1 if msgs else 0


def read_events(path: str) -> list[tuple[str, float, str, dict[str, Any]]]:
    out = []
    with open(path, "rb") as f:
        while True:
            try:
                out.append(pickle.load(f))
            except EOFError:
                return out


def read_jsonl(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# -- trees -----------------------------------------------------------------

def expected(seqs: list[str]) -> dict[str, tuple[str, int]]:
    """session -> (cold|warm, tp) for `--seq A:B:TP` runs."""
    out: dict[str, tuple[str, int]] = {}
    for s in seqs:
        a, b, tp = (int(x) for x in s.split(":"))
        for i in range(a, b):
            for kind in ("cold", "warm"):
                out[f"req-{i}-{kind}"] = (kind, tp)
    return out


def client_token_ids(session: str, num_tokens: int) -> list[int] | None:
    """The token ids LMCache 0.5.6's bench client sends for a session, from its
    own helper; None when this LMCache has no such helper."""
    try:
        from lmcache.cli.commands.bench.server_bench.helpers import _build_token_ids
    except Exception:  # noqa: BLE001 - another LMCache
        return None
    seq = int(session.split("-")[1])
    return [int(t) for t in _build_token_ids(seq, num_tokens)]


def check_trees(spans: list[dict[str, Any]], want: dict[str, tuple[str, int]],
                events: list[tuple[str, float, str, dict[str, Any]]] | None,
                num_tokens: int) -> list[str]:
    errs: list[str] = []
    by_id = {s["span_id"]: s for s in spans}
    if len(by_id) != len(spans):
        errs.append(f"{len(spans) - len(by_id)} span ids repeat")
    roots: dict[str, dict[str, Any]] = {}
    kids: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for s in spans:
        sid = s["attributes"].get("session_id")
        if s.get("incomplete"):
            errs.append(f"{s['name']} of {sid} is incomplete")
        if not s.get("parent_span_id"):
            if s["name"] != "request":
                errs.append(f"a root named {s['name']} ({sid}): only requests are roots")
            elif sid in roots:
                errs.append(f"two request roots for {sid}")
            else:
                roots[sid] = s
            continue
        p = by_id.get(s["parent_span_id"])
        if p is None:
            errs.append(f"orphan: {s['name']} of {sid} (parent {s['parent_span_id']} not in the file)")
            continue
        if p["trace_id"] != s["trace_id"]:
            errs.append(f"{s['name']} of {sid} is in another trace than its parent")
        if not (p["start_ns"] <= s["start_ns"] <= s["end_ns"] <= p["end_ns"]):
            errs.append(f"{s['name']} of {sid} is not inside its parent {p['name']}'s time")
        kids[s["parent_span_id"]].append(s)
    if set(roots) != set(want):
        errs.append(f"request roots {sorted(roots)} != the requests the client made {sorted(want)}")
    lookups = {}
    if events is not None:
        lookups = {e[2]: e[3] for e in events if e[0] == "mp.lookup"}
    for sid, (kind, tp) in sorted(want.items()):
        root = roots.get(sid)
        if root is None:
            continue
        n = collections.Counter(k["name"] for k in kids[root["span_id"]])
        for k in kids[root["span_id"]]:
            if k["attributes"].get("session_id", sid) != sid:
                errs.append(f"{k['name']} of {k['attributes'].get('session_id')} under {sid}'s root")
        stores, retrieves = (tp, 0) if kind == "cold" else (0, tp)
        if n["mp.lookup_prefetch"] != 1:
            errs.append(f"{sid}: {n['mp.lookup_prefetch']} mp.lookup_prefetch under its root, want 1")
        if n["mp.store"] != stores:
            errs.append(f"{sid}: {n['mp.store']} mp.store under its root, want {stores}")
        if n["mp.retrieve"] != retrieves:
            errs.append(f"{sid}: {n['mp.retrieve']} mp.retrieve under its root, want {retrieves}")
        if events is None:
            if n[TRACE]:
                errs.append(f"{sid}: {TRACE} without --enable-token-trace")
            continue
        traces = [k for k in kids[root["span_id"]] if k["name"] == TRACE]
        if len(traces) != 1:
            errs.append(f"{sid}: {len(traces)} {TRACE} under its root, want 1 (one lookup)")
            continue
        t, ev = traces[0], lookups.get(sid)
        a = t["attributes"]
        if t["start_ns"] != t["end_ns"]:
            errs.append(f"{sid}: {TRACE} is not zero-length")
        if ev is None:
            errs.append(f"{sid}: no MP_LOOKUP event was recorded")
            continue
        if a.get("lmcache.model") != ev.get("model_name"):
            errs.append(f"{sid}: lmcache.model {a.get('lmcache.model')!r} != {ev.get('model_name')!r}")
        ids = ev.get("token_ids")
        if not isinstance(ids, (list, tuple)) or not ids:
            errs.append(f"{sid}: LMCache's MP_LOOKUP carried no token_ids")
        elif a.get("lmcache.input_ids") != list(ids):
            got = a.get("lmcache.input_ids")
            errs.append(f"{sid}: lmcache.input_ids ({type(got).__name__}, "
                        f"{len(got) if isinstance(got, list) else '-'} values) != the lookup's "
                        f"{len(ids)} token ids")
        sent = client_token_ids(sid, num_tokens)
        if sent is None:  # the check docs/testing.md promises: never skipped quietly
            errs.append(f"{sid}: LMCache's bench client has no _build_token_ids: the token ids "
                        "the client sent cannot be checked")
        elif isinstance(ids, (list, tuple)) and list(ids) != sent:
            errs.append(f"{sid}: the MP_LOOKUP's token ids are not the {len(sent)} the client sent")
    return errs


def otlp_spans(path: str) -> Iterator[dict[str, Any]]:
    for batch in read_jsonl(path):
        for rs in batch.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                yield from ss.get("spans", [])


def check_otlp_same(spans: list[dict[str, Any]], path: str) -> list[str]:
    got = sorted((s["traceId"].lower(), s["spanId"].lower(), s.get("parentSpanId", "").lower(),
                  s["name"]) for s in otlp_spans(path))
    want = sorted((s["trace_id"], s["span_id"], s.get("parent_span_id") or "", s["name"])
                  for s in spans)
    if got != want:
        return [f"{path} holds {len(got)} spans, the span file {len(want)}; "
                f"{len(set(got) ^ set(want))} differ"]
    return []


# -- LMCache 0.5.7's own spans ----------------------------------------------

def lmcache057(events_path: str, out_path: str, root: str) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import lmcache_import

    lm = lmcache_import.load(root)
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    reg = lm.SpanRegistry()
    # 0.5.7's init_observability under --enable-token-trace, in its order
    subs = [lm.MPServerTracingSubscriber(reg, token_trace_enabled=True),
            lm.BlendTracingSubscriber(reg), lm.TimeoutTracingSubscriber(reg),
            lm.TransferPhaseTracingSubscriber(reg)]
    table = [s.get_subscriptions() for s in subs]
    errors: collections.Counter[str] = collections.Counter()
    unknown: collections.Counter[str] = collections.Counter()
    n = 0
    for etype, ts, sid, meta in read_events(events_path):
        try:
            et = lm.EventType(etype)
        except ValueError:
            unknown[etype] += 1
            continue
        ev = lm.Event(event_type=et, timestamp=ts, metadata=dict(meta), session_id=sid)
        n += 1
        for s, t in zip(subs, table):
            cb = t.get(et)
            if cb is None:
                continue
            try:  # as 0.5.7's EventBus._drain_all: counted, the next one runs
                cb(ev)
            except Exception as x:  # noqa: BLE001
                errors[f"{type(s).__name__} on {etype}: {type(x).__name__}: {x}"] += 1
    for s in reversed(subs):
        s.shutdown()
    spans = list(lm.exporter.get_finished_spans())
    with open(out_path, "w", encoding="utf-8") as f:
        for i in range(0, len(spans), 512):  # the SDK's batch size
            d = json_format.MessageToDict(encode_spans(spans[i:i + 512]),
                                          use_integers_for_enums=True)  # OTLP/JSON: enums as ints
            for rs in d.get("resourceSpans", []):  # OTLP/JSON: ids in hex, not base64
                for ss in rs.get("scopeSpans", []):
                    for sp in ss.get("spans", []):
                        for k in ("traceId", "spanId", "parentSpanId"):
                            if sp.get(k):
                                sp[k] = base64.b64decode(sp[k]).hex()
            f.write(json.dumps(d, separators=(",", ":")) + "\n")
    names = collections.Counter(s.name for s in spans)
    print(f"server_check: LMCache {lm.version}'s subscribers: {n} events in, "
          f"{len(spans)} spans out ({dict(names)}) -> {out_path}")
    for k, c in sorted(errors.items()):
        print(f"server_check: LMCache {lm.version}: callback raised {c}x: {k}")
    for k, c in sorted(unknown.items()):
        print(f"server_check: LMCache {lm.version} has no event type {k} ({c} events)")
    return 0 if names[TRACE] else fail([f"LMCache {lm.version}'s subscribers made no {TRACE} span"])


# -- trace-analyze's inputs and reports ---------------------------------------

def value(v: dict[str, Any]) -> Any:
    if "arrayValue" in v:
        return [value(x) for x in v["arrayValue"].get("values", [])]
    if "intValue" in v:
        return int(v["intValue"])
    for k in ("stringValue", "boolValue", "doubleValue"):
        if k in v:
            return v[k]
    return None


def records(path: str) -> list[tuple[str, str, int, list[int]]]:
    out = []
    for s in otlp_spans(path):
        if s.get("name") != TRACE:
            continue
        a = {x["key"]: value(x["value"]) for x in s.get("attributes", [])}
        out.append((a.get("session_id"), a.get("lmcache.model"), int(s["startTimeUnixNano"]),
                    a.get("lmcache.input_ids")))
    return sorted(out, key=lambda r: (r[2], r[0]))


def check_records(a: str, b: str) -> list[str]:
    ra, rb = records(a), records(b)
    if not ra:
        return [f"{a} holds no {TRACE} span"]
    if ra == rb:
        print(f"server_check: {len(ra)} {TRACE} records the same in {a} and {b}")
        return []
    errs = [f"{TRACE} records differ: {len(ra)} in {a}, {len(rb)} in {b}"]
    for x, y in zip(ra, rb):
        if x != y:
            errs.append(f"first difference: {x[:3]} ({len(x[3] or [])} ids) vs "
                        f"{y[:3]} ({len(y[3] or [])} ids)")
            break
    return errs


def check_reports(a: str, b: str) -> list[str]:
    def load(p: str) -> Any:
        with open(p, encoding="utf-8") as f:
            r = json.load(f)
        for k in ("input", "html"):
            r.get("metrics", {}).get("trace", {}).pop(k, None)
        return r
    ra, rb = load(a), load(b)
    if ra != rb:
        return [f"trace-analyze reports differ:\n{json.dumps(ra, indent=1)}\nvs\n{json.dumps(rb, indent=1)}"]
    if not ra.get("metrics", {}).get("trace", {}).get("requests"):
        return [f"{a}: trace-analyze found no requests"]
    print(f"server_check: trace-analyze reports the same: {json.dumps(ra['metrics'], separators=(',', ':'))}")
    return []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("trees")
    t.add_argument("spans")
    t.add_argument("--seq", action="append", required=True, metavar="A:B:TP")
    t.add_argument("--token-trace", metavar="EVENTS.pickle")
    t.add_argument("--num-tokens", type=int, default=512)
    t.add_argument("--otlp-json")
    lm = sub.add_parser("lmcache057")
    lm.add_argument("events")
    lm.add_argument("out")
    lm.add_argument("--root", required=True)
    r = sub.add_parser("records")
    r.add_argument("a")
    r.add_argument("b")
    rp = sub.add_parser("reports")
    rp.add_argument("a")
    rp.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "trees":
        spans = read_jsonl(args.spans)
        events = read_events(args.token_trace) if args.token_trace else None
        errs = check_trees(spans, expected(args.seq), events, args.num_tokens)
        if args.otlp_json:
            errs += check_otlp_same(spans, args.otlp_json)
        if not errs:
            names = collections.Counter(s["name"] for s in spans)
            print(f"server_check: {len(spans)} spans in {args.spans}: {dict(names)}: "
                  "every request a root, no orphans, children in place")
        return fail(errs)
    if args.cmd == "lmcache057":
        return lmcache057(args.events, args.out, args.root)
    if args.cmd == "records":
        return fail(check_records(args.a, args.b))
    return fail(check_reports(args.a, args.b))


if __name__ == "__main__":
    sys.exit(main())
