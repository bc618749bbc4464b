"""python -m cbt.lmcache — run LMCache's own CLI with the cbt bridge installed.

  python -m cbt.lmcache server --enable-tracing --otlp-endpoint http://collector:4318 ...
  python -m cbt.lmcache --help

Every argument goes to ``lmcache.cli.main:main(argv)`` unchanged (LMCache's
``lmcache`` command), but ``--trace-level gpu`` and its ``--trace-output``:
that level is cbt's (LMCache records ``storage`` and ``events``), so cbt takes
them and records its tracer's inputs (docs/recording.md). Only
``--help``/``-h`` as the first argument, or no argument, prints this.
LMCache's modules that cannot be imported (no LMCache, or LMCache without
torch: ``pip install --no-deps lmcache``) are one line on stderr and exit 2
(cbt.lmcache.MissingDependency). docs/lmcache-bridge.md.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Mapping, Optional

HELP = """usage: python -m cbt.lmcache LMCACHE-ARGS...

Runs LMCache's own command line (the `lmcache` command, lmcache.cli.main)
with cbt's bridge installed; every argument is passed through unchanged:

  python -m cbt.lmcache server --enable-tracing --otlp-endpoint http://HOST:4318 [...]
  python -m cbt.lmcache server --engine-type blend --enable-tracing --otlp-endpoint HOST:4317 [...]

