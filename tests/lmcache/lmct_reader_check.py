"""tests/lmcache/lmct_reader_check.py — LMCache 0.5.6's TraceReader reads a
file cbt's C LMCT writer wrote (tests/lmct_write_sample.c).

    python lmct_reader_check.py WHEEL_ROOT FILE RECORDS

Imports lmcache's trace reader without torch, the way lmcache_import.py does
(bare packages on the way, so no package __init__ runs), opens FILE, checks
the header fields and that every record is read, and exits 1 on a mismatch.
"""

from __future__ import annotations

import os
import sys
import types


def load_reader(root: str):
    for name in ("lmcache", "lmcache.v1", "lmcache.v1.mp_observability",
                 "lmcache.v1.mp_observability.trace"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = pkg
    from lmcache.v1.mp_observability.trace import format as fmt  # noqa: E402
    from lmcache.v1.mp_observability.trace.reader import TraceReader  # noqa: E402
    return fmt, TraceReader


def main() -> int:
    root, path, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fmt, TraceReader = load_reader(root)
    bad = []
    with TraceReader(path) as r:
        h = r.header
        expect = {
            "magic": fmt.MAGIC, "format_version": fmt.FORMAT_VERSION, "level": "gpu",
            "trace_schema_version": fmt.TRACE_SCHEMA_VERSION, "t_mono_start": 100.0,
            "t_wall_start": 1700000000.5, "sm_config_json": '{"builders": "mp"}',
            "sm_config_digest": "0123abcd",
            "level_meta": {"cbt_version": "0.1.0", "clock_ns_per_tick": 1.0},
        }
        for k, v in expect.items():
            if getattr(h, k) != v:
                bad.append(f"header.{k} = {getattr(h, k)!r}, expected {v!r}")
        recs = list(r.records())
    if len(recs) != want:
        bad.append(f"{len(recs)} records read, {want} written")
    for i, rec in enumerate(recs):
        args = {"i": -i, "u": i, "f": i * 0.25, "b": bool(i % 2), "s": "req-1", "bin": b"\x01\x02",
                "nil": None, "list": [3, -3], "ring": {"sm": 12}}
        q = "cbt.event.mp.store.end" if i % 2 else "cbt.event.mp.store.start"
        if rec.qualname != q or rec.args != args or abs(rec.t_mono - i * 0.001) > 1e-12:
            bad.append(f"record {i}: {rec!r}")
            break
    for b in bad:
        print("lmct_reader_check:", b)
    if not bad:
        print(f"lmct_reader_check: LMCache {fmt.__name__} TraceReader read the header and {len(recs)} records")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
