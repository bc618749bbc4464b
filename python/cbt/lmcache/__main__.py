"""python -m cbt.lmcache — run LMCache's own CLI with the cbt bridge installed.

  python -m cbt.lmcache server --enable-tracing --otlp-endpoint http://collector:4318 ...
  python -m cbt.lmcache --help

Every argument goes to ``lmcache.cli.main:main(argv)`` unchanged (LMCache's
``lmcache`` command); only ``--help``/``-h`` as the first argument, or no
argument, prints this. docs/lmcache-bridge.md.
"""

from __future__ import annotations

import os
import sys

HELP = """usage: python -m cbt.lmcache LMCACHE-ARGS...

Runs LMCache's own command line (the `lmcache` command, lmcache.cli.main)
with cbt's bridge installed; every argument is passed through unchanged:

  python -m cbt.lmcache server --enable-tracing --otlp-endpoint http://HOST:4318 [...]
  python -m cbt.lmcache server --engine-type blend --enable-tracing --otlp-endpoint HOST:4317 [...]

With --enable-tracing, cbt builds the request spans in place of LMCache's
Python tracing subscribers and exports them with its OTLP/HTTP exporter to
--otlp-endpoint (port 4317, gRPC's, becomes 4318 on the same host, with a
warning; an http(s) URL gets /v1/traces appended when its path lacks it).
LMCache's logging and metrics subscribers are untouched. Stores and
retrieves published on a CUDA stream are timed by cbt on the GPU.

cbt's own settings come from the environment as for the C library
(OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, ...), plus:
  CBT_SPANS_PATH   also write every span as a JSON line to this file
  CBT_TRACE_PATH   also write a trace file (Perfetto / chrome://tracing)
  CBT_MP_ROOT_END  request_end (default) or transfer_end (LMCache 0.5.6's rule)

`python -m cbt.lmcache --help` prints this; `python -m cbt.lmcache -- --help`
passes --help to LMCache (its own usage). See docs/lmcache-bridge.md.
"""


def cbt_config_from_env(env=os.environ) -> dict:
    cfg = {}
    for var, key in (("CBT_SPANS_PATH", "spans_path"), ("CBT_TRACE_PATH", "trace_path"),
                     ("CBT_MP_ROOT_END", "mp_root_end")):
        if env.get(var):
            cfg[key] = env[var]
    return cfg


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(HELP)
        return 0
    if args[0] == "--":
        args = args[1:]
    import cbt.lmcache

    cbt.lmcache.install(**cbt_config_from_env())
    from lmcache.cli.main import main as lmcache_main

    rc = lmcache_main(args)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