With --enable-tracing, cbt builds the request spans in place of LMCache's
Python tracing subscribers and exports them to --otlp-endpoint as LMCache
would: over OTLP/gRPC (HOST:4317, http://HOST:4317), or over OTLP/HTTP when
the value is an http(s) URL on port 4318 or ending in /v1/traces (/v1/traces
is appended when the path lacks it).
LMCache's logging and metrics subscribers are untouched. Stores and
retrieves published on a CUDA stream are timed by cbt on the GPU.

--enable-token-trace (LMCache 0.5.7's flag, on 0.5.6 too) also emits one
zero-length mp.request.trace span per lookup, a child of its request, with
session_id, lmcache.model and lmcache.input_ids (the prompt's token ids, an
integer array), for `lmcache bench trace-analyze`; it turns tracing on. On an
LMCache whose parser lacks the flag (0.5.6) the bridge takes it, adds
--enable-tracing, and adds the token ids to LMCache's MP_LOOKUP event as 0.5.7
does; on 0.5.7 it goes to LMCache's parser.

--otlp-json-path FILE (cbt's; with --enable-tracing) also writes the spans
to FILE in the OpenTelemetry Collector file exporter's format (OTLP JSON, one
ExportTraceServiceRequest per line), which `lmcache bench trace-analyze` and
jq read. LMCache's --enable-tracing still needs --otlp-endpoint (LMCache
refuses tracing without one, and pushes its metrics there); for the file
alone, without a collector, use cbt.init(otlp_json_path=...) in your program.

--trace-level gpu [--trace-output FILE.lct] (with --enable-tracing) records
what cbt's span builders consume, for `cbt replay FILE.lct` on any machine;
LMCache's own levels (storage, events) and their --trace-output stay LMCache's.

cbt's own settings come from the environment as for the C library
(OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, ...), plus:
  CBT_SPANS_PATH   also write every span as a JSON line to this file
  CBT_OTLP_JSON_PATH   as --otlp-json-path FILE
  CBT_TRACE_PATH   also write a trace file (Perfetto / chrome://tracing)
  CBT_MP_ROOT_END  request_end (default) or transfer_end (LMCache 0.5.6's rule)
  CBT_TRACE_LEVEL, CBT_TRACE_OUTPUT   as --trace-level gpu / --trace-output

It needs LMCache's server: pip install lmcache==0.5.6 (it pulls torch and
the CUDA wheels, ~6 GB). Where LMCache cannot run it (pip install --no-deps
lmcache, LMCache's CLI-only mode: no torch), one line names what is missing
and the exit status is 2.

`python -m cbt.lmcache --help` prints this; `python -m cbt.lmcache -- --help`
passes --help to LMCache (its own usage). See docs/lmcache-bridge.md.
"""


def cbt_config_from_env(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    for var, key in (("CBT_SPANS_PATH", "spans_path"), ("CBT_TRACE_PATH", "trace_path"),
                     ("CBT_MP_ROOT_END", "mp_root_end")):
        if env.get(var):
            cfg[key] = env[var]
    return cfg


def _flag(args: list[str], i: int, name: str) -> Optional[tuple[Optional[str], int]]:
    """(value, items used) when args[i] is `name VALUE` or `name=VALUE`, else None."""
    a = args[i]
    if a == name:
        return (args[i + 1], 2) if i + 1 < len(args) else (None, 1)
    if a.startswith(name + "="):
        return a[len(name) + 1:], 1
    return None


def take_trace_args(args: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Take cbt's --trace-level gpu and its --trace-output out of LMCache's
    arguments: (the rest, cbt's config keywords). LMCache's own levels and
    their --trace-output are left where they are; options after a `--` are
    not looked at. Spell the flags in full (argparse's abbreviations are
    LMCache's). ValueError: a flag without its value (or with one that looks
    like a flag), gpu given with another level, two --trace-output with gpu."""
    levels: list[tuple[str, int, int]] = []  # (value, index, items)
    outputs: list[tuple[str, int, int]] = []
    i = 0
    while i < len(args):
        if args[i] == "--":
            break
        hit = False
        for name, into in (("--trace-level", levels), ("--trace-output", outputs)):
            f = _flag(args, i, name)
            if f is not None:
                value, n = f
                if not value or (n == 2 and value.startswith("-")):
                    raise ValueError(f"{name} needs a value")
                into.append((value, i, n))
                i += n
                hit = True
                break
        if not hit:
            i += 1
    if not any(v == "gpu" for v, _, _ in levels):
        return list(args), {}
    if any(v != "gpu" for v, _, _ in levels):
        raise ValueError("--trace-level gpu (cbt's) and LMCache's own levels cannot be mixed")
    if len(outputs) > 1:
        raise ValueError("--trace-output is given twice")
    cfg: dict[str, Any] = {"trace_level": "gpu"}
    drop = {j + k for _, j, n in levels for k in range(n)}
    if outputs:
        cfg["trace_output"] = outputs[0][0]
        drop |= {outputs[0][1] + k for k in range(outputs[0][2])}
    return [a for j, a in enumerate(args) if j not in drop], cfg


TOKEN_TRACE_FLAG = "--enable-token-trace"


def lmcache_knows_token_trace() -> bool:
    """Whether the installed LMCache's server parser has --enable-token-trace
    (cbt.lmcache.lmcache_has_token_trace)."""
    import cbt.lmcache

    return cbt.lmcache.lmcache_has_token_trace()


def take_token_trace(args: list[str], native: bool) -> tuple[list[str], bool]:
    """LMCache 0.5.7's --enable-token-trace on any 0.5.x: (LMCache's args,
    whether it was given: install(token_trace=...)). Where LMCache's own
    parser has the flag (native) the args stay as they are (LMCache turns
    tracing on and hands the MP subscriber token_trace_enabled). Where it
    does not (0.5.6), the flag is taken out and, as 0.5.7 does, implies
    --enable-tracing (added when absent). Options after `--` are not looked at."""
    end = args.index("--") if "--" in args else len(args)
    head, tail = args[:end], args[end:]
    if TOKEN_TRACE_FLAG not in head:
        return list(args), False
    if native:
        return list(args), True
    head = [a for a in head if a != TOKEN_TRACE_FLAG]
    if "--enable-tracing" not in head:
        head.append("--enable-tracing")
    return head + tail, True


def take_otlp_json_arg(args: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Take cbt's --otlp-json-path FILE (or =FILE) out of LMCache's arguments:
    (the rest, {"otlp_json_path": FILE} or {}). Options after a `--` are not
    looked at. ValueError: no value (or one that looks like a flag), or the
    flag given twice."""
    found: list[tuple[str, int, int]] = []
    i = 0
    while i < len(args) and args[i] != "--":
        f = _flag(args, i, "--otlp-json-path")
        if f is None:
            i += 1
            continue
        value, n = f
        if not value or (n == 2 and value.startswith("-")):
            raise ValueError("--otlp-json-path needs a file name")
        found.append((value, i, n))
        i += n
    if not found:
        return list(args), {}
    if len(found) > 1:
        raise ValueError("--otlp-json-path is given twice")
    value, j, n = found[0]
    return args[:j] + args[j + n:], {"otlp_json_path": value}


def _has_flag(args: list[str], name: str) -> bool:
    """Whether `name` (or `name=VALUE`) is among args before any `--`."""
    for a in args:
        if a == "--":
            return False
        if a == name or a.startswith(name + "="):
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(HELP)
        return 0
    if args[0] == "--":
        args = args[1:]
    try:
        args, trace_cfg = take_trace_args(args)
        args, ojson_cfg = take_otlp_json_arg(args)
    except ValueError as e:
        sys.stderr.write(f"python -m cbt.lmcache: {e}\n")
        return 2
    args, token_trace = take_token_trace(
        args, TOKEN_TRACE_FLAG in args and lmcache_knows_token_trace())
    tracing = "--enable-tracing" in args or TOKEN_TRACE_FLAG in args
    if ojson_cfg and not tracing:
        sys.stderr.write("python -m cbt.lmcache: --otlp-json-path writes the spans of cbt's "
                         "tracer, which runs with --enable-tracing: add it\n")
        return 2
    if ojson_cfg and not _has_flag(args, "--otlp-endpoint"):
        sys.stderr.write("python -m cbt.lmcache: --otlp-json-path needs --otlp-endpoint too: "
                         "LMCache's --enable-tracing refuses to start without one (and pushes "
                         "its metrics there); give your collector's address, or write the file "
                         "alone from your own program with cbt.init(otlp_json_path=...)\n")
        return 2
    trace_cfg.update(ojson_cfg)
    if trace_cfg and not tracing:
        sys.stderr.write("python -m cbt.lmcache: --trace-level gpu records cbt's tracer, which "
                         "runs with --enable-tracing: add it (and --otlp-endpoint)\n")
        return 2
    import cbt.lmcache

    try:
        if token_trace:  # else CBT_TOKEN_TRACE decides, as for cbt.init
            trace_cfg["token_trace"] = True
        cbt.lmcache.install(**cbt_config_from_env(), **trace_cfg)
        # LMCache's `lmcache` command
        lmcache_main: Callable[[list[str]], object] = \
            cbt.lmcache._import_lmcache("lmcache.cli.main")[0].main
    except cbt.lmcache.MissingDependency as e:
        # one line, no traceback: what is missing and the pip line for it
        sys.stderr.write(f"{e}\n")
        return 2
    rc = lmcache_main(args)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
