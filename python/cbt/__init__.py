"""cbt: GPU-timed OpenTelemetry spans for KV-cache servers, from Python.

A thin layer over cbt's C library (the extension ``cbt._cbt``, python/cbt/_cbt.c);
docs/python.md is the reference. The calls on the hot path (``publish``,
``publish_on_stream``) are the C functions themselves; what is here is plain
Python: the tracer and span context managers and the thread's current span.

    import cbt
    with cbt.tracer(spans_path="spans.jsonl"):
        cbt.publish("mp.store.start", "req-1", engine_id=0)
        cbt.publish("mp.store.end", "req-1", engine_id=0)
        with cbt.span("cb.schedule", session_id="req-1") as s:
            header = cbt.inject()          # this span's W3C traceparent
            s.set(n_polls=3)
"""
from __future__ import annotations

import atexit as _atexit
import contextvars as _contextvars
import json as _json
import os as _os
import subprocess as _subprocess
import sys as _sys
import warnings as _warnings
from typing import Any, Callable, Literal, Optional, Sequence, TextIO, TypedDict, Union

from . import _cbt
from ._cbt import (  # noqa: F401  (re-exported)
    CpuStream,
    Error,
    SpanContext,
    enabled,
    event_type_name,
    extract as _extract,
    flush,
    init,
    metrics,
    publish,
    publish_on_stream,
    register_event_type,
    strerror,
)

__version__ = _cbt.__version__

__all__ = [
    "CpuStream", "Error", "Span", "SpanContext", "Tracer", "enabled", "event_type_name",
    "extract", "flush", "init", "inject", "metrics", "publish", "publish_on_stream",
    "register_event_type", "shutdown", "context_begin", "span", "strerror", "tracer", "current_span",
    "replay", "ReplayWarning", "build_info", "BuildInfo", "report",
]

_KINDS = {"unspecified": 0, "internal": 1, "server": 2, "client": 3, "producer": 4,
          "consumer": 5}

# the spans open on this thread (and asyncio task), innermost last
_current: _contextvars.ContextVar[tuple] = _contextvars.ContextVar("cbt_spans", default=())


def shutdown() -> dict:
    """Drain the queue, end open spans, flush every sink and stop the tracer,
    the GIL released meanwhile. It waits at most ``shutdown_timeout_ms`` and
    about a second more: a sink still stalled then is given up on and its
    spans are counted in ``sink_spans_lost`` (docs/python.md, "The GIL").
    Returns the final self-metrics (the fields of ``metrics()``, plus
    ``"otlp"`` with the exporter's final counts when one ran); ``{}`` when no
    tracer was running."""
    return _cbt.shutdown()


class ReplayWarning(UserWarning):
    """What ``cbt.replay`` says without failing: a truncated tail (the records
    before it were replayed), a mismatch replayed anyway (``force=True``),
    records dropped while recording, records skipped, spans a sink lost."""


_PathLike = Union[str, bytes, "_os.PathLike[str]"]


def replay(path: _PathLike, *, spans_path: Optional[_PathLike] = None,
           trace_path: Optional[_PathLike] = None, otlp_endpoint: Optional[str] = None,
           on_span: Optional[Callable[[dict], Any]] = None, force: bool = False,
           speed: float = 0.0) -> dict:
    """Replay a trace recorded at level "gpu" (``cbt.init(trace_level="gpu")``)
    through a replay tracer with the recorded configuration, builders and id
    seed: the spans come out as the live run's (names, parents, attributes,
    times, trace and span ids). What ``cbt replay FILE`` does, in-process.

    Needs the process's one tracer: ``cbt.Error`` (``ERR_ALREADY``) while
    ``cbt.init``'s runs. The replay tracer is shut down before this returns,
    whatever happens. ``spans_path`` / ``trace_path``: a span file / a
    Perfetto trace file; ``otlp_endpoint``: an OTLP/HTTP collector (``None``
    or ``""``: none). ``on_span(span: dict)`` is called with each span (its
    span-file line, parsed), on this thread, holding the GIL; an exception it
    raises propagates from here (later spans are not given to it). ``force``
    replays despite a cbt version or configuration mismatch; ``speed`` 0 is
    as fast as possible, N > 0 paced at N times the recorded rate.

    Returns the replay's counts (docs/python.md, "Recording and replay").
    A truncated tail (``truncated`` 1) and everything else the replay says on
    its log are ``ReplayWarning`` warnings, not errors; a file that cannot be
    replayed raises ``cbt.Error`` with the status and the reason."""
    cb = None
    if on_span is not None:
        if not callable(on_span):
            raise TypeError(f"cbt.replay: on_span is a callable or None, not "
                            f"{type(on_span).__name__}")
        loads = _json.loads

        def cb(line: str) -> None:
            on_span(loads(line))
    r = _cbt.replay(path, spans_path=spans_path, trace_path=trace_path,
                    otlp_endpoint=otlp_endpoint, on_span=cb, force=force, speed=speed)
    for m in r["messages"]:
        _warnings.warn(m, ReplayWarning, stacklevel=2)
    if r["truncated"]:
        _warnings.warn(f"cbt.replay: {r.get('truncated_message', 'the file ends inside a frame')}"
                       f" (the {r['records']} records before it were replayed)",
                       ReplayWarning, stacklevel=2)
    if r["sink_spans_lost"]:
        _warnings.warn(f"cbt.replay: the sinks lost {r['sink_spans_lost']} spans (a failed "
                       f"write or export)", ReplayWarning, stacklevel=2)
    return r


