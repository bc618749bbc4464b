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
  outside 64 bits) is dropped and noted, and so are NaN and the infinities,
  which cbt holds (the bridge passes them) but the JSON events
  ``cbt replay`` reads cannot carry;
- ``mp.transfer.phase_samples`` (one event holding a list of 8-tuples) is
  split: one event per sample carrying its eight fields as named values
  (``phase, direction, device_index, elapsed_ms, nbytes, transfer_key,
  start_time_s, end_time_s``), then one batch-end event carrying only
  ``ended_transfer_key``.

It knows nothing of cbt's event limits (value count, string length): those
belong to the cbt build (``cbt replay --drop-unfit``). The rules themselves
(which values cbt holds, the pairing key, the phase-samples split) are the
bridge's, ``python/cbt/lmcache/_translate.py``, loaded here by its path (the
test's venv has LMCache's files, not the cbt package): one copy of them, so
the trees this test compares are the ones the bridge builds.
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Any

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "cbt",
                    "lmcache", "_translate.py")
_spec = importlib.util.spec_from_file_location("cbt_lmcache_translate", _SRC)
_rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rules)

__all__ = ["lmcache_to_cbt", "SAMPLE_FIELDS", "PAIR_KEYS"]

SAMPLE_FIELDS = _rules.SAMPLE_FIELDS  # one MP_TRANSFER_PHASE_SAMPLES sample, in tuple order
PAIR_KEYS = _rules.PAIR_KEYS          # metadata keys naming the worker, first found wins

# the notes' words for the rules' reasons
_WHY = {"none": "None", "list": "a list", "dict": "a dict", "bytes": "bytes",
        "int_range": "an integer outside 64 bits", "float_nonfinite": "a float that JSON cannot write",
        "bad_sample": "not an 8-tuple", "batch_extra": "not part of a phase-samples batch end"}


def lmcache_to_cbt(event: Any, notes: list | None = None) -> list[dict[str, Any]]:
    """The cbt replay events for one LMCache event, in the order to publish
    them. ``notes``, when given, receives one dict per value left out:
    ``{"type", "session", "key", "why"}`` (``key`` "samples[i]" for a sample
    that is not an 8-tuple)."""
    etype_session: list = []

    def note(key: str, why: str, v: Any = None) -> None:
        if notes is not None:
            etype, session = etype_session
            text = _WHY.get(why) or f"a {type(v).__name__}"
            notes.append({"type": etype, "session": session, "key": key, "why": text})

    et = event.event_type
    etype_session[:] = [et if isinstance(et, str) else et.value, event.session_id or ""]
    out = []
    for etype, ts_ns, session, pair, meta in _rules.event_parts(event, note):
        e: dict[str, Any] = {"type": etype, "ts_ns": ts_ns}
        if session:
            e["session"] = session
        if pair is not None:
            e["pair"] = pair
        kept: dict[str, Any] = {}
        for k, v in meta.items():
            ok, cv, why = _rules.classify(v)
            if ok and isinstance(cv, float) and not math.isfinite(cv):
                ok, why = False, "float_nonfinite"  # JSON has no NaN (docs/cli.md)
            if ok:
                kept[str(k)] = cv
            else:
                note(str(k), why, v)
        if kept:
            e["meta"] = kept
        out.append(e)
    return out
