"""tests/lmcache/lmct_reader_check.py — LMCache's own TraceReader (0.5.6's
or 0.5.7's, by WHEEL_ROOT) reads files cbt wrote in its schema, and refuses
the other's.

    python lmct_reader_check.py WHEEL_ROOT FILE RECORDS
    python lmct_reader_check.py --refuses WHEEL_ROOT FILE
    python lmct_reader_check.py --recordings WHEEL_ROOT DIR CBT_VERSION

The first form (ctest lmct_lmcache_reader): a file cbt's C LMCT writer wrote
(tests/lmct_write_sample.c) in this LMCache's trace schema; checks the
header fields and every record. The second: this LMCache's reader refuses
FILE, a file of the other schema, for its trace_schema_version (LMCache
reads only its own).

The third (ctest lmct_lmcache_recordings): every DIR/*.lct that cbt's
recorder wrote (tests/record_replay.sh, tests/test_recorder.c) whose
trace_schema_version is this LMCache's (at least one must be; the others
this reader must refuse), each with a
DIR/NAME.lct.count holding the records cbt said it wrote. For each: the
header's magic, format_version and trace_schema_version are LMCache's
constants, level "gpu", level_meta producer "cbt" and cbt_version
CBT_VERSION and trace_schema naming this LMCache's layout (lmcache-0.5.6 or
lmcache-0.5.7), sm_config_digest the SHA-256 of sm_config_json; the records
read number the count; and LMCache's `lmcache trace info`
(lmcache/cli/commands/trace/info_command.py, InfoCommand.execute) summarizes
it with level gpu and total_records the count. A file without its .count, or
a DIR without recordings, fails.

Imports lmcache's modules without torch, the way lmcache_import.py does
(bare packages on the way, so no package __init__ runs); the info command's
imports (lmcache.cli.commands.base, lmcache.cli.metrics, lmcache.logging)
load as they are, nothing stubbed. Exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import io
import os
import sys
import types


def bare_packages(root: str) -> None:
    for name in ("lmcache", "lmcache.v1", "lmcache.v1.mp_observability",
                 "lmcache.v1.mp_observability.trace", "lmcache.cli", "lmcache.cli.commands",
                 "lmcache.cli.commands.trace"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = pkg


def schema_name(fmt) -> str:
    return {1: "lmcache-0.5.6", 2: "lmcache-0.5.7"}[fmt.TRACE_SCHEMA_VERSION]


def file_schema(path: str) -> int:
    """The header's trace_schema_version, read with msgspec alone."""
    import msgspec
    import struct
    with open(path, "rb") as f:
        (n,) = struct.unpack(">I", f.read(4))
        return msgspec.msgpack.decode(f.read(n))["trace_schema_version"]


def refuses(TraceReader, fmt, path: str) -> list[str]:
    try:
        TraceReader(path).close()
    except ValueError as e:
        if "unsupported trace_schema_version" in str(e):
            return []
        return [f"{os.path.basename(path)}: refused, but not for its schema: {e}"]
    return [f"{os.path.basename(path)}: schema {file_schema(path)}, yet LMCache's reader of "
            f"schema {fmt.TRACE_SCHEMA_VERSION} opened it"]


def load_reader(root: str):
    bare_packages(root)
    from lmcache.v1.mp_observability.trace import format as fmt  # noqa: E402
    from lmcache.v1.mp_observability.trace.reader import TraceReader  # noqa: E402
    return fmt, TraceReader


