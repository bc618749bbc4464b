"""tests/lmcache/compare.py — two span forests, compared span by span.

Each side is a list of ``Span`` (``from_otel`` for LMCache's finished SDK
spans, ``from_cbt_jsonl`` for cbt's span JSON lines, docs/spans.md). Spans
are matched across the sides by (session_id, name, start time), in end-time
order within a key; what is left is matched by (session_id, name) in
start-time order; what is still left exists on one side only. For every
matched pair the comparison checks start and end (ns), kind, status, the
parent (the counterpart of the LMCache parent, or a root on both sides),
every attribute's presence, type and value, and the span events. Each
difference is a ``Diff``; ``group()`` sorts them by kind for the report.

A span that LMCache ended at shutdown (its end is at or after the shutdown
wall time the driver recorded) and that cbt marked incomplete is not
compared on its end: both ended it "whenever the tracer stopped".
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass
class Span:
    side: str                     # "lmcache" / "cbt"
    span_id: str
    parent_id: str | None         # None: a root (LMCache: no parent; cbt: "")
    trace_id: str
    name: str
    start: int                    # ns
    end: int                      # ns
    kind: str                     # "internal", "server", ...
    status: str                   # "unset", "ok", "error"
    attrs: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    at_shutdown: bool = False     # LMCache: ended by shutdown; cbt: "incomplete"
    index: int = 0                # position in its side's list

    @property
    def session(self) -> str:
        v = self.attrs.get("session_id", "")
        return v if isinstance(v, str) else str(v)

    def short(self) -> str:
        return (f"{self.name} [{self.start}, {self.end}] session={self.session or '-'}"
                f"{' (root)' if self.parent_id is None else ''}")


def _attrs(a: Any) -> dict[str, Any]:
    """OpenTelemetry keeps a sequence attribute as a tuple; cbt's JSON writes a list."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dict(a or {}).items()}


def from_otel(spans: Iterable[Any], shutdown_ns: int) -> list[Span]:
    out = []
    for i, s in enumerate(spans):
        parent = f"{s.parent.span_id:016x}" if s.parent is not None else None
        out.append(Span(
            "lmcache", f"{s.context.span_id:016x}", parent, f"{s.context.trace_id:032x}",
            s.name, int(s.start_time), int(s.end_time), s.kind.name.lower(),
            s.status.status_code.name.lower(), _attrs(s.attributes),
            [(e.name, int(e.timestamp), _attrs(e.attributes)) for e in s.events],
            int(s.end_time) >= shutdown_ns, i))
    return out


def from_cbt_jsonl(lines: Iterable[str]) -> list[Span]:
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        d = json.loads(line)
        out.append(Span(
            "cbt", d["span_id"], d["parent_span_id"] or None, d["trace_id"], d["name"],
            int(d["start_ns"]), int(d["end_ns"]), d["kind"], d["status"],
            dict(d.get("attributes", {})),
            [(e["name"], int(e["time_unix_nano"]), dict(e.get("attributes", {})))
             for e in d.get("events", [])],
            bool(d.get("incomplete")), len(out)))
    return out


@dataclass
class Diff:
    kind: str                 # see KINDS
    name: str                 # the span's name
    key: str                  # attribute name / sub-kind / "" (groups the report)
    detail: str               # a sentence for examples
    l: Span | None
    c: Span | None
    lv: Any = None            # the LMCache value (attributes, times, ...)
    cv: Any = None            # the cbt value

    @property
    def session(self) -> str:
        return (self.l or self.c).session


KINDS = (
    "span_missing_in_cbt", "span_only_in_cbt", "parent_differs", "start_differs",
    "end_differs", "kind_differs", "status_differs", "attr_missing_in_cbt",
    "attr_only_in_cbt", "attr_type_differs", "attr_value_differs", "events_differ",
)


def _elem_types(v: list) -> list[type]:
    return [type(x) for x in v]


def _tname(v: Any) -> str:
    if isinstance(v, list):
        return f"list[{','.join(sorted({_tname(x) for x in v}))}]"
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(type(v), type(v).__name__)


@dataclass
class Result:
    pairs: list[tuple[Span, Span]]
    diffs: list[Diff]
    l_only: list[Span]
    c_only: list[Span]
    match_l: dict[int, Span]   # LMCache index -> cbt span
    match_c: dict[int, Span]   # cbt index -> LMCache span


def match(lm: list[Span], cb: list[Span]) -> tuple[dict[int, Span], dict[int, Span]]:
    ml: dict[int, Span] = {}
    mc: dict[int, Span] = {}

    def pass_(keyf, orderf):
        gl: dict[Any, list[Span]] = defaultdict(list)
        gc: dict[Any, list[Span]] = defaultdict(list)
        for s in lm:
            if s.index not in ml:
                gl[keyf(s)].append(s)
        for s in cb:
            if s.index not in mc:
                gc[keyf(s)].append(s)
        for k, ls in gl.items():
            cs = gc.get(k)
            if not cs:
                continue
            ls.sort(key=orderf)
            cs.sort(key=orderf)
            for a, b in zip(ls, cs):
                ml[a.index] = b
                mc[b.index] = a

    pass_(lambda s: (s.session, s.name, s.start), lambda s: (s.end, s.index))
    pass_(lambda s: (s.session, s.name), lambda s: (s.start, s.end, s.index))
    return ml, mc