def report(paths: Union[_PathLike, Sequence[_PathLike]], html: Optional[_PathLike] = None, *,
           slowest: int = 5, width: int = 60, max_open: Optional[int] = None,
           out: Optional[TextIO] = None) -> int:
    """Run ``cbt report`` (docs/report.md) on ``paths``: span files, OTLP JSON
    files and LMCT recordings (one path, or several: one per server, merged).
    Writes the terminal report to ``out`` (default ``sys.stdout``) and what
    the command says on stderr to ``sys.stderr``; ``html`` also writes the
    self-contained HTML page there. ``slowest``, ``width``, ``max_open``: the
    flags of the same names. Returns the command's exit status: 0 written
    (bad lines are counted in the report, not errors), 1 a runtime failure
    (the HTML file cannot be written, ...), 2 an input or a flag it cannot
    take (named on stderr), 127 when this package has no ``cbt`` command.
    The command runs in a child process (the report needs no tracer, and a
    recording is replayed there, not in this process's tracer)."""
    items = [paths] if isinstance(paths, (str, bytes, _os.PathLike)) else list(paths)
    args = [_os.fsdecode(p) for p in items]
    if not args:
        raise ValueError("cbt.report: no paths")
    for flag, v in (("slowest", slowest), ("width", width), ("max_open", max_open)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"cbt.report: {flag} is an int, not {type(v).__name__}")
    cmd = ["report", *args, "--slowest", str(slowest), "--width", str(width)]
    if max_open is not None:
        cmd += ["--max-open", str(max_open)]
    if html is not None:
        cmd += ["--html", _os.fsdecode(html)]
    from . import _cli
    exe = _cli.path()
    try:
        r = _subprocess.run([exe, *cmd], stdout=_subprocess.PIPE, stderr=_subprocess.PIPE,
                            check=False)
    except OSError as e:
        _sys.stderr.write(f"cbt: cannot run the cbt command at {exe} ({e.strerror}): this cbt "
                          f"package was installed without it; reinstall it (docs/install.md)\n")
        return 127
    (out if out is not None else _sys.stdout).write(r.stdout.decode("utf-8", "replace"))
    _sys.stderr.write(r.stderr.decode("utf-8", "replace"))
    return r.returncode


class BuildInfo(TypedDict):
    """What ``cbt.build_info()`` returns (its docstring says each key)."""
    version: str
    cuda: bool
    cuda_version: str
    cuda_runtime: Literal["static", "shared", ""]
    cupti: bool
    cupti_loading: Literal["dlopen", "linked", ""]
    nvtx: bool
    otlp_http: bool
    otlp_grpc: bool
    recording: bool
    limited_api: bool
    required: bool
    left_out: list[str]
    cuda_loaded: dict[str, str]


# the CUDA libraries build_info() looks for among the process's mappings
_CUDA_LIBS = ("libcuda", "libcudart", "libcupti")


def _loaded_cuda_libraries() -> dict[str, str]:
    """The first mapped file of each of _CUDA_LIBS, by family: where the
    dynamic loader found it (Linux /proc/self/maps; {} where unreadable)."""
    found: dict[str, str] = {}
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                i = line.find("/")
                if i < 0:
                    continue
                p = line[i:].rstrip("\n")
                base = _os.path.basename(p)
                for fam in _CUDA_LIBS:
                    if fam not in found and (base.startswith(fam + ".so")
                                             or base.startswith(fam + "-")):
                        found[fam] = p
    except OSError:
        pass
    return found


