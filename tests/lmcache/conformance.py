"""tests/lmcache/conformance.py — cbt's spans against LMCache's own (0.5.6, or
0.5.7rc3 with token traces on), for one seeded event stream.

  python conformance.py --cbt PATH --wheel-root DIR [--lmcache-version V]
                        [--seed S] [--report] [--workdir DIR] [--mp N] [--cb N]
                        [--mp-root-end RULE]

1. generator.generate(seed, version=V) makes the stream (LMCache events with
   explicit times, interleaved requests of every scenario, in version V's
   payloads).
2. LMCache's MPServerTracingSubscriber, BlendTracingSubscriber,
   TimeoutTracingSubscriber and TransferPhaseTracingSubscriber, sharing one
   SpanRegistry and registered in the server's order (0.5.7's MP one with
   token_trace_enabled, as --enable-token-trace wires it), get every event by
   direct calls to the callbacks their get_subscriptions() name (EventBus
   .publish would overwrite the times), in time order, then shutdown() in
   reverse order as EventBus.stop does; spans from an InMemorySpanExporter.
3. translate.lmcache_to_cbt writes the same events as cbt replay lines;
   `cbt replay --drop-unfit` turns them into cbt's spans (with
   --mp-root-end transfer_end where the build has it, else request_end; with
   --token-trace for 0.5.7).
4. compare.compare matches and compares the two forests; intended.INTENDED
   says which differences are on purpose for that version. Any other one fails the run
   (exit 1) with the report; --report prints the report and exits 0.

Every run first checks itself (selftest): the translation on known events,
and the comparison finding nothing between a forest and its copy and
finding each kind of difference planted in one. Exit 0: no unexpected
difference (or --report); 1: unexpected differences or a failed selftest;
2: the harness could not run (bad arguments, cbt replay refused its input).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare  # noqa: E402
import generator  # noqa: E402
import intended  # noqa: E402
from translate import lmcache_to_cbt  # noqa: E402

EXAMPLES = 3


def drive_lmcache(lm, stream, token_trace: bool) -> tuple[list, int, Counter]:
    """Run the stream through LMCache's subscribers; (spans, shutdown ns, exceptions)."""
    reg = lm.SpanRegistry()
    mp = (lm.MPServerTracingSubscriber(reg, token_trace_enabled=True) if token_trace
          else lm.MPServerTracingSubscriber(reg))
    subs = [mp, lm.BlendTracingSubscriber(reg),
            lm.TimeoutTracingSubscriber(reg), lm.TransferPhaseTracingSubscriber(reg)]
    table: dict = defaultdict(list)
    for s in subs:  # registration order, as EventBus dispatches
        for et, cb in s.get_subscriptions().items():
            table[et].append((type(s).__name__, cb))
    exc: Counter = Counter()
    for e in stream.events:
        ev = lm.Event(event_type=lm.EventType(e.type), timestamp=e.ts,
                      metadata=copy.deepcopy(e.meta), session_id=e.session)
        for name, cb in table.get(ev.event_type, ()):
            try:  # as EventBus._drain_all: log, count, go on
                cb(ev)
            except Exception as x:  # noqa: BLE001
                exc[f"{name}: {type(x).__name__}: {x}"] += 1
    shutdown_ns = time.time_ns()
    for s in reversed(subs):
        s.shutdown()
    return list(lm.exporter.get_finished_spans()), shutdown_ns, exc


def to_cbt_lines(stream) -> tuple[list[dict], list[dict]]:
    class _E:  # the four fields of an LMCache Event
        __slots__ = ("event_type", "timestamp", "metadata", "session_id")

    out, notes = [], []
    for e in stream.events:
        x = _E()
        x.event_type, x.timestamp, x.metadata, x.session_id = e.type, e.ts, e.meta, e.session
        out.extend(lmcache_to_cbt(x, notes))
    return out, notes


