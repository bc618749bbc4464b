"""tests/lmcache/translate.py — one LMCache 0.5.6 event as cbt replay events.

``lmcache_to_cbt(event)`` turns an LMCache ``Event`` (or anything with its
four fields: ``event_type``, ``timestamp``, ``metadata``, ``session_id``) into
the JSON-lines events ``cbt replay`` reads (docs/cli.md, "cbt replay"):

- ``type``: the event's value (``"mp.store.start"``): cbt names its built-in
  types by LMCache's values (docs/lmcache-0.5.6.md §7);
- ``ts_ns``: ``int(timestamp * 1e9)``, exactly as LMCache's subscribers stamp
  spans (§2), so both sides see the same nanoseconds;
- ``session``: ``session_id`` when it is not empty;
- ``pair``: the worker's id where the event carries one (``engine_id`` on the
  MP store/retrieve events, ``worker_id`` on the CB retrieve/scatter events),
  so that tensor-parallel workers' STARTs and ENDs pair with their own;
- ``meta``: the metadata with its Python types kept (int, float, bool, str);
  what cbt cannot hold (lists, tuples, dicts, None, bytes, objects, integers
  outside 64 bits, NaN and infinities) is dropped and noted;
- ``mp.transfer.phase_samples`` (one event holding a list of 8-tuples) is
  split: one event per sample carrying its eight fields as named values
  (``phase, direction, device_index, elapsed_ms, nbytes, transfer_key,
  start_time_s, end_time_s``), then one batch-end event carrying only
  ``ended_transfer_key``.

It knows nothing of cbt's event limits (value count, string length): those
belong to the cbt build (``cbt replay --drop-unfit``). It is kept free of
test code so that it can move into cbt's Python package as it is.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["lmcache_to_cbt", "SAMPLE_FIELDS", "PAIR_KEYS"]

# the fields of one MP_TRANSFER_PHASE_SAMPLES sample, in tuple order
# (lmcache/v1/mp_observability/subscribers/tracing/transfer_phase.py)
SAMPLE_FIELDS = ("phase", "direction", "device_index", "elapsed_ms", "nbytes",
                 "transfer_key", "start_time_s", "end_time_s")

# metadata keys that name the worker an operation ran on, first found wins
PAIR_KEYS = ("engine_id", "worker_id")

_INT64 = (-(1 << 63), (1 << 63) - 1)


def _value(v: Any) -> tuple[bool, Any, str]:
    """(kept, cbt value, why not kept) for one metadata value."""
    if isinstance(v, bool):
        return True, v, ""
    if isinstance(v, int):  # IntEnum included: its value
        if _INT64[0] <= int(v) <= _INT64[1]:
            return True, int(v), ""
        return False, None, "an integer outside 64 bits"
    if isinstance(v, float):
        if math.isfinite(v):
            return True, float(v), ""
        return False, None, "a float that JSON cannot write"
    if isinstance(v, str):
        return True, v, ""
    if v is None:
        return False, None, "None"
    if isinstance(v, (list, tuple)):
        return False, None, "a list"
    if isinstance(v, dict):
        return False, None, "a dict"
    if isinstance(v, (bytes, bytearray)):
        return False, None, "bytes"
    return False, None, f"a {type(v).__name__}"


def _type_value(event: Any) -> str:
    et = event.event_type
    return et if isinstance(et, str) else et.value


def _pair(meta: dict[str, Any]) -> int | None:
    for k in PAIR_KEYS:
        v = meta.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _INT64[1]:
            return int(v)
    return None


def _note(notes: list | None, etype: str, session: str, key: str, why: str) -> None:
    if notes is not None:
        notes.append({"type": etype, "session": session, "key": key, "why": why})


def _event(etype: str, ts_ns: int, session: str, meta: dict[str, Any], notes: list | None,
           pair_from: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": etype, "ts_ns": ts_ns}
    if session:
        out["session"] = session
    pair = _pair(pair_from if pair_from is not None else meta)
    if pair is not None:
        out["pair"] = pair
    kept: dict[str, Any] = {}
    for k, v in meta.items():
        ok, cv, why = _value(v)
        if ok:
            kept[str(k)] = cv
        else:
            _note(notes, etype, session, str(k), why)
    if kept:
        out["meta"] = kept
    return out


def lmcache_to_cbt(event: Any, notes: list | None = None) -> list[dict[str, Any]]:
    """The cbt replay events for one LMCache event, in the order to publish
    them. ``notes``, when given, receives one dict per value left out:
    ``{"type", "session", "key", "why"}`` (``key`` "samples[i]" for a sample
    that is not an 8-tuple)."""
    etype = _type_value(event)
    ts_ns = int(event.timestamp * 1e9)  # exactly as LMCache's subscribers do
    session = event.session_id or ""
    meta = dict(event.metadata or {})
    if etype != "mp.transfer.phase_samples":
        return [_event(etype, ts_ns, session, meta, notes)]
    out = []
    samples = meta.pop("samples", ()) or ()
    for i, sample in enumerate(samples):
        if not isinstance(sample, (list, tuple)) or len(sample) != len(SAMPLE_FIELDS):
            _note(notes, etype, session, f"samples[{i}]", "not an 8-tuple")
            continue
        out.append(_event(etype, ts_ns, session, dict(zip(SAMPLE_FIELDS, sample)), notes,
                          pair_from={}))
    end_meta = {"ended_transfer_key": meta.pop("ended_transfer_key")} \
        if "ended_transfer_key" in meta else {}
    for k in meta:  # nothing else is sent today; keep it visible if it ever is
        _note(notes, etype, session, k, "not part of a phase-samples batch end")
    out.append(_event(etype, ts_ns, session, end_meta, notes, pair_from={}))
    return out