def build_info() -> BuildInfo:
    """What this cbt was built with, and where the CUDA libraries it uses were
    found in this process (docs/python.md, "Install"). Costs a read of
    /proc/self/maps; never loads anything.

    ``version``; ``cuda`` (CUDA streams, device rings, the kernels) with
    ``cuda_version`` (the toolkit built against) and ``cuda_runtime``
    ("static": inside the module, "shared", or "" without CUDA); ``cupti``
    (CUPTI kernel activity compiled into the library: the Python API itself
    never enables it, docs/python.md) with ``cupti_loading`` ("dlopen": libcupti opened
    on first use, "linked", ""); ``nvtx``; ``otlp_http`` and ``otlp_grpc``
    (the exporter's protocols: gRPC needs a libcurl with HTTP/2);
    ``recording`` (trace recording and replay); ``limited_api`` (built
    against the CPython limited API: an abi3 module); ``required`` (the
    build stopped rather than leave a part out) and ``left_out`` (the parts
    an explicit ``CBT_PY_REQUIRE=OFF`` build went without); ``cuda_loaded``:
    {"libcuda" | "libcudart" | "libcupti": path} for those mapped now (the
    driver appears once CUDA is first used, CUPTI once it is enabled)."""
    from . import _build_config as b

    info: BuildInfo = {
        "version": __version__,
        "cuda": bool(_cbt.HAVE_CUDA),
        "cuda_version": b.CUDA_VERSION,
        "cuda_runtime": b.CUDA_RUNTIME,
        "cupti": b.CUPTI,
        "cupti_loading": b.CUPTI_LOADING,
        "nvtx": b.NVTX,
        "otlp_http": bool(_cbt.HAVE_OTLP),
        "otlp_grpc": bool(_cbt.HAVE_OTLP) and b.OTLP_GRPC,
        "recording": bool(_cbt.HAVE_RECORDING),
        "limited_api": bool(_cbt.LIMITED_API),
        "required": b.REQUIRED,
        "left_out": list(b.LEFT_OUT),
        "cuda_loaded": _loaded_cuda_libraries(),
    }
    return info


class Tracer:
    """``with cbt.tracer(**config) as t:`` runs ``cbt.init(**config)`` on
    entry and ``cbt.shutdown()`` on exit; ``t.final_metrics`` is then what
    shutdown returned."""

    def __init__(self, **config: Any) -> None:
        self._config = config
        self.final_metrics: Optional[dict] = None

    def __enter__(self) -> "Tracer":
        init(**self._config)
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.final_metrics = shutdown()
        return False


def tracer(**config: Any) -> Tracer:
    """A context manager around ``cbt.init(**config)`` / ``cbt.shutdown()``."""
    return Tracer(**config)


class Span:
    """A span this process opens itself (cbt/pspan.h), made by ``cbt.span``.

    Its ids exist from the moment it begins (``.context``), so they can be
    injected into an RPC before it ends. ``set(**attrs)`` keeps attributes
    for the end; begin-time attributes are the keywords given to
    ``cbt.span``. An exception leaving the ``with`` block marks the span
    failed (``failed=True`` and ``error=<exception type>``, ERROR status)."""

    __slots__ = ("_name", "_parent", "_session", "_kind", "_stream", "_attrs", "_end_attrs",
                 "_ps", "_token")

    def __init__(self, name: str, parent: Any, session_id: str, kind: str, stream: Any,
                 attrs: dict) -> None:
        try:
            k = _KINDS[kind]
        except (KeyError, TypeError):
            raise ValueError(f"cbt.span: kind is one of {sorted(_KINDS)}, not {kind!r}") from None
        self._name = name
        self._parent = parent
        self._session = session_id
        self._kind = k
        self._stream = stream
        self._attrs = attrs
        self._end_attrs: dict = {}
        self._ps = None
        self._token = None

    # the context-manager protocol
    def __enter__(self) -> "Span":
        self.begin()
        self._token = _current.set(_current.get() + (self,))
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        if self._token is not None:
            try:
                _current.reset(self._token)
            except ValueError:  # left in another context: drop it from this one's stack
                _current.set(tuple(s for s in _current.get() if s is not self))
            self._token = None
        if et is None:
            self.end()
            return False
        # never raise over the user's exception: end the span whatever happens
        self._end_attrs.setdefault("failed", True)
        self._end_attrs.setdefault("error", _utf8_cut(et.__name__, _cbt.SPAN_STR_MAX))
        try:
            self.end()
        except Exception:
            # drop the attributes that fail, then end with the rest
            ok = {}
            for k, v in self._end_attrs.items():
                try:
                    _cbt._check_attrs({**ok, k: v})
                except Exception:
                    continue
                ok[k] = v
            self._end_attrs = ok
            try:
                self.end()
            except Exception:
                pass
        return False

    def begin(self) -> "Span":
        """Open the span now (``with`` does it). Parent: the one given, else
        the innermost open ``cbt.span`` of this thread, else a root (its
        trace id derived from ``session_id`` when one is given, random
        otherwise)."""
        parent = self._parent
        if parent is None:
            cur = _current.get()
            if cur:
                parent = cur[-1]
        if isinstance(parent, Span):
            parent = parent._ps
        self._ps = _cbt.span_begin(self._name, parent, self._session, self._kind, self._stream,
                                   self._attrs or None)
        return self

    def set(self, **attrs: Union[int, float, bool, str]) -> "Span":
        """Attributes recorded when the span ends (at most 15 in all, strings
        at most 15 bytes). Invalid ones raise here (``TypeError``,
        ``OverflowError`` or ``cbt.Error``) and are not kept."""
        merged = {**self._end_attrs, **attrs}
        _cbt._check_attrs(merged)
        self._end_attrs = merged
        return self

    def end(self) -> None:
        """Close the span now (``with`` does it); a second call does nothing."""
        if self._ps is not None:
            self._ps.end(self._end_attrs or None)

    @property
    def context(self) -> SpanContext:
        """The span's ids (valid from begin on)."""
        if self._ps is None:
            raise Error("cbt.span: not begun yet")
        return self._ps.context

    @property
    def traceparent(self) -> str:
        return inject(self)

    @property
    def name(self) -> str:
        return self._name


