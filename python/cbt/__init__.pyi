# Type stubs for the `cbt` package (python/cbt/__init__.py); the C calls it
# re-exports are typed in _cbt.pyi (python/cbt/_cbt.c). docs/python.md is the
# reference; tests/python/test_types.py holds both stubs to the runtime
# (mypy.stubtest) and type-checks docs/python.md's examples against them.
from typing import Any, Callable, Literal, Optional, Sequence, TextIO, TypedDict, Union

from typing_extensions import Unpack

from . import _cbt as _cbt
from ._cbt import (
    CpuStream as CpuStream,
    Error as Error,
    SpanContext as SpanContext,
    _Config,
    _Path,
    _Stream,
    _Value,
    enabled as enabled,
    event_type_name as event_type_name,
    flush as flush,
    init as init,
    metrics as metrics,
    publish as publish,
    publish_on_stream as publish_on_stream,
    register_event_type as register_event_type,
    strerror as strerror,
)

__version__: str
__all__ = [
    "CpuStream", "Error", "Span", "SpanContext", "Tracer", "enabled", "event_type_name",
    "extract", "flush", "init", "inject", "metrics", "publish", "publish_on_stream",
    "register_event_type", "shutdown", "context_begin", "span", "strerror", "tracer",
    "current_span", "replay", "ReplayWarning", "build_info", "BuildInfo", "report",
]

def shutdown() -> dict[str, Any]: ...

class ReplayWarning(UserWarning): ...

def replay(
    path: _Path,
    *,
    spans_path: Optional[_Path] = ...,
    trace_path: Optional[_Path] = ...,
    otlp_endpoint: Optional[str] = ...,
    on_span: Optional[Callable[[dict[str, Any]], object]] = ...,
    force: bool = ...,
    speed: float = ...,
) -> dict[str, Any]: ...

def report(
    paths: Union[_Path, Sequence[_Path]],
    html: Optional[_Path] = ...,
    *,
    slowest: int = ...,
    width: int = ...,
    max_open: Optional[int] = ...,
    out: Optional[TextIO] = ...,
) -> int: ...

class BuildInfo(TypedDict):
    """What cbt.build_info() returns: what this cbt was built with (docs/python.md, "Install")."""
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

def build_info() -> BuildInfo: ...

class Tracer:
    final_metrics: Optional[dict[str, Any]]
    def __init__(self, **config: Unpack[_Config]) -> None: ...
    def __enter__(self) -> "Tracer": ...
    # returns False: an exception leaving the block propagates
    def __exit__(self, *exc: object) -> Literal[False]: ...

def tracer(**config: Unpack[_Config]) -> Tracer: ...

_Kind = Literal["internal", "server", "client", "producer", "consumer", "unspecified"]

class Span:
    def __init__(self, name: str, parent: Union[SpanContext, "Span", None], session_id: str,
                 kind: _Kind, stream: Optional[_Stream], attrs: dict[str, _Value]) -> None: ...
    def __enter__(self) -> "Span": ...
    # returns False: the span ends failed and the exception propagates
    def __exit__(self, et: object, ev: object, tb: object) -> Literal[False]: ...
    def begin(self) -> "Span": ...
    def set(self, **attrs: _Value) -> "Span": ...
    def end(self) -> None: ...
    @property
    def context(self) -> SpanContext: ...
    @property
    def traceparent(self) -> str: ...
    @property
    def name(self) -> str: ...

def span(name: str, parent: Union[SpanContext, Span, None] = ..., session_id: str = ...,
         kind: _Kind = ..., stream: Optional[_Stream] = ..., **attrs: _Value) -> Span: ...
def current_span() -> Optional[Span]: ...
def inject(ctx: Union[SpanContext, Span, None] = ...) -> str: ...
def extract(traceparent: str) -> SpanContext: ...
def context_begin(traceparent: Optional[str], request_id: Optional[str]) -> SpanContext: ...
