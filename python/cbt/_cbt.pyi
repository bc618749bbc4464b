# Type stubs for cbt's C extension (python/cbt/_cbt.c): every name the module
# has, with the types its argument parsing accepts. docs/python.md is the
# reference; `cbt` (python/cbt/__init__.pyi) re-exports the public calls.
#
# tests/python/test_types.py holds this file to the runtime module with
# `python -m mypy.stubtest cbt` and to _cbt.c's keyword lists: a name, a
# keyword or a constant added to _cbt.c is added here too.
import os
from typing import (Any, Callable, Final, Literal, Optional, Protocol, Sequence, TypedDict, Union,
                    final)

from typing_extensions import Self, Unpack

__version__: str

# ---- what the calls take --------------------------------------------------------------

# a value (publish's keywords, a span's attributes): 64-bit int (IntEnum too),
# float, bool or str
_Value = Union[int, float, bool, str]
# an event value: a scalar, or a list/tuple whose elements are all int, all
# float, all bool or all str (an OTLP ArrayValue: docs/python.md, "Arrays")
_EventValue = Union[_Value, Sequence[int], Sequence[float], Sequence[bool], Sequence[str]]

# a file name: str, bytes or path-like (PyUnicode_FSConverter)
_Path = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

# init's enabled / mp_subscriber / cb_subscriber: a bool or the ints 0 and 1
_Flag = Union[bool, Literal[0, 1]]

class _HasCudaStream(Protocol):
    # torch.cuda.Stream: its cudaStream_t
    @property
    def cuda_stream(self) -> int: ...

class _HasPtr(Protocol):
    # cupy.cuda.Stream: its cudaStream_t
    @property
    def ptr(self) -> int: ...

# a stream: a cbt.CpuStream, an object with an int cuda_stream or ptr, or an
# int cudaStream_t
_Stream = Union["CpuStream", _HasCudaStream, _HasPtr, int]

class _HasValue(Protocol):
    # an Enum member such as LMCache's EventType.MP_STORE_START
    @property
    def value(self) -> str: ...

# an event type: LMCache's value ("mp.store.start") or member name
# ("MP_STORE_START"), an object whose .value is one of those, or an int from
# register_event_type
_EventType = Union[str, int, _HasValue]

class _Config(TypedDict, total=False):
    """cbt.init's keywords (docs/python.md, "init keywords"); every one is
    optional and None keeps the default where None is allowed."""

    enabled: _Flag
    mp_subscriber: _Flag
    cb_subscriber: _Flag
    queue_capacity: int
    lane_capacity: int
    max_lanes: int
    span_pool: int
    registry_capacity: int
    max_sessions: int
    poll_interval_us: int
    idle_sleep_ms: int
    shutdown_timeout_ms: int
    ring_capacity: int
    cuda_ring_capacity: int
    session_idle_ms: int
    late_grace_ms: int
    spans_path: Optional[_Path]
    trace_path: Optional[_Path]
    otlp_endpoint: Optional[str]
    otlp_protocol: Optional[Literal["grpc", "http/protobuf", "http/json"]]
    service_name: Optional[str]
    mp_root_end: Optional[str]      # "request_end" ("request"), "transfer_end"
    trace_level: Optional[str]      # "gpu" or "" (off)
    trace_output: Optional[_Path]
    trace_buffer_kib: int
    names_capacity: int             # the name table's capacity (docs/python.md, "Limits")
    otlp_json_path: Optional[_Path] # OTLP JSON file, collector file exporter's format
    arrays_capacity: int            # bytes of the array store (docs/python.md, "Arrays")

# ---- errors and constants -------------------------------------------------------------

class Error(Exception):
    """A cbt call failed; .status is the cbt_status code (ERR_* below)."""

    status: int
    field: Optional[str]  # the init keyword at fault (a config rule), else None

SESSION_MAX: int       # bytes in a session id
EVENT_META_MAX: int    # values one event holds
SPAN_STR_MAX: int      # bytes in a cbt.span attribute string
HAVE_CUDA: int         # 1: built with CUDA (streams on the GPU)
HAVE_OTLP: int         # 1: built with the OTLP exporter
HAVE_RECORDING: int    # 1: built with msgpack-c (trace_level="gpu", replay)
LIMITED_API: int       # Py_LIMITED_API built against (0x030A0000), 0: the full API
STATUS_COUNT: int      # the number of status codes