def _utf8_cut(s: str, max_bytes: int) -> str:
    """``s`` cut to at most ``max_bytes`` UTF-8 bytes, on a character boundary."""
    b = s.encode("utf-8", "replace")
    if len(b) <= max_bytes:
        return s
    return b[:max_bytes].decode("utf-8", "ignore")


def span(name: str, parent: Any = None, session_id: str = "", kind: str = "internal",
         stream: Any = None, **attrs: Union[int, float, bool, str]) -> Span:
    """``with cbt.span("cb.schedule", parent=ctx, session_id=rid) as s:`` — a
    span opened and closed by this process. ``parent``: a SpanContext (from
    ``cbt.extract``), a ``cbt.span``, or None (the thread's innermost open
    span, else a root). ``session_id``: the request id (an attribute of the
    span, and the trace id's seed for a root: Option B). ``kind``:
    "internal", "server", "client", "producer", "consumer". ``stream``: a
    stream (as for ``publish_on_stream``) that times the span: begin and end
    happen when the stream reaches them. ``attrs``: begin-time attributes."""
    return Span(name, parent, session_id, kind, stream, attrs)


def current_span() -> Optional[Span]:
    """The innermost ``cbt.span`` open on this thread, or None."""
    cur = _current.get()
    return cur[-1] if cur else None


def inject(ctx: Any = None) -> str:
    """The W3C traceparent of ``ctx`` (a SpanContext or a ``cbt.span``), or of
    the innermost open ``cbt.span`` of this thread; "" when there is none."""
    if ctx is None:
        ctx = current_span()
        if ctx is None:
            return ""
    if isinstance(ctx, Span):
        ctx = ctx._ps if ctx._ps is not None else None
        if ctx is None:
            return ""
    return _cbt.inject(ctx)


def extract(traceparent: str) -> SpanContext:
    """The SpanContext of a W3C traceparent (strict: version 00, lowercase,
    55 bytes); ``cbt.Error`` (status ERR_BAD_TRACEPARENT) when malformed."""
    return _extract(traceparent)


_inherited = False  # forked while the parent's tracer ran (see _after_fork)


def _after_fork() -> None:
    global _inherited
    _inherited = _cbt._after_fork_child()


def context_begin(traceparent: Optional[str], request_id: str) -> SpanContext:
    """The receiving side's context for one request (cbt_context_begin,
    docs/distributed.md): the traceparent's when it is valid (Option A),
    else the trace id derived from ``request_id`` with no span id (Option B:
    a span opened under it is a root of the request's trace), sampled by
    OTEL_TRACES_SAMPLER. Never raises for a malformed header: it falls back."""
    return _cbt.context_begin(traceparent, request_id)


def _at_exit() -> None:
    # spans still queued reach their files; a second shutdown is harmless
    if _cbt.enabled() and not _inherited:
        try:
            _cbt.shutdown()
        except Error:
            pass


_atexit.register(_at_exit)
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_after_fork)