def check_recording(fmt, TraceReader, InfoCommand, path: str, version: str) -> list[str]:
    bad = []
    name = os.path.basename(path)
    try:
        with open(path + ".count") as f:
            want = int(f.read().strip())
    except (OSError, ValueError) as e:
        return [f"{name}: no record count ({path}.count: {e})"]
    with TraceReader(path) as r:
        h = r.header
        expect = {"magic": fmt.MAGIC, "format_version": fmt.FORMAT_VERSION, "level": "gpu",
                  "trace_schema_version": fmt.TRACE_SCHEMA_VERSION}
        for k, v in expect.items():
            if getattr(h, k) != v:
                bad.append(f"{name}: header.{k} = {getattr(h, k)!r}, expected {v!r}")
        meta = h.level_meta or {}
        for k, v in {"producer": "cbt", "cbt_version": version,
                     "trace_schema": schema_name(fmt)}.items():
            if meta.get(k) != v:
                bad.append(f"{name}: level_meta[{k!r}] = {meta.get(k)!r}, expected {v!r}")
        digest = hashlib.sha256(h.sm_config_json.encode()).hexdigest()
        if h.sm_config_digest != digest:
            bad.append(f"{name}: sm_config_digest {h.sm_config_digest!r} is not the SHA-256 "
                       f"of sm_config_json ({digest})")
        if not h.sm_config_json.startswith('{"producer":"cbt"'):
            bad.append(f"{name}: sm_config_json {h.sm_config_json[:60]!r}...")
        n = sum(1 for _ in r.records())
    if n != want:
        bad.append(f"{name}: {n} records read, cbt said it wrote {want}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        InfoCommand().execute(argparse.Namespace(trace_path=path))
    info = {}
    for line in out.getvalue().splitlines():
        k, sep, v = line.strip().partition(":")
        if sep and line.startswith("  ") and not line.startswith("    "):
            info[k] = v.strip()
    if info.get("level") != "gpu":
        bad.append(f"{name}: lmcache trace info says level {info.get('level')!r}")
    if info.get("total_records") != str(want):
        bad.append(f"{name}: lmcache trace info says total_records "
                   f"{info.get('total_records')!r}, cbt said {want}")
    if not bad:
        print(f"lmct_reader_check: {name}: header, {n} records, lmcache trace info agree")
    return bad


def main_recordings(root: str, rdir: str, version: str) -> int:
    fmt, TraceReader = load_reader(root)
    from lmcache.cli.commands.trace.info_command import InfoCommand  # noqa: E402
    paths = sorted(glob.glob(os.path.join(rdir, "*.lct")))
    mine = [p for p in paths if file_schema(p) == fmt.TRACE_SCHEMA_VERSION]
    bad = [] if mine else [f"no recordings (*.lct) of trace schema {fmt.TRACE_SCHEMA_VERSION} "
                           f"in {rdir}: record_replay and test_recorder make them"]
    for p in paths:
        if p in mine:
            bad += check_recording(fmt, TraceReader, InfoCommand, p, version)
        else:
            bad += refuses(TraceReader, fmt, p)
    if not bad:
        print(f"lmct_reader_check: LMCache's schema-{fmt.TRACE_SCHEMA_VERSION} reader refused the "
              f"{len(paths) - len(mine)} recordings of the other schema")
    for b in bad:
        print("lmct_reader_check:", b)
    return 1 if bad else 0


def main() -> int:
    if sys.argv[1] == "--recordings":
        return main_recordings(sys.argv[2], sys.argv[3], sys.argv[4])
    if sys.argv[1] == "--refuses":
        fmt, TraceReader = load_reader(sys.argv[2])
        bad = refuses(TraceReader, fmt, sys.argv[3])
        for b in bad:
            print("lmct_reader_check:", b)
        if not bad:
            print(f"lmct_reader_check: LMCache's schema-{fmt.TRACE_SCHEMA_VERSION} reader refused "
                  f"{os.path.basename(sys.argv[3])} (schema {file_schema(sys.argv[3])})")
        return 1 if bad else 0
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
            "level_meta": {"cbt_version": "0.1.0", "clock_ns_per_tick": 1.0,
                           "trace_schema": schema_name(fmt)},
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
        print(f"lmct_reader_check: LMCache's schema-{fmt.TRACE_SCHEMA_VERSION} TraceReader read "
              f"the header and {len(recs)} records")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
