"""tests/lmcache/intended.py — the differences between LMCache's spans (0.5.6,
0.5.7rc3) and cbt's that are intended, each with its reason, where the docs
say so, the LMCache versions it applies to, and a predicate that recognises
it.

A difference the conformance test finds (compare.Diff) that no entry
recognises fails the test. Keep the list short: an entry is a decision that
cbt differs on purpose, not a way to silence a finding. The list is the
one docs/spans.md ("Intended differences from LMCache 0.5.6") explains.

Predicates get the Diff and a Context built from the event stream (what was
published, not the scenario labels), so they recognise the situation, not
the test case.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from compare import Diff

ROOTS = ("request", "cb.request")
# spans cbt builds and LMCache 0.5.6 has no builder for (docs §6 "Spans only cbt builds")
CBT_ONLY_SPANS = ("cb.classify", "cb.l2_load", "gpu.kernel", "cb.gather", "cb.rerope")
# the span a START event opens, for the crossing-TP predicate
_START_SPAN = {
    "mp.store.start": "mp.store", "mp.retrieve.start": "mp.retrieve",
    "mp.lookup_prefetch.start": "mp.lookup_prefetch", "cb.lookup.start": "cb.lookup",
    "cb.retrieve.start": "cb.retrieve", "cb.scatter.start": "cb.scatter",
    "cb.fingerprint_match.start": "cb.fingerprint_match",
    "cb.prefix_lookup.start": "cb.prefix_lookup",
    "cb.coordinator_match.start": "cb.coordinator_match",
    "cb.sparse_prefetch.start": "cb.sparse_prefetch",
}
_END_SPAN = {k[:-len(".start")] + ".end": v for k, v in _START_SPAN.items()}


@dataclass
class Context:
    """What the predicates may know about the run."""

    mp_root_end: str                                  # the rule cbt ran with
    version: str = "0.5.6"                            # the LMCache release compared
    request_end_ns: dict[tuple[str, str], set[int]] = field(default_factory=dict)
    # (session, span name) pairs where a START came while LMCache's one
    # pending slot for that (session, operation) was taken
    overlapping: set[tuple[str, str]] = field(default_factory=set)
    # session -> metadata keys translate.lmcache_to_cbt left out
    dropped_keys: dict[str, set[str]] = field(default_factory=dict)
    # session -> the metadata keys its mp.lookup_prefetch.end events carried
    lookup_end_keys: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, cbt_events: list[dict[str, Any]], notes: list[dict[str, Any]],
              mp_root_end: str, version: str = "0.5.6") -> "Context":
        ctx = cls(mp_root_end, version)
        lek: dict[str, set[str]] = defaultdict(set)
        ends: dict[tuple[str, str], set[int]] = defaultdict(set)
        slot: dict[tuple[str, str], bool] = {}
        for e in cbt_events:  # publish order
            sid, t = e.get("session", ""), e["type"]
            if t in ("mp.request.end", "cb.request.end"):
                ends[(sid, "request" if t.startswith("mp.") else "cb.request")].add(e["ts_ns"])
            elif t in _START_SPAN:
                k = (sid, _START_SPAN[t])
                if slot.get(k):
                    ctx.overlapping.add(k)
                slot[k] = True
            elif t in _END_SPAN:
                slot[(sid, _END_SPAN[t])] = False
            if t == "mp.lookup_prefetch.end":
                lek[sid] |= set(e.get("meta", {}))
        ctx.lookup_end_keys = dict(lek)
        ctx.request_end_ns = dict(ends)
        dk: dict[str, set[str]] = defaultdict(set)
        for n in notes:
            dk[n["session"]].add(n["key"])
        ctx.dropped_keys = dict(dk)
        return ctx


@dataclass(frozen=True)
class Intended:
    id: str
    reason: str       # one line
    doc: str          # where the docs say so
    match: Callable[[Diff, Context], bool]
    versions: tuple[str, ...] = ("0.5.6", "0.5.7")  # the LMCache releases it is intended for


def _typed_where_stringified(d: Diff, ctx: Context) -> bool:
    return (d.kind == "attr_type_differs" and isinstance(d.lv, str)
            and not isinstance(d.cv, str) and d.lv == str(d.cv))


def _unholdable_dropped(d: Diff, ctx: Context) -> bool:
    return (d.kind == "attr_missing_in_cbt" and isinstance(d.lv, str)
            and d.key in ctx.dropped_keys.get(d.session, ())
            and (d.lv == "None" or d.lv[:1] in "[({"))


def _root_kind(d: Diff, ctx: Context) -> bool:
    return (d.kind == "kind_differs" and d.name in ROOTS and d.l.parent_id is None
            and d.lv == "internal" and d.cv == "server")


def _cbt_extra_attr(d: Diff, ctx: Context) -> bool:
    return d.kind == "attr_only_in_cbt" and (
        d.key.startswith("cbt.") or (d.key == "request_id" and d.name.startswith("cb.")))


def _mp_root_end_rule(d: Diff, ctx: Context) -> bool:
    if ctx.mp_root_end != "request_end" or d.name != "request":
        return False
    ends = ctx.request_end_ns.get((d.session, "request"), set())
    if d.kind == "end_differs" and not d.key:
        return d.cv in ends and d.lv > d.cv
    # the lazy root: cbt moves its start back to the saved REQUEST_END
    return d.kind == "start_differs" and d.cv in ends and d.lv > d.cv


def _tp_crossing(d: Diff, ctx: Context) -> bool:
    if (d.session, d.name) in ctx.overlapping:
        return True
    # the surviving span's children: their LMCache parent is the mixed span
    return d.kind == "parent_differs" and (d.session, d.lv) in ctx.overlapping


def _late_child_new_trace(d: Diff, ctx: Context) -> bool:
    if d.kind != "parent_differs" or d.l.parent_id is not None or d.c.parent_id is None:
        return False
    return d.cv in ROOTS and d.name not in ROOTS


# attributes the design seeds put where LMCache 0.5.6 has none
# (cacheblend-v3-observability §3 root attributes, §2.1 scatter_ms)
SEED_ATTRS = {
    "cb.request": ("fingerprint_hits", "storage_hits", "stale_chunks", "prefix_coverage_tokens"),
    "cb.scatter": ("scatter_ms",),
}


def _seed_attr(d: Diff, ctx: Context) -> bool:
    return d.kind == "attr_only_in_cbt" and d.key in SEED_ATTRS.get(d.name, ())


def _cbt_only_span(d: Diff, ctx: Context) -> bool:
    return d.kind == "span_only_in_cbt" and d.name in CBT_ONLY_SPANS


# the MP root's hit attributes and what each is made of (mp_subscriber.c)
_HIT_INPUTS = {
    "hit_tokens": ("hit_tokens",), "requested_tokens": ("requested_tokens",),
    "hit_rate": ("hit_tokens", "requested_tokens"),
    "l1_hit_tokens": ("l1_hit_tokens",), "l2_hit_tokens": ("l2_hit_tokens",),
    "l1_hit_rate": ("l1_hit_tokens", "requested_tokens"),
    "l2_hit_rate": ("l2_hit_tokens", "requested_tokens"),
    "apc_covered_tokens": ("apc_covered_tokens",), "prompt_tokens": ("prompt_tokens",),
    "engine_hit_tokens": ("engine_hit_tokens",), "request_hit_tokens": ("request_hit_tokens",),
    "engine_hit_rate": ("engine_hit_tokens", "prompt_tokens"),
    "request_hit_rate": ("request_hit_tokens", "prompt_tokens"),
    "l1_hit_keys": ("l1_hit_keys",), "l2_hit_keys": ("l2_hit_keys",),
}


def _unmeasured_zero(d: Diff, ctx: Context) -> bool:
    """LMCache's .get(key, 0) zero on the root for a key the lookup end did not carry."""
    if d.kind != "attr_missing_in_cbt" or d.name != "request" or d.key not in _HIT_INPUTS:
        return False
    sent = ctx.lookup_end_keys.get(d.session, set())
    return d.lv in (0, 0.0) and not all(k in sent for k in _HIT_INPUTS[d.key])