def compare(lm: list[Span], cb: list[Span]) -> Result:
    ml, mc = match(lm, cb)
    by_id_l = {s.span_id: s for s in lm}
    by_id_c = {s.span_id: s for s in cb}
    diffs: list[Diff] = []
    pairs = []
    for s in lm:
        c = ml.get(s.index)
        if c is None:
            diffs.append(Diff("span_missing_in_cbt", s.name, "", f"{s.short()} has no cbt span",
                              s, None))
            continue
        pairs.append((s, c))
        diffs.extend(_compare_pair(s, c, by_id_l, by_id_c, ml))
    for c in cb:
        if c.index not in mc:
            diffs.append(Diff("span_only_in_cbt", c.name, "", f"{c.short()} only in cbt", None, c))
    return Result(pairs, diffs, [s for s in lm if s.index not in ml],
                  [c for c in cb if c.index not in mc], ml, mc)


def _parent_diff(l: Span, c: Span, by_id_l, by_id_c, ml) -> Diff | None:
    lp = by_id_l.get(l.parent_id) if l.parent_id else None
    cp = by_id_c.get(c.parent_id) if c.parent_id else None
    if l.parent_id is None and c.parent_id is None:
        return None
    if l.parent_id is None:
        pn = cp.name if cp else "a span cbt did not export"
        return Diff("parent_differs", l.name, f"root in lmcache, child of {pn} in cbt",
                    f"{l.short()}: a root in LMCache, under {pn} in cbt", l, c, None,
                    cp.name if cp else None)
    if c.parent_id is None:
        pn = lp.name if lp else "a span LMCache did not export"
        return Diff("parent_differs", l.name, f"child of {pn} in lmcache, root in cbt",
                    f"{l.short()}: under {pn} in LMCache, a root in cbt", l, c,
                    lp.name if lp else None, None)
    if lp is None:
        return Diff("parent_differs", l.name, "lmcache parent not exported",
                    f"{l.short()}: its LMCache parent was never exported", l, c)
    want = ml.get(lp.index)
    if want is not None and want.span_id == c.parent_id:
        return None
    cpn = cp.name if cp else "a span cbt did not export"
    if want is None:
        return Diff("parent_differs", l.name, f"lmcache parent {lp.name} has no cbt span",
                    f"{l.short()}: LMCache parent {lp.short()} has no counterpart; cbt parent "
                    f"is {cpn}", l, c, lp.name, cpn)
    return Diff("parent_differs", l.name, f"under {lp.name} in lmcache, another {cpn} in cbt"
                if cpn == lp.name else f"under {lp.name} in lmcache, under {cpn} in cbt",
                f"{l.short()}: parent {lp.short()} in LMCache, {cp.short() if cp else cpn} in cbt",
                l, c, lp.name, cpn)


def _compare_pair(l: Span, c: Span, by_id_l, by_id_c, ml) -> list[Diff]:
    out = []
    p = _parent_diff(l, c, by_id_l, by_id_c, ml)
    if p:
        out.append(p)
    if l.start != c.start:
        out.append(Diff("start_differs", l.name, "", f"{l.short()}: cbt starts at {c.start} "
                        f"({(c.start - l.start) / 1e3:+.3f} us)", l, c, l.start, c.start))
    if l.end != c.end and not (l.at_shutdown and c.at_shutdown):
        sub = ("ended at shutdown in lmcache only" if l.at_shutdown else
               "incomplete in cbt only" if c.at_shutdown else "")
        out.append(Diff("end_differs", l.name, sub, f"{l.short()}: cbt ends at {c.end} "
                        f"({(c.end - l.end) / 1e3:+.3f} us){' ' + sub if sub else ''}",
                        l, c, l.end, c.end))
    if l.kind != c.kind:
        out.append(Diff("kind_differs", l.name, f"{l.kind} -> {c.kind}",
                        f"{l.short()}: kind {l.kind} in LMCache, {c.kind} in cbt", l, c,
                        l.kind, c.kind))
    if l.status != c.status:
        out.append(Diff("status_differs", l.name, f"{l.status} -> {c.status}",
                        f"{l.short()}: status {l.status} in LMCache, {c.status} in cbt", l, c,
                        l.status, c.status))
    for k, lv in l.attrs.items():
        if k not in c.attrs:
            out.append(Diff("attr_missing_in_cbt", l.name, k, f"{l.short()}: {k}={lv!r} "
                            "not on the cbt span", l, c, lv, None))
            continue
        cv = c.attrs[k]
        if type(lv) is not type(cv) or (isinstance(lv, list) and _elem_types(lv) != _elem_types(cv)):
            out.append(Diff("attr_type_differs", l.name, k, f"{l.short()}: {k} is "
                            f"{_tname(lv)} {lv!r} in LMCache, {_tname(cv)} {cv!r} in cbt",
                            l, c, lv, cv))
        elif lv != cv:
            out.append(Diff("attr_value_differs", l.name, k, f"{l.short()}: {k} is {lv!r} "
                            f"in LMCache, {cv!r} in cbt", l, c, lv, cv))
    for k, cv in c.attrs.items():
        if k not in l.attrs:
            out.append(Diff("attr_only_in_cbt", l.name, k, f"{l.short()}: {k}={cv!r} only "
                            "on the cbt span", l, c, None, cv))
    if l.events != c.events:
        names = ",".join(e[0] for e in l.events) or "none"
        out.append(Diff("events_differ", l.name, f"lmcache events: {names}",
                        f"{l.short()}: span events {l.events!r} in LMCache, {c.events!r} in cbt",
                        l, c, l.events, c.events))
    return out


def trees(spans: list[Span]) -> dict[str, list[Span]]:
    """trace id -> its spans."""
    out: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        out[s.trace_id].append(s)
    return out