def cbt_root_end_rule(cbt: str, want: str | None, workdir: str) -> tuple[str, str]:
    """(rule to run with, why): transfer_end (LMCache's) when this build has it."""
    if want:
        return want, "asked for"
    empty = os.path.join(workdir, "empty.jsonl")
    open(empty, "w").close()
    p = subprocess.run([cbt, "replay", "--events", empty, "--mp-root-end", "transfer_end"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode == 0:
        return "transfer_end", "LMCache's rule, supported by this build"
    if p.returncode == 2 and "not supported by this build" in p.stderr:
        return "request_end", "transfer_end is not supported by this build"
    raise RuntimeError(f"cbt replay --mp-root-end probe: exit {p.returncode}: {p.stderr}")


def run_cbt(cbt: str, events: list[dict], rule: str, workdir: str,
            token_trace: bool) -> tuple[list[str], str, set[tuple[str, str]]]:
    """cbt's span lines, replay's summary, and the (session, key) of every
    value replay dropped because this build's event could not hold it."""
    ev_path = os.path.join(workdir, "cbt-events.jsonl")
    sp_path = os.path.join(workdir, "cbt-spans.jsonl")
    dr_path = os.path.join(workdir, "cbt-dropped.jsonl")
    with open(ev_path, "w") as f:
        for e in events:
            f.write(json.dumps(e, ensure_ascii=False, allow_nan=False) + "\n")
    p = subprocess.run([cbt, "replay", "--events", ev_path, "--spans", sp_path, "--drop-unfit",
                        "--dropped", dr_path, "--mp-root-end", rule]
                       + (["--token-trace"] if token_trace else []),
                       capture_output=True, text=True, timeout=90)
    if p.returncode != 0:
        raise RuntimeError(f"cbt replay exited {p.returncode}:\n{p.stderr}")
    with open(dr_path) as f:
        dropped = {(d["session"], d["key"]) for d in map(json.loads, f)}
    with open(sp_path) as f:
        return f.read().splitlines(), p.stderr.strip(), dropped


# ---- the report ---------------------------------------------------------------------------

def report(res, ctx, meta: dict, out) -> int:
    """Print the report; the number of unexpected differences."""
    w = out.write
    by_intended: dict[str, list] = defaultdict(list)
    unexpected = []
    for d in res.diffs:
        i = intended.classify(d, ctx)
        (by_intended[i] if i else unexpected).append(d)
    w(f"lmcache_conformance: seed {meta['seed']}, {meta['requests']} requests "
      f"({meta['mp']} MP, {meta['cb']} CB, {meta['overlap']} tensor-parallel overlap), "
      f"LMCache {meta['lmcache_version']}\n")
    w(f"  events: {meta['lm_events']} LMCache -> {meta['cbt_events']} cbt replay lines; "
      f"translation dropped {meta['notes']} values ({meta['notes_by_why']})\n")
    w(f"  cbt replay: {meta['replay']}\n")
    w(f"  MP root-end rule: {meta['rule']} ({meta['rule_why']})\n")
    if meta["lm_exc"]:
        w("  LMCache subscriber exceptions (caught, as EventBus does):\n")
        for k, n in meta["lm_exc"].most_common():
            w(f"    {n:6d}  {k}\n")
    w(f"  spans: LMCache {meta['n_l']}, cbt {meta['n_c']}, matched {len(res.pairs)}; "
      f"traces: LMCache {meta['trees_l']} ({meta['trees_same']} with no unexpected "
      "difference), "
      f"cbt {meta['trees_c']}\n")
    w(f"\nintended differences: {sum(len(v) for v in by_intended.values())}\n")
    for e in intended.for_version(ctx.version):
        ds = by_intended.get(e.id, [])
        w(f"  {len(ds):6d}  {e.id}: {e.reason} [{e.doc}]\n")
    w(f"\nunexpected differences: {len(unexpected)}\n")
    limited = [d for d in unexpected if is_limited(d, meta)]
    if limited:
        w(f"  ({len(limited)} of them, marked [limit], involve a value cbt replay dropped "
          "because this build's event cannot hold it: --drop-unfit, cbt-dropped.jsonl)\n")
    groups: dict[tuple, list] = defaultdict(list)
    for d in unexpected:
        groups[(d.kind, d.name, d.key, is_limited(d, meta))].append(d)
    kinds = Counter(d.kind for d in unexpected)
    for kind in compare.KINDS:
        if not kinds[kind]:
            continue
        w(f"  {kind}: {kinds[kind]}\n")
        for (k, name, key, lim), ds in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            if k != kind:
                continue
            scen = Counter(meta["scenario"].get(d.session, "-") for d in ds)
            w(f"    {len(ds):6d}  {name}{' ' + key if key else ''}{' [limit]' if lim else ''}"
              "   scenarios: "
              + ", ".join(f"{s} {n}" for s, n in scen.most_common(4)) + "\n")
            for d in ds[:EXAMPLES]:
                w(f"              e.g. {d.detail}\n")
    return len(unexpected)


def is_limited(d, meta) -> bool:
    """d is about an attribute whose event value cbt replay had to drop."""
    return d.kind.startswith("attr_") and (d.session, d.key) in meta["limit_dropped"]


def write_json(res, ctx, meta, path: str) -> None:
    rows = []
    for d in res.diffs:
        rows.append({"kind": d.kind, "name": d.name, "key": d.key, "session": d.session,
                     "scenario": meta["scenario"].get(d.session, ""),
                     "intended": intended.classify(d, ctx), "limit": is_limited(d, meta),
                     "detail": d.detail,
                     "lmcache": repr(d.lv) if d.lv is not None else None,
                     "cbt": repr(d.cv) if d.cv is not None else None})
    with open(path, "w") as f:
        json.dump({"meta": {k: v for k, v in meta.items()
                            if k not in ("scenario", "lm_exc", "limit_dropped")},
                   "diffs": rows}, f, indent=1)


# ---- the self-check ----------------------------------------------------------------------

def selftest() -> list[str]:
    """Problems found in the harness itself (empty: none)."""
    bad = []

    class E:
        def __init__(self, t, ts, sid="", meta=None):
            self.event_type, self.timestamp, self.session_id, self.metadata = t, ts, sid, meta or {}

    notes: list = []
    ts = 1700000000.123456789
    out = lmcache_to_cbt(E("mp.store.start", ts, "r1", {
        "device": "cuda:0", "engine_id": 3, "model_name": "m", "ratio": 0.5, "ok": False,
        "keys": [1], "w": None, "d": {}, "mixed": [1, "a"]}), notes)
    want = {"type": "mp.store.start", "ts_ns": int(ts * 1e9), "session": "r1", "pair": 3,
            "meta": {"device": "cuda:0", "engine_id": 3, "model_name": "m", "ratio": 0.5,
                     "ok": False}}
    # a homogeneous list is an array value where the bridge's rules keep lists
    # (python/cbt/lmcache/_translate.py), dropped where they do not yet
    if "keys" not in {n["key"] for n in notes}:
        want["meta"]["keys"] = [1]
    if out != [want] or not {"d", "w", "mixed"} <= {n["key"] for n in notes}:
        bad.append(f"translate: {out} / {notes}")
    if type(out[0]["meta"]["ok"]) is not bool or type(out[0]["meta"]["engine_id"]) is not int:
        bad.append("translate: types not kept")
    out = lmcache_to_cbt(E("mp.transfer.phase_samples", 5.0, "", {
        "samples": [(0, 1, 0, 0.5, 100, "r1#1", 1.0, 1.5), (1, 1, 0, 1.0, 200, "r1#1", 1.5, 2.5),
                    (9,)], "ended_transfer_key": "r1#1"}), notes)
    if (len(out) != 3 or out[0]["meta"] != dict(zip(
            ("phase", "direction", "device_index", "elapsed_ms", "nbytes", "transfer_key",
             "start_time_s", "end_time_s"), (0, 1, 0, 0.5, 100, "r1#1", 1.0, 1.5)))
            or out[2]["meta"] != {"ended_transfer_key": "r1#1"} or "session" in out[2]
            or not any(n["key"] == "samples[2]" for n in notes)):
        bad.append(f"translate phase samples: {out}")
    out = lmcache_to_cbt(E("cb.scatter.end", 7.0, "r2", {"success": True, "worker_id": None}))
    if "pair" in out[0] or out[0]["meta"] != {"success": True}:
        bad.append(f"translate worker_id None: {out}")

    # comparison: a forest against its copy, then one planted difference each
    S = compare.Span

    def forest():
        return [S("x", "01", None, "t1", "request", 10, 90, "internal", "unset",
                  {"session_id": "a", "hit_tokens": 5}, [], False, 0),
                S("x", "02", "01", "t1", "mp.store", 20, 30, "internal", "unset",
                  {"session_id": "a", "n": "7"}, [], False, 1),
                S("x", "03", "01", "t1", "mp.retrieve", 40, 50, "internal", "unset",
                  {"session_id": "a"}, [("e", 40, {})], False, 2)]
    if compare.compare(forest(), forest()).diffs:
        bad.append("compare: a forest differs from its copy")
    plants = {
        "end_differs": lambda f: setattr(f[1], "end", 31),
        "start_differs": lambda f: setattr(f[2], "start", 41),
        "attr_type_differs": lambda f: f[1].attrs.__setitem__("n", 7),
        "attr_value_differs": lambda f: f[0].attrs.__setitem__("hit_tokens", 6),
        "attr_only_in_cbt": lambda f: f[0].attrs.__setitem__("extra", 1),
        "attr_missing_in_cbt": lambda f: f[0].attrs.pop("hit_tokens"),
        "kind_differs": lambda f: setattr(f[0], "kind", "server"),
        "status_differs": lambda f: setattr(f[1], "status", "error"),
        "parent_differs": lambda f: setattr(f[2], "parent_id", None),
        "events_differ": lambda f: setattr(f[2], "events", []),
        "span_missing_in_cbt": lambda f: f.pop(),
        "span_only_in_cbt": lambda f: f.append(S("x", "04", "01", "t1", "cb.classify", 1, 2,
                                                 "internal", "unset", {"session_id": "a"},
                                                 [], False, 3)),
    }
    for kind, plant in plants.items():
        f = forest()
        plant(f)
        got = {d.kind for d in compare.compare(forest(), f).diffs}
        if kind not in got:
            bad.append(f"compare: a planted {kind} was not found (found {sorted(got)})")
    # an intended entry recognises its case and only it
    ctx = intended.Context("request_end", "0.5.6")
    d = compare.compare(forest(), [s for s in forest()])
    f = forest()
    f[1].attrs["n"] = 7
    ds = compare.compare(forest(), f).diffs
    if [intended.classify(x, ctx) for x in ds] != ["typed-child-attributes"]:
        bad.append("intended: a typed attribute is not typed-child-attributes")
    f = forest()
    f[1].attrs["n"] = 8
    ds = compare.compare(forest(), f).diffs
    if [intended.classify(x, ctx) for x in ds] != [None]:
        bad.append("intended: a wrong value passes as intended")
    del d
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cbt", required=True, help="the cbt command")
    ap.add_argument("--wheel-root", required=True, help="the unpacked lmcache wheel")
    ap.add_argument("--lmcache-version", choices=("0.5.6", "0.5.7"), default="0.5.6",
                    help="the release the wheel root holds: its stream shape, its "
                         "intended differences; 0.5.7 runs with token traces on")
    ap.add_argument("--seed", type=int, default=20240506)
    ap.add_argument("--mp", type=int, default=300, help="MP requests")
    ap.add_argument("--cb", type=int, default=300, help="CB requests")
    ap.add_argument("--overlap", type=int, default=6,
                    help="tensor-parallel requests with overlapping STARTs, per path")
    ap.add_argument("--mp-root-end", choices=("request_end", "transfer_end"),
                    help="the rule to replay with (default: transfer_end when the build has it)")
    ap.add_argument("--workdir", help="where the event, span and report files go")
    ap.add_argument("--report", action="store_true",
                    help="print the report and exit 0 whatever it finds")
    a = ap.parse_args(argv)

    problems = selftest()
    if problems:
        print("lmcache_conformance: the harness failed its selftest:\n  " + "\n  ".join(problems))
        return 1

    workdir = a.workdir or tempfile.mkdtemp(prefix="cbt-lmcache-")
    os.makedirs(workdir, exist_ok=True)
    logging.basicConfig(level=logging.ERROR)
    for name in ("lmcache", "opentelemetry"):
        logging.getLogger(name).setLevel(logging.CRITICAL)

    import lmcache_import  # after the selftest: it installs the tracer provider
    lm = lmcache_import.load(a.wheel_root)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("lmcache", "opentelemetry")):
            logging.getLogger(name).setLevel(logging.CRITICAL)

    v = a.lmcache_version
    if not lm.version.startswith(v):
        print(f"lmcache_conformance: {a.wheel_root} holds LMCache {lm.version}, not {v}")
        return 2
    token_trace = v != "0.5.6"
    stream = generator.generate(a.seed, a.mp, a.cb, a.overlap, version=v)
    lm_spans, shutdown_ns, lm_exc = drive_lmcache(lm, stream, token_trace)
    cbt_events, notes = to_cbt_lines(stream)
    try:
        rule, why = cbt_root_end_rule(a.cbt, a.mp_root_end, workdir)
        cbt_lines, replay_summary, limit_dropped = run_cbt(a.cbt, cbt_events, rule, workdir,
                                                           token_trace)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as x:
        print(f"lmcache_conformance: {x}")
        return 2

    L = compare.from_otel(lm_spans, shutdown_ns)
    C = compare.from_cbt_jsonl(cbt_lines)
    res = compare.compare(L, C)
    ctx = intended.Context.build(cbt_events, notes, rule, v)
    tl, tc = compare.trees(L), compare.trees(C)
    with_diff = {d.l.trace_id for d in res.diffs
                 if d.l is not None and intended.classify(d, ctx) is None}
    meta = {
        "seed": a.seed, "mp": a.mp, "cb": a.cb, "overlap": 2 * a.overlap,
        "requests": len(stream.scenario), "lmcache_version": lm.version,
        "lm_events": len(stream.events), "cbt_events": len(cbt_events), "notes": len(notes),
        "notes_by_why": ", ".join(f"{k} {n}" for k, n in
                                  Counter(n["why"] for n in notes).most_common()),
        "replay": replay_summary.replace("\n", "\n              "),
        "rule": rule, "rule_why": why, "lm_exc": lm_exc, "n_l": len(L), "n_c": len(C),
        "trees_l": len(tl), "trees_c": len(tc),
        "trees_same": sum(1 for t in tl if t not in with_diff), "scenario": stream.scenario,
        "limit_dropped": limit_dropped,
    }
    n_bad = report(res, ctx, meta, sys.stdout)
    write_json(res, ctx, meta, os.path.join(workdir, "report.json"))
    print(f"\n(files: {workdir}: cbt-events.jsonl, cbt-spans.jsonl, report.json)")
    if n_bad and not a.report:
        print(f"lmcache_conformance: FAILED: {n_bad} differences no INTENDED entry explains "
              "(tests/lmcache/intended.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