def _failure_status(d: Diff, ctx: Context) -> bool:
    return (d.kind == "status_differs" and d.lv == "unset" and d.cv == "error"
            and d.l.attrs.get("success") == "False")


DOC = "docs/lmcache-0.5.6.md"
INTENDED: tuple[Intended, ...] = (
    Intended("typed-child-attributes",
             "cbt keeps metadata types on child spans; LMCache sets str(v)",
             f"{DOC} §2 (child-span metadata is stringified), §6 Attributes and types",
             _typed_where_stringified),
    Intended("unholdable-values-dropped",
             "mixed or nested lists, dicts and None have no cbt value: the translation drops "
             "them (a list of one scalar kind is an array value)",
             f"{DOC} §6 Values cbt cannot hold; tests/lmcache/translate.py",
             _unholdable_dropped),
    Intended("root-kind-server",
             "cbt's request and cb.request roots are SERVER spans; LMCache's are INTERNAL",
             f"{DOC} §6 Span kind; docs/spans.md", _root_kind),
    Intended("cbt-extra-attributes",
             "cbt adds request_id to CB spans and its own cbt.* attributes",
             f"{DOC} §6 Identifying attributes; docs/spans.md", _cbt_extra_attr),
    Intended("mp-root-end-rule",
             "with --mp-root-end request_end a deferred (or lazy) MP root is stamped with "
             "its REQUEST_END time; LMCache uses the last transfer END",
             f"{DOC} §2.1 close rule, §6 MP deferred root end, Lazy MP root",
             _mp_root_end_rule),
    Intended("lmcache-tp-crossing",
             "LMCache keeps one pending span per (session, operation): overlapping "
             "tensor-parallel STARTs lose a span and cross attributes; cbt pairs on `pair`",
             f"{DOC} §2.5 two TP workers, §6 Pairing", _tp_crossing),
    Intended("late-child-new-trace",
             "a span that starts after its request closed is a root of a new trace in "
             "LMCache; cbt nests it under the closed root",
             f"{DOC} §6 A second retrieve call after CB_REQUEST_END, CB events without an "
             "open cb.request", _late_child_new_trace),
    Intended("seed-attributes",
             "cbt keeps the CacheBlend seed's root counts (fingerprint_hits, storage_hits, "
             "stale_chunks, prefix_coverage_tokens) and cb.scatter's scatter_ms",
             "docs/spans.md The CacheBlend path; docs/lmcache-0.5.6.md §6 CB root", _seed_attr),
    Intended("cbt-only-spans",
             "spans LMCache 0.5.6 has no builder for (cb.classify, cb.l2_load, kernel spans)",
             f"{DOC} §6 Spans only cbt builds", _cbt_only_span),
    Intended("failure-status-error",
             "cbt marks an END with success=false ERROR; LMCache leaves the status UNSET",
             f"{DOC} §6 Failure; docs/spans.md", _failure_status),
    Intended("unmeasured-zero",
             "LMCache sets a hit attribute whose key the lookup end did not carry to 0 "
             "(0.5.7: apc_covered_tokens, prompt_tokens, engine/request_hit_tokens and their "
             "rates from a 0.5.6-shaped end); cbt leaves it out: no value nobody measured",
             "docs/lmcache-0.5.7.md §4; docs/spans.md The MP path", _unmeasured_zero,
             ("0.5.7",)),
)


def for_version(version: str) -> tuple[Intended, ...]:
    """The entries intended for LMCache `version`."""
    return tuple(e for e in INTENDED if version in e.versions)


def classify(d: Diff, ctx: Context) -> str | None:
    """The id of the first entry for ctx.version that recognises d, or None."""
    for e in for_version(ctx.version):
        if e.match(d, ctx):
            return e.id
    return None
