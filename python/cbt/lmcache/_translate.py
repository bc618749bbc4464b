"""cbt.lmcache._translate — one LMCache 0.5.x Event as the cbt events to publish.

The rules are tests/lmcache/translate.py's (the conformance test's), so the
bridge's trees are the ones that test compares:

- type: the event's value ("mp.store.start"); cbt names its built-in types by
  LMCache's values;
- ts_ns: ``int(event.timestamp * 1e9)``, exactly as LMCache's subscribers stamp
  spans, published as an explicit timestamp;
- session: ``session_id``;
- pair: ``engine_id`` (MP store/retrieve) or else ``worker_id`` (CB), when it is
  an int >= 0 and not a bool, so tensor-parallel workers pair with their own;
- values: bool, int (64-bit; an IntEnum gives its value), finite float, str.
  Anything else (None, lists, tuples, dicts, bytes, objects, integers outside
  64 bits, NaN, infinities), keys cbt cannot intern (and "pair", cbt.publish's
  keyword for the pairing key), and values past what one
  cbt event holds are dropped and counted (``Counters``);
- ``mp.transfer.phase_samples`` is split: one event per 8-tuple sample with its
  named fields, then one batch-end event carrying only ``ended_transfer_key``.

Owns no state but the counters it is given. Pure Python: no lmcache import.
"""

from __future__ import annotations

import math
from typing import Any

SAMPLE_FIELDS = ("phase", "direction", "device_index", "elapsed_ms", "nbytes",
                 "transfer_key", "start_time_s", "end_time_s")
PAIR_KEYS = ("engine_id", "worker_id")
PHASE_SAMPLES = "mp.transfer.phase_samples"

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
META_MAX = 16      # CBT_EVENT_META_MAX (include/cbt/event.h)
KEY_LEN_MAX = 63   # CBT_NAME_LEN_MAX - 1 (include/cbt/names.h)

# why a value was dropped -> the counter it goes to
DROP_KEYS = ("none", "list", "dict", "bytes", "int_range", "float_nonfinite", "object",
             "key", "too_many", "bad_sample")


def _why(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, (list, tuple)):
        return "list"
    if isinstance(v, dict):
        return "dict"
    if isinstance(v, (bytes, bytearray)):
        return "bytes"
    if isinstance(v, int):
        return "int_range"
    if isinstance(v, float):
        return "float_nonfinite"
    return "object"


def values(meta: dict, dropped: dict) -> dict:
    """meta's values cbt can hold, with Python types kept; dropped[why] += 1
    for each one left out."""
    out = {}
    n = 0
    for k, v in meta.items():
        if isinstance(v, bool):
            cv = v
        elif isinstance(v, int) and _I64_MIN <= v <= _I64_MAX:
            cv = int(v)  # IntEnum: its value
        elif isinstance(v, float) and math.isfinite(v):
            cv = v
        elif isinstance(v, str):
            cv = v
        else:
            dropped[_why(v)] += 1
            continue
        if (not isinstance(k, str) or not k or len(k.encode()) > KEY_LEN_MAX
                or k == "pair"):  # cbt.publish's keyword for the pairing key
            dropped["key"] += 1
            continue
        if n == META_MAX:
            dropped["too_many"] += 1
            continue
        out[k] = cv
        n += 1
    return out


def pair_of(meta: dict) -> int | None:
    for k in PAIR_KEYS:
        v = meta.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _I64_MAX:
            return int(v)
    return None


def to_cbt(event: Any, dropped: dict) -> list[tuple[str, int, str, int | None, dict]]:
    """(type, ts_ns, session, pair, values) for each cbt event ``event`` becomes."""
    et = event.event_type
    etype = et if isinstance(et, str) else et.value
    ts_ns = int(event.timestamp * 1e9)  # exactly as LMCache's subscribers do
    session = event.session_id or ""
    meta = event.metadata or {}
    if etype != PHASE_SAMPLES:
        return [(etype, ts_ns, session, pair_of(meta), values(meta, dropped))]
    out = []
    for sample in meta.get("samples", ()) or ():
        if not isinstance(sample, (list, tuple)) or len(sample) != len(SAMPLE_FIELDS):
            dropped["bad_sample"] += 1
            continue
        out.append((etype, ts_ns, session, None, values(dict(zip(SAMPLE_FIELDS, sample)), dropped)))
    end = {"ended_transfer_key": meta["ended_transfer_key"]} if "ended_transfer_key" in meta else {}
    for k in meta:
        if k not in ("samples", "ended_transfer_key"):
            dropped["object"] += 1  # nothing else is sent today
    out.append((etype, ts_ns, session, None, values(end, dropped)))
    return out
