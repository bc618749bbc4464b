"""tests/lmcache/lmct_storage_sample.py — an LMCT file at LMCache's own level
"storage", written by LMCache's own encoders, for cbt's reader to read.

    python lmct_storage_sample.py WHEEL_ROOT OUT [--as-pr4871 | --as-schema N]

WHEEL_ROOT is an unpacked LMCache wheel (0.5.6's or 0.5.7rc3's,
tests/lmcache/setup_env.sh). The header and records are LMCache's
format.Header / format.Record encoded by format.encode_header /
encode_record, the args by codecs.encode_args on the real argument types of
lmcache.v1.distributed.api (ObjectKey, MemoryLayoutDesc, GroupedObjectKeys,
PrefetchTaskSpec, and in 0.5.7 MemoryTags), framed as StorageTraceRecorder
frames them (4-byte big-endian length). The calls are the traced
StorageManager surface of that version: reserve_write, finish_write,
submit_prefetch_task (0.5.6 with skip_l2; 0.5.7 with memory-tag filters),
read_prefetched_results.__enter__/__exit__, finish_read_prefetched.

--as-pr4871 adds cache_salt to every ObjectKey payload, as LMCache pull
request #4871's schema 2 records it; --as-schema N writes N as the header's
trace_schema_version whatever the wheel's is (content of one schema under
another's number). Prints the record count.

torch is not needed: a stand-in module gives the two names the codecs and
api.py use at import and for these values (Size, dtype).
"""

from __future__ import annotations

import os
import struct
import sys
import time
import types


def fake_torch() -> None:
    torch = types.ModuleType("torch")

    class Size(tuple):
        pass

    class dtype:  # noqa: N801 (torch's name)
        def __init__(self, name: str) -> None:
            self.name = name

        def __str__(self) -> str:
            return "torch." + self.name

    torch.Size = Size
    torch.dtype = dtype
    torch.float16 = dtype("float16")
    torch.Tensor = type("Tensor", (), {})
    sys.modules.setdefault("torch", torch)


def bare_packages(root: str) -> None:
    for name in ("lmcache", "lmcache.v1", "lmcache.v1.distributed", "lmcache.v1.mp_observability",
                 "lmcache.v1.mp_observability.trace"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = pkg


SM = "lmcache.v1.distributed.storage_manager.StorageManager"


def main() -> int:
    root, out = sys.argv[1], sys.argv[2]
    opts = sys.argv[3:]
    fake_torch()
    bare_packages(root)
    import torch  # noqa: E402 (the stand-in)
    from lmcache.v1.distributed import api  # noqa: E402
    from lmcache.v1.mp_observability.trace import codecs, format as fmt  # noqa: E402

    keys = [api.ObjectKey(chunk_hash=bytes([i]) * 8, model_name="m/x", kv_rank=0)
            for i in range(3)]
    layout = api.MemoryLayoutDesc(shapes=[torch.Size([2, 16, 8])], dtypes=[torch.float16])
    group = api.GroupedObjectKeys(keys=keys, object_group_id=0, layout_desc=layout)
    v057 = hasattr(api, "MemoryTags")
    spec_kw = {}
    if v057:
        spec_kw = {"allowed_l1_memory_tags": None,
                   "allowed_l2_memory_tags": frozenset({api.MemoryTags(api.MemorySegment.DRAM,
                                                                       api.MemoryResidency.LOCAL)})}
    spec = api.PrefetchTaskSpec(key_groups=[group], **spec_kw)
    prefetch = {"spec": spec, "external_request_id": "req-1"}
    if not v057:
        prefetch["skip_l2"] = True
    calls = [
        (SM + ".reserve_write", {"keys": keys, "layout_desc": layout}),
        (SM + ".finish_write", {"keys": keys}),
        (SM + ".submit_prefetch_task", prefetch),
        (SM + ".read_prefetched_results.__enter__", {"keys": keys}),
        (SM + ".read_prefetched_results.__exit__", {"keys": keys}),
        (SM + ".finish_read_prefetched", {"keys": keys, "read_locks": 1}),
    ]
    schema = fmt.TRACE_SCHEMA_VERSION
    if "--as-schema" in opts:
        schema = int(opts[opts.index("--as-schema") + 1])
    header = fmt.Header(magic=fmt.MAGIC, format_version=fmt.FORMAT_VERSION, level="storage",
                        trace_schema_version=schema, t_mono_start=time.monotonic(),
                        t_wall_start=time.time(), sm_config_json="", sm_config_digest="")

    def salted(v):
        if isinstance(v, list):
            return [salted(x) for x in v]
        if isinstance(v, dict):
            d = {k: salted(x) for k, x in v.items()}
            if d.get("__t__") == "ObjectKey":
                d["v"] = dict(d["v"], cache_salt="tenant-a")
            return d
        return v

    with open(out, "wb") as f:
        def frame(b: bytes) -> None:
            f.write(struct.pack(">I", len(b)) + b)
        frame(fmt.encode_header(header))
        for i, (q, args) in enumerate(calls):
            enc = codecs.encode_args(args)
            if "--as-pr4871" in opts:
                enc = salted(enc)
            frame(fmt.encode_record(fmt.Record(t_mono=0.001 * i, t_wall=time.time(), qualname=q,
                                               args=enc)))
    print(len(calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
