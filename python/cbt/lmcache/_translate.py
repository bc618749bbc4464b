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
- values: bool, int (64-bit; an IntEnum gives its value), float (NaN and the
  infinities included: a measured NaN is still a value, as OpenTelemetry's
  SDK and every cbt output keep it; docs/python.md, "Limits"), str, and a
  list or tuple of one of those (an array value: a Python list of bools, of
  ints, of floats or of strs; empty included), as OpenTelemetry keeps a
  homogeneous sequence (LMCache 0.5.7's ``token_ids``).
  Anything else (None, dicts, bytes, objects, integers outside 64 bits, a
  list that mixes types, nests, or holds any of those), keys cbt cannot
  intern (and "pair", cbt.publish's keyword for the pairing key), and values
  past what one cbt event holds are dropped and counted (``Counters``);
- ``mp.transfer.phase_samples`` is split: one event per 8-tuple sample with its
  named fields, then one batch-end event carrying only ``ended_transfer_key``.

Owns no state but the counters it is given. Pure Python: no lmcache import.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

# what cbt holds of one value, and one cbt event to publish: (type, ts_ns,
# session, pair, values)
Value = Union[bool, int, float, str, List[bool], List[int], List[float], List[str]]
Part = Tuple[str, int, str, Optional[int], Dict[str, Value]]

SAMPLE_FIELDS = ("phase", "direction", "device_index", "elapsed_ms", "nbytes",
                 "transfer_key", "start_time_s", "end_time_s")
PAIR_KEYS = ("engine_id", "worker_id")
PHASE_SAMPLES = "mp.transfer.phase_samples"

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
META_MAX = 16      # CBT_EVENT_META_MAX (include/cbt/event.h)
KEY_LEN_MAX = 63   # CBT_NAME_LEN_MAX - 1 (include/cbt/names.h)

# why a value was dropped -> the counter it goes to
DROP_KEYS = ("none", "list", "dict", "bytes", "int_range", "object",
             "key", "too_many", "bad_sample")


def _scalar_kind(v: Any) -> str:
    """The array element kind of v ("bool", "int", "float", "str"), or why
    it cannot be an element ("int_range", "object")."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int" if _I64_MIN <= v <= _I64_MAX else "int_range"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    return "object"


def classify_list(v: Any) -> tuple[bool, Any, str]:
    """(kept, the Python list cbt is given, why not kept) for a list or tuple:
    kept when every element is of one kind (all bools, all 64-bit ints, all
    floats or all strs; an IntEnum element gives its value; empty is kept);
    "int_range" when an otherwise all-int list holds an int outside 64 bits,
    "list" for a mixed or nested one."""
    # the common case, token ids (a 128 k-token prompt is 128 k ints): plain
    # ints checked in C-speed builtins, not element by element below
    if v and all(type(x) is int for x in v):
        if _I64_MIN <= min(v) and max(v) <= _I64_MAX:
            return True, list(v), ""
        return False, None, "int_range"
    kinds = set()
    for x in v:
        kinds.add(_scalar_kind(x))
        if len(kinds) > 1:
            return False, None, "list"
    kind = next(iter(kinds), "")
    if kind == "int":
        return True, [int(x) for x in v], ""
    if kind in ("", "bool", "float", "str"):
        return True, list(v), ""
    return False, None, "int_range" if kind == "int_range" else "list"


def classify(v: Any) -> tuple[bool, Any, str]:
    """(kept, the value cbt holds, why not kept) for one metadata value; the
    reason is one of DROP_KEYS' value reasons ("none", "list", "dict",
    "bytes", "int_range", "object"). The one place the
    bridge and the conformance test (tests/lmcache/translate.py) decide it."""
    if isinstance(v, bool):
        return True, v, ""
    if isinstance(v, int):  # IntEnum included: its value
        if _I64_MIN <= v <= _I64_MAX:
            return True, int(v), ""
        return False, None, "int_range"
    if isinstance(v, float):  # NaN and the infinities too: a value like any other
        return True, v, ""
    if isinstance(v, str):
        return True, v, ""
    if v is None:
        return False, None, "none"
    if isinstance(v, (list, tuple)):
        return classify_list(v)
    if isinstance(v, dict):
        return False, None, "dict"
    if isinstance(v, (bytes, bytearray)):
        return False, None, "bytes"
    return False, None, "object"


def values(meta: Mapping[Any, Any], dropped: collections.Counter[str]) -> dict[str, Value]:
    """meta's values cbt can hold, with Python types kept; dropped[why] += 1
    for each one left out."""
    out: dict[str, Value] = {}
    n = 0
    for k, v in meta.items():
        ok, cv, why = classify(v)
        if not ok:
            dropped[why] += 1
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


def pair_of(meta: Mapping[Any, Any]) -> int | None:
    for k in PAIR_KEYS:
        v = meta.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _I64_MAX:
            return int(v)
    return None


def event_parts(event: Any, on_drop: Callable[[str, str], None]
                ) -> list[tuple[str, int, str, int | None, Mapping[Any, Any]]]:
    """(type, ts_ns, session, pair, metadata as sent) for each cbt event
    ``event`` becomes, the metadata not yet filtered; ``on_drop(key, why)``
    hears of what the split leaves out: a sample that is not an 8-tuple
    ("samples[i]", "bad_sample") and any other key of a phase-samples batch
    (key, "batch_extra")."""
    et = event.event_type
    etype: str = et if isinstance(et, str) else et.value
    ts_ns = int(event.timestamp * 1e9)  # exactly as LMCache's subscribers do
    session: str = event.session_id or ""
    meta: Mapping[Any, Any] = event.metadata or {}
    if etype != PHASE_SAMPLES:
        return [(etype, ts_ns, session, pair_of(meta), meta)]
    out: list[tuple[str, int, str, int | None, Mapping[Any, Any]]] = []
    for i, sample in enumerate(meta.get("samples", ()) or ()):
        if not isinstance(sample, (list, tuple)) or len(sample) != len(SAMPLE_FIELDS):
            on_drop(f"samples[{i}]", "bad_sample")
            continue
        out.append((etype, ts_ns, session, None, dict(zip(SAMPLE_FIELDS, sample))))
    end = {"ended_transfer_key": meta["ended_transfer_key"]} if "ended_transfer_key" in meta else {}
    for k in meta:
        if k not in ("samples", "ended_transfer_key"):
            on_drop(k, "batch_extra")  # nothing else is sent today
    out.append((etype, ts_ns, session, None, end))
    return out


def to_cbt(event: Any, dropped: collections.Counter[str]) -> list[Part]:
    """(type, ts_ns, session, pair, values) for each cbt event ``event`` becomes."""
    def split_drop(key: str, why: str) -> None:
        dropped["bad_sample" if why == "bad_sample" else "object"] += 1

    return [(t, ts, sid, pair, values(meta, dropped))
            for t, ts, sid, pair, meta in event_parts(event, split_drop)]