# the cbt_status codes (include/cbt/status.h's CBT_STATUS_LIST)
OK: Final = 0
ERR_INVAL: Final = 1
ERR_NOMEM: Final = 2
ERR_FULL: Final = 3
ERR_SESSION_TOO_LONG: Final = 4
ERR_UNKNOWN_EVENT: Final = 5
ERR_META_FULL: Final = 6
ERR_META_TOO_LONG: Final = 7
ERR_NOT_INITIALIZED: Final = 8
ERR_ALREADY: Final = 9
ERR_THREAD: Final = 10
ERR_IO: Final = 11
ERR_CUDA: Final = 12
ERR_NO_DEVICE: Final = 13
ERR_UNSUPPORTED: Final = 14
ERR_NOT_FOUND: Final = 15
ERR_STOPPED: Final = 16
ERR_TIMEOUT: Final = 17
ERR_UNMATCHED: Final = 18
ERR_DUPLICATE: Final = 19
ERR_BAD_TRACEPARENT: Final = 20
ERR_BAD_TRACESTATE: Final = 21
ERR_VERSION: Final = 22
ERR_LMCT_TRUNCATED: Final = 23
ERR_LMCT_BEYOND_FILE: Final = 24
ERR_LMCT_BAD_MAGIC: Final = 25
ERR_LMCT_FORMAT: Final = 26
ERR_LMCT_SCHEMA: Final = 27
ERR_LMCT_TYPE: Final = 28
ERR_LMCT_LIMIT: Final = 29
ERR_REPLAY_MISMATCH: Final = 30

# ---- types ----------------------------------------------------------------------------

# The three types are C types that cannot be subclassed (@final);
# SpanContext and CpuStream are made by their tp_new (__new__).

@final
class SpanContext:
    def __new__(cls, trace_id: str, span_id: str, sampled: bool = ...) -> Self: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def span_id(self) -> str: ...
    @property
    def sampled(self) -> bool: ...
    @property
    def traceparent(self) -> str: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __ne__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class CpuStream:
    def __new__(cls, capacity: int = ...) -> Self: ...
    def sync(self) -> None: ...
    def enqueue(self, fn: Callable[[], object], /) -> None: ...
    def stats(self) -> dict[str, int]: ...
    def close(self) -> None: ...
    @property
    def ordinal(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Self: ...
    # returns False: an exception leaving the block propagates
    def __exit__(self, *exc: object) -> Literal[False]: ...

@final
class PSpan:
    """A span this process opened (cbt/pspan.h); made by span_begin (cbt.span
    wraps it), never by the caller."""

    def end(self, attrs: Optional[dict[str, _Value]], /) -> None: ...
    @property
    def context(self) -> SpanContext: ...
    @property
    def open(self) -> bool: ...

class _HasContext(Protocol):
    # cbt.span's Span
    @property
    def context(self) -> SpanContext: ...

# ---- calls ----------------------------------------------------------------------------

def init(**config: Unpack[_Config]) -> None: ...
def shutdown() -> dict[str, Any]: ...
def enabled() -> bool: ...
def publish(event_type: _EventType, session_id: Optional[str], ts_ns: Optional[int] = ..., /,
            *, pair: Optional[int] = ..., **values: _EventValue) -> None: ...
def publish_on_stream(stream: _Stream, event_type: _EventType, session_id: Optional[str], /,
                      *, pair: Optional[int] = ..., **values: _EventValue) -> None: ...
def flush(timeout_ms: int = ...) -> None: ...
def metrics() -> dict[str, int]: ...
def replay(
    path: _Path,
    *,
    spans_path: Optional[_Path] = ...,
    trace_path: Optional[_Path] = ...,
    otlp_endpoint: Optional[str] = ...,
    on_span: Optional[Callable[[str], object]] = ...,
    force: bool = ...,
    speed: float = ...,
) -> dict[str, Any]: ...
def strerror(status: int, /) -> str: ...
def register_event_type(name: str, /) -> int: ...
def event_type_name(event_type: _EventType, /) -> str: ...
def span_begin(name: str, parent: Union[SpanContext, PSpan, _HasContext, None],
               session_id: Optional[str], kind: int, stream: Optional[_Stream],
               attrs: Optional[dict[str, _Value]], /) -> PSpan: ...
def inject(ctx: Union[SpanContext, PSpan, _HasContext], /) -> str: ...
def extract(traceparent: str, /) -> SpanContext: ...
def context_begin(traceparent: Optional[str], request_id: Optional[str], /) -> SpanContext: ...
def _after_fork_child() -> bool: ...
def _check_attrs(attrs: dict[str, _Value], /) -> None: ...
