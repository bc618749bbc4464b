"""cbt.lmcache — the bridge that puts cbt inside an LMCache 0.5.x process.

``cbt.lmcache.install(**cbt_config)``, called before LMCache's
``init_observability`` runs (``python -m cbt.lmcache server ...`` does it for
you), makes three replacements, all by assignment on LMCache's own module and
class objects (nothing in LMCache is edited; ``uninstall()`` puts them back):

1. ``lmcache.v1.mp_observability.subscribers.tracing``: its four tracing
   subscriber names (``MPServerTracingSubscriber``, ``BlendTracingSubscriber``,
   ``TimeoutTracingSubscriber``, ``TransferPhaseTracingSubscriber``) and
   ``get_span_registry`` become the bridge's stand-ins. ``init_observability``
   imports them lazily under ``--enable-tracing`` and registers them where it
   would register LMCache's, so LMCache builds no spans of its own (no double
   spans). Each stand-in's ``get_subscriptions()`` has exactly the keys of the
   original it replaces, so ``bus.has_subscribers`` answers as before and
   LMCache's publishers send the same events. The stand-ins run on LMCache's
   drain thread and hand each event to cbt (``cbt.publish`` with the event's
   own timestamp, explicit): a disabled, stopped or full bus behaves as
   LMCache's own, because the stand-ins see exactly what LMCache's tracing
   subscribers would have seen.
2. ``lmcache.v1.mp_observability.otel_init.init_otel_tracing``: instead of a
   gRPC OTel TracerProvider, cbt is started (``cbt.init(**cbt_config)``) with
   its OTLP exporter pointed at ``otlp_endpoint`` by ``otlp_export_target``'s
   rule: OTLP/gRPC for the endpoint as LMCache takes it (``http://host:4317``),
   OTLP/HTTP for an ``http(s)://host:4318`` or ``.../v1/traces`` URL (unless
   ``cbt_config`` names ``otlp_endpoint`` itself).
3. ``EventBus.publish_on_stream`` (the class, so every bus): on a bus that has
   the stand-ins and a stream with a real CUDA handle (``.cuda_stream`` or
   ``.ptr`` non-zero), the event goes to cbt as a CUDA-event mark
   (``cbt.publish_on_stream``: stamped when the GPU reaches it), then goes
   through LMCache's own publish_on_stream (its host callback: LMCache's
   other subscribers time it as before) marked so the stand-ins skip it, so
   cbt sees it once. A CPU ``StubStream`` (ptr 0), a bus without the
   stand-ins, or a cbt that cannot mark CUDA streams (ERR_UNSUPPORTED,
   ERR_NO_DEVICE, ERR_CUDA: off for good) keeps LMCache's own path; any
   other refusal sends that one event down it, counted.

``install()`` after LMCache's ``init_observability`` warns (that bus keeps
LMCache's own tracing subscribers); ``uninstall()`` unsubscribes the
stand-ins from the buses they registered on.

Counters (``counters()``): events in, cbt events out, values dropped by why,
events cbt refused, stream marks and fallbacks. docs/lmcache-bridge.md.
"""

from __future__ import annotations

import atexit
import collections
import functools
import importlib
import os
import sys
import threading
import time
import urllib.parse
import weakref
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import cbt  # the package this one is in: imported already

from . import _translate

if TYPE_CHECKING:  # stub-only: cbt.init's keywords (python/cbt/_cbt.pyi)
    from typing_extensions import Unpack

    from cbt._cbt import _Config

__all__ = ["install", "uninstall", "installed", "counters", "otlp_export_target",
           "lmcache_trace_schema", "MissingDependency", "LMCACHE_PIN",
           "STANDIN_SUBSCRIPTIONS", "EXTRA_EVENT_TYPES", "TOKEN_TRACE_TYPES", "LOOKUP_HOOKS",
           "lmcache_has_token_trace"]

_TRACING = "lmcache.v1.mp_observability.subscribers.tracing"
_OTEL_INIT = "lmcache.v1.mp_observability.otel_init"
_EVENT_BUS = "lmcache.v1.mp_observability.event_bus"
_EVENT = "lmcache.v1.mp_observability.event"

# The keys of each LMCache 0.5.6 tracing subscriber's get_subscriptions(), by
# EventType member name, in registration order (config.init_observability).
# The stand-in for each has exactly these keys.
STANDIN_SUBSCRIPTIONS: dict[str, tuple[str, ...]] = {
    "MPServerTracingSubscriber": (
        "MP_REQUEST_START", "MP_STORE_SUBMITTED", "MP_RETRIEVE_SUBMITTED", "MP_REQUEST_END",
        "MP_STORE_START", "MP_STORE_END", "MP_RETRIEVE_START", "MP_RETRIEVE_END",
        "MP_LOOKUP_PREFETCH_START", "MP_LOOKUP_PREFETCH_END"),
    "BlendTracingSubscriber": (
        "CB_REQUEST_START", "CB_RETRIEVE_SUBMITTED", "CB_REQUEST_END",
        "CB_LOOKUP_START", "CB_LOOKUP_END", "CB_RETRIEVE_START", "CB_RETRIEVE_END",
        "CB_FINGERPRINT_MATCH_START", "CB_FINGERPRINT_MATCH_END",
        "CB_PREFIX_LOOKUP_START", "CB_PREFIX_LOOKUP_END",
        "CB_COORDINATOR_MATCH_START", "CB_COORDINATOR_MATCH_END",
        "CB_SPARSE_PREFETCH_START", "CB_SPARSE_PREFETCH_END",
        "CB_SCATTER_START", "CB_SCATTER_END",
        "CB_FINGERPRINTS_REGISTERED", "CB_CHUNKS_EVICTED", "CB_RETRIEVE_NOOP"),
    "TimeoutTracingSubscriber": ("TIMEOUT_RAISED",),
    "TransferPhaseTracingSubscriber": (
        "MP_STORE_START", "MP_RETRIEVE_START", "MP_STORE_END", "MP_RETRIEVE_END",
        "MP_TRANSFER_PHASE_SAMPLES"),
}
# What LMCache 0.5.7's MPServerTracingSubscriber adds to its subscriptions
# under --enable-token-trace (token_trace_enabled=True): MP_LOOKUP, whose
# token_ids and model_name make the mp.request.trace span. The stand-in adds
# the same when token tracing is on (install(token_trace=True), or the
# token_trace_enabled=True 0.5.7's init_observability passes it).
TOKEN_TRACE_TYPES = ("MP_LOOKUP",)
# Where LMCache 0.5.6 publishes MP_LOOKUP without the token_ids 0.5.7 adds:
# (module, class, method given the request's IPCCacheServerKey as `key`).
# Under install(token_trace=True) the bridge adds list(key.token_ids) to that
# event's metadata there, as 0.5.7 does (_hook_token_ids).
LOOKUP_HOOKS = (
    ("lmcache.v1.multiprocess.modules.lookup", "LookupModule", "lookup"),
    ("lmcache.v1.multiprocess.modules.blend.lookup", "LookupMixin", "_submit_prefix_leg"),
)
# Types cbt's builders read that no LMCache tracing subscriber does (cb.l2_load).
# No 0.5.6 publisher asks has_subscribers() about them, so subscribing to them
# changes nothing LMCache does; install(l2_loads=False) leaves them out.
EXTRA_EVENT_TYPES = ("L2_LOAD_TASK_SUBMITTED", "L2_LOAD_TASK_COMPLETED")

# each type is forwarded by the first stand-in (in registration order) that
# lists it; the others subscribe to it with a no-op, for has_subscribers
_OWNER: dict[str, str] = {}
for _cls, _types in STANDIN_SUBSCRIPTIONS.items():
    for _t in _types:
        _OWNER.setdefault(_t, _cls)

# An Event cbt already got as a stream mark carries _FED, as an attribute (the
# Event object itself reaches the drain thread: LMCache's Python host
# callback) or, with LMCache's native recorder (which rebuilds the Event from
# its type, session and metadata), as a metadata key with the int value 1;
# the stand-ins skip it, LMCache's other subscribers see it as usual.
_FED = "_cbt_fed"


def _is_fed(event: Any) -> bool:
    if getattr(event, _FED, False):
        return True
    meta = getattr(event, "metadata", None)
    return isinstance(meta, dict) and meta.get(_FED) == 1


def _mark_fed(event: Any, native: bool) -> None:
    if not native:
        try:
            setattr(event, _FED, True)
            return
        except AttributeError:
            pass
    meta = getattr(event, "metadata", None)
    if isinstance(meta, dict):
        meta[_FED] = 1

_lock = threading.Lock()
_bridge: "_Bridge | None" = None


# The LMCache the bridge is written against, and what installing it costs
# (docs/lmcache-bridge.md, "Installing LMCache").
LMCACHE_PIN = "lmcache==0.5.6"
_FULL_INSTALL = f"pip install {LMCACHE_PIN} (pulls torch and the CUDA wheels, ~6 GB)"


class MissingDependency(ImportError):
    """LMCache's server modules, which the bridge hooks, cannot be imported
    here: LMCache is not installed, or installed without its dependencies
    (``pip install --no-deps lmcache``, LMCache's CLI-only mode, has no
    torch). The message is one line naming the missing piece and the
    command that installs it; ``.name`` is the module that was missing.
    ``python -m cbt.lmcache`` prints that line and exits 2."""


def _missing_line(e: ImportError) -> str:
    """The one line saying what ``e`` (raised importing LMCache) lacks."""
    name = e.name or ""
    top = name.split(".")[0]
    if isinstance(e, ModuleNotFoundError) and top == "torch":
        return f"cbt.lmcache: LMCache's server needs torch, which is not installed: {_FULL_INSTALL}"
    if isinstance(e, ModuleNotFoundError) and name == "lmcache":
        return f"cbt.lmcache: LMCache is not installed: {_FULL_INSTALL}"
    if isinstance(e, ModuleNotFoundError) and top == "lmcache":
        return (f"cbt.lmcache: this LMCache has no module {name[:100]}: the bridge needs "
                f"LMCache 0.5.x: pip install {LMCACHE_PIN}")
    if isinstance(e, ModuleNotFoundError) and top:
        return (f"cbt.lmcache: LMCache's server needs {top[:100]}, which is not installed "
                f"(LMCache installed with --no-deps?): pip install {LMCACHE_PIN} installs it")
    first = (str(e).splitlines() or [""])[0][:200]
    return (f"cbt.lmcache: LMCache's server modules do not import ({type(e).__name__}: "
            f"{first}): pip install {LMCACHE_PIN}")


def _import_lmcache(*names: str) -> list[ModuleType]:
    """LMCache's modules ``names``, imported; MissingDependency (one line)
    when they cannot be, instead of the import's own traceback."""
    import importlib

    try:
        return [importlib.import_module(n) for n in names]
    except ImportError as e:
        raise MissingDependency(_missing_line(e), name=e.name) from None


OTLP_HTTP_PORT = 4318  # OTLP/HTTP's registered port (OTLP/gRPC's is 4317)


def otlp_export_target(endpoint: str | None) -> tuple[str | None, str | None]:
    """LMCache's ``--otlp-endpoint`` as cbt's exporter target: (url, protocol).

    LMCache exports OTLP/gRPC to its ``--otlp-endpoint`` (the usual value is
    ``http://host:4317``); cbt does the same with that value, and speaks
    OTLP/HTTP only when the value is plainly an OTLP/HTTP one. The rule
    (docs/lmcache-bridge.md has it as a table):

    - None or "": (None, None): no exporter.
    - an ``http://`` or ``https://`` URL whose path ends with ``/v1/traces``,
      or one on port 4318, OTLP/HTTP's: ("http/protobuf", the URL with
      ``/v1/traces`` appended unless its path ends with it); a bare
      ``host:4318`` is ``http://host:4318/v1/traces``.
    - anything else, as LMCache takes it: ``http://h:4317``, ``https://h:4317``,
      ``h:4317``, ``grpc://h:4317``, another port: ("grpc",
      ``http://h:port``, or ``https://`` for an https URL). gRPC names no
      path: a path given is not used, as LMCache's own exporter does not use
      it.
    Any other scheme, or no host, raises ValueError.
    """
    if not endpoint:
        return None, None
    e = endpoint.strip()
    bare = "://" not in e
    if bare:
        e = "http://" + e
    u = urllib.parse.urlsplit(e)
    scheme = u.scheme.lower()
    if scheme == "grpc":
        scheme = "http"
    if scheme not in ("http", "https"):
        raise ValueError(f"otlp endpoint {endpoint!r}: scheme {u.scheme!r} is not http, "
                         "https or grpc")
    host = u.hostname or ""
    if not host:
        raise ValueError(f"otlp endpoint {endpoint!r} names no host")
    try:
        port = u.port
    except ValueError as x:  # a port that is not a number, or out of range
        raise ValueError(f"otlp endpoint {endpoint!r}: {x}") from None
    hostport = f"[{host}]" if ":" in host else host
    if port is not None:
        hostport += f":{port}"
    path = u.path.rstrip("/")
    http = path.endswith("/v1/traces") or (port == OTLP_HTTP_PORT and u.scheme.lower() != "grpc")
    if http:
        if not path.endswith("/v1/traces"):
            path += "/v1/traces"
        return urllib.parse.urlunsplit((scheme, hostport, path, u.query, "")), "http/protobuf"
    return f"{scheme}://{hostport}", "grpc"


def lmcache_trace_schema() -> Optional[int]:
    """The LMCT trace schema the running LMCache writes: 1 (0.5.6), 2 (0.5.7,
    whose schema adds MemoryTags), or None when LMCache's trace package is
    not importable (cbt then writes its default, 1). Another number, or a 2
    without MemoryTags (a different "version 2", such as LMCache pull
    request #4871's), is None too: cbt does not write a layout it cannot
    name, and says so."""
    try:
        lmct_format = importlib.import_module("lmcache.v1.mp_observability.trace.format")
    except Exception:  # noqa: BLE001 - no LMCache, or one that fails to import
        return None
    v = getattr(lmct_format, "TRACE_SCHEMA_VERSION", None)
    if v == 1:
        return 1
    if v == 2:
        try:
            api = importlib.import_module("lmcache.v1.distributed.api")
        except Exception:  # noqa: BLE001
            return None
        return 2 if hasattr(api, "MemoryTags") else None
    return None


def _cuda_handle(stream: Any) -> int:
    """The raw cudaStream_t of stream, or 0 (no CUDA stream: StubStream, None)."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("cuda_stream", "ptr"):
        v = getattr(stream, attr, None)
        if isinstance(v, int) and not isinstance(v, bool) and v:
            return v
    return 0


class _Bridge:
    """The installed bridge: the originals it replaced, cbt's config, counters."""

    def __init__(self, cbt_config: dict[str, Any], l2_loads: bool,
                 warn: Callable[[str], None], token_trace: bool = False) -> None:
        from cbt import _cbt

        self.config = dict(cbt_config)
        self.l2_loads = l2_loads
        self.token_trace = token_trace
        self.warn = warn
        self.started_cbt = False   # cbt.init was ours: shut it down at the end
        # buses a stand-in registered on, and the stand-ins on each (weakly:
        # the bridge keeps no bus alive); uninstall() unsubscribes them
        self.buses: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self.standins: weakref.WeakKeyDictionary[Any, list[weakref.ref[Any]]] = \
            weakref.WeakKeyDictionary()
        self.live = 0              # stand-ins registered and not shut down
        # every counter update (drain threads, publishers' threads) under clock
        self.clock = threading.Lock()
        self.c: collections.Counter[str] = collections.Counter()
        self.dropped: collections.Counter[str] = collections.Counter(
            {k: 0 for k in _translate.DROP_KEYS})
        self.stream_ok = True
        # the statuses that mean cbt cannot mark CUDA streams in this process
        self.stream_off = {getattr(_cbt, n) for n in ("ERR_UNSUPPORTED", "ERR_NO_DEVICE",
                                                      "ERR_CUDA") if hasattr(_cbt, n)}
        self.saved: list[tuple[Any, str, Any]] = []
        self.final_metrics: Optional[dict[str, Any]] = None  # cbt.shutdown's, once stopped

    # -- cbt's lifetime ---------------------------------------------------
    def start(self, otlp_endpoint: str | None = None, from_lmcache: bool = False) -> None:
        with _lock:
            if cbt.enabled():
                return
            cfg = dict(self.config)
            if from_lmcache and "otlp_endpoint" not in cfg:
                url, protocol = otlp_export_target(otlp_endpoint)
                cfg["otlp_endpoint"] = url or ""
                if protocol:  # the value's own transport, over OTEL_EXPORTER_OTLP_PROTOCOL
                    cfg.setdefault("otlp_protocol", protocol)
            # the CacheBlend builder too, as `cbt replay` has it (LMCache's
            # blend server publishes cb.* events); an older extension
            # without the keyword builds the MP trees only, and says so
            cfg.setdefault("cb_subscriber", True)
            if self.token_trace:  # the MP builder's mp.request.trace spans
                cfg.setdefault("token_trace", True)
            # a recording's LMCT schema: the running LMCache's, so its own
            # TraceReader opens cbt's file (docs/recording.md, "Two trace
            # schemas"); cbt reads CBT_TRACE_SCHEMA when the recorder opens
            schema = lmcache_trace_schema()
            env_was = os.environ.get("CBT_TRACE_SCHEMA")
            if schema and env_was is None:
                os.environ["CBT_TRACE_SCHEMA"] = str(schema)
            try:
                try:
                    cbt.init(**cfg)
                except TypeError as x:
                    if "cb_subscriber" not in str(x):
                        raise
                    del cfg["cb_subscriber"]
                    self.warn("cbt.lmcache: this cbt has no cb_subscriber option: no CacheBlend "
                              "(cb.*) spans")
                    cbt.init(**cfg)
            finally:
                if schema and env_was is None:
                    del os.environ["CBT_TRACE_SCHEMA"]
            self.started_cbt = True

    def stop(self) -> None:
        with _lock:
            if self.started_cbt and cbt.enabled():
                self.final_metrics = cbt.shutdown()
            self.started_cbt = False

    # -- counters ---------------------------------------------------------
    def count(self, c: collections.Counter[str],
              dropped: collections.Counter[str] | None = None) -> None:
        with self.clock:
            self.c.update(c)
            if dropped:
                self.dropped.update(dropped)

    def _publish_host(self, outs: Sequence[_translate.Part], c: collections.Counter[str],
                      ts_ns: int | None = None) -> None:
        """outs to cbt.publish (explicit timestamps); out/refused into c."""
        for etype, ts, session, pair, vals in outs:
            try:
                cbt.publish(etype, session, ts if ts_ns is None else ts_ns,
                            pair=pair, **vals)
                c["events_out"] += 1
            except cbt.Error as x:  # a session too long, cbt stopped, ...
                c["events_refused"] += 1
                c[f"refused_status_{getattr(x, 'status', '?')}"] += 1
            except (TypeError, ValueError, OverflowError):  # a NUL, a bad timestamp
                c["events_refused"] += 1

    # -- the feed ---------------------------------------------------------
    def forward(self, event: Any) -> None:
        """One LMCache event to cbt (the drain thread)."""
        if _is_fed(event):
            return  # published as a stream mark already
        c: collections.Counter[str] = collections.Counter(events_in=1)
        dropped: collections.Counter[str] = collections.Counter()
        try:
            self._publish_host(_translate.to_cbt(event, dropped), c)
        finally:
            self.count(c, dropped)

    def on_stream(self, handle: int, event: Any) -> bool:
        """The event as cbt CUDA-event marks on handle. False: cbt got none of
        it, use LMCache's path (the stand-ins then feed it as any other).
        Never raises: a failure is counted, and only a status saying that cbt
        cannot mark CUDA streams here turns the stream path off."""
        if not self.stream_ok or not cbt.enabled():
            return False
        c: collections.Counter[str] = collections.Counter()
        dropped: collections.Counter[str] = collections.Counter()
        try:
            outs = _translate.to_cbt(event, dropped)
        except Exception:  # noqa: BLE001 - LMCache's path, whose forward() sees it
            self.count(collections.Counter(stream_untranslatable=1))
            return False
        done = 0
        err: Optional[Exception] = None
        for etype, _ts, session, pair, vals in outs:
            try:
                cbt.publish_on_stream(handle, etype, session, pair=pair, **vals)
            except (cbt.Error, TypeError, ValueError, OverflowError) as x:
                err = x
                break
            done += 1
        off = (isinstance(err, cbt.Error)
               and getattr(err, "status", None) in self.stream_off)
        if off:
            with self.clock:
                was, self.stream_ok = self.stream_ok, False
            if was:  # once
                self.warn(f"cbt.lmcache: cbt cannot mark CUDA streams here ({err}): "
                          "LMCache's host callback from now on")
        if err is not None and done == 0:
            # nothing reached cbt: this event takes LMCache's path (counted
            # there: events_in, and events_refused if cbt refuses it again)
            c["stream_fallbacks" if off else "stream_refused"] += 1
            if not off:
                c[f"stream_refused_{type(err).__name__}_"
                  f"{getattr(err, 'status', '')}".rstrip("_")] += 1
            self.count(c)
            return False
        c["events_in"] += 1
        c["events_out"] += done
        c["stream_marks"] += 1
        if err is not None:
            # part of a multi-event translation is on the stream already: the
            # rest (from the failed one on) goes to cbt.publish at host time
            # now, and the event is marked fed, so cbt gets each part once
            c["stream_partial"] += 1
            self._publish_host(outs[done:], c, time.time_ns())
        self.count(c, dropped)
        return True


class _Registry:
    """What the stand-in get_span_registry() returns: the stand-ins take it
    and ignore it (cbt's builders keep their own state)."""


def _make_standins(br: _Bridge) -> tuple[dict[str, type], Callable[[], object]]:
    """The stand-in classes and get_span_registry, built on LMCache's own
    EventSubscriber and EventType."""
    EventSubscriber = sys.modules[_EVENT_BUS].EventSubscriber
    EventType = sys.modules[_EVENT].EventType

    registry = _Registry()

    def get_span_registry() -> object:
        return registry

    def make(name: str) -> type:
        types = [EventType[t] for t in STANDIN_SUBSCRIPTIONS[name]]
        owned = {EventType[t] for t in STANDIN_SUBSCRIPTIONS[name] if _OWNER[t] == name}

        def __init__(self: Any, registry: object = None, *args: Any,
                     token_trace_enabled: bool = False, **kwargs: Any) -> None:
            self._registered = False
            # LMCache 0.5.7 passes token_trace_enabled to the MP subscriber
            self._token_trace = bool(token_trace_enabled) or br.token_trace
            if self._token_trace and not br.token_trace:
                if cbt.enabled():
                    # cbt's MP builder was made without them: MP_LOOKUP's
                    # token ids would be copied for nothing (and take the
                    # array store's room), so they are not asked for
                    br.warn("cbt.lmcache: LMCache asks for token traces but cbt runs without "
                            "them (install(token_trace=True) before LMCache starts): no "
                            "mp.request.trace spans")
                    self._token_trace = False
                else:
                    br.token_trace = True
            br.start()  # a hand-built bus: cbt with the install() config

        def get_subscriptions(self: Any) -> dict[Any, Callable[[Any], None]]:
            fwd = self._forward
            subs = {t: (fwd if t in owned else self._skip) for t in types}
            if name == "MPServerTracingSubscriber" and self._token_trace:
                subs.update({EventType[t]: fwd for t in TOKEN_TRACE_TYPES})
            return subs

        def register(self: Any, bus: Any) -> None:
            EventSubscriber.register(self, bus)
            if name == "MPServerTracingSubscriber" and br.l2_loads:
                for t in EXTRA_EVENT_TYPES:
                    bus.subscribe(EventType[t], self._forward)
            with _lock:
                br.buses.add(bus)
                br.standins.setdefault(bus, []).append(weakref.ref(self))
                br.live += 1
            self._registered = True

        def _forward(self: Any, event: Any) -> None:
            br.forward(event)

        def _skip(self: Any, event: Any) -> None:
            return None

        def shutdown(self: Any) -> None:
            # EventBus.stop: after the final drain, last registered first; cbt
            # is shut down (spans ended, exported) when the last one goes
            if not self._registered:
                return
            self._registered = False
            with _lock:
                br.live -= 1
                last = br.live == 0
            if last:
                br.stop()

        return type(name, (EventSubscriber,), {
            "__init__": __init__, "get_subscriptions": get_subscriptions,
            "register": register, "_forward": _forward, "_skip": _skip,
            "shutdown": shutdown, "__module__": __name__,
            "__doc__": f"cbt.lmcache's stand-in for LMCache's {name}: the same "
                       "subscriptions, every event handed to cbt."})

    return {n: make(n) for n in STANDIN_SUBSCRIPTIONS}, get_span_registry


def _default_warn(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


_tls = threading.local()  # the IPCCacheServerKey of the lookup running on this thread


def _add_token_ids(event: Any, c: collections.Counter[str]) -> None:
    """0.5.7's token_ids on an MP_LOOKUP made during a hooked lookup: the
    key's token ids, when the event is that key's request's and lacks them."""
    key = getattr(_tls, "key", None)
    meta = getattr(event, "metadata", None)
    if key is None or not isinstance(meta, dict) or "token_ids" in meta:
        return
    ids = getattr(key, "token_ids", None)
    if ids is None or getattr(key, "request_id", None) != getattr(event, "session_id", None):
        c["token_ids_unmatched"] += 1
        return
    meta["token_ids"] = list(ids)
    c["token_ids_added"] += 1


def _hook_token_ids(br: _Bridge) -> list[tuple[Any, str, Any]]:
    """LMCache 0.5.6 publishes MP_LOOKUP without token_ids; 0.5.7 adds
    ``token_ids`` (the request's prompt) in the same place. For each of
    LOOKUP_HOOKS: the method is wrapped to hold its ``key`` (thread-local)
    while it runs, and the module's own ``Event`` name (the class its code
    builds events with; that module only) becomes a function that builds the
    same Event and, for an MP_LOOKUP of that key's request without
    token_ids, adds ``list(key.token_ids)``. On an LMCache that publishes
    them (0.5.7) nothing is added. (obj, attr, new) for each replacement;
    a module that cannot be imported or lacks the method is one warning
    (no token ids from there: no mp.request.trace spans for its lookups)."""
    import importlib

    EventType = sys.modules[_EVENT].EventType
    lookup_type = EventType[TOKEN_TRACE_TYPES[0]]
    out: list[tuple[Any, str, Any]] = []
    for modname, clsname, meth in LOOKUP_HOOKS:
        try:
            mod = importlib.import_module(modname)
        except Exception as x:  # noqa: BLE001 - a torch-free LMCache, another version
            br.warn(f"cbt.lmcache: --enable-token-trace: cannot import {modname} ({x!r}): "
                    "its MP_LOOKUP events get no token_ids")
            continue
        cls = getattr(mod, clsname, None)
        orig = getattr(cls, "__dict__", {}).get(meth)
        real = mod.__dict__.get("Event")
        if not callable(orig) or not isinstance(real, type):
            br.warn(f"cbt.lmcache: --enable-token-trace: {modname} has no {clsname}.{meth} "
                    "or Event: its MP_LOOKUP events get no token_ids")
            continue

        def wrapped(self: Any, key: Any, *a: Any, _orig: Any = orig, **kw: Any) -> Any:
            prev = getattr(_tls, "key", None)
            _tls.key = key
            try:
                return _orig(self, key, *a, **kw)
            finally:
                _tls.key = prev

        def make_event(*a: Any, _real: type = real, **kw: Any) -> Any:
            ev = _real(*a, **kw)
            if getattr(ev, "event_type", None) is lookup_type:
                c: collections.Counter[str] = collections.Counter()
                _add_token_ids(ev, c)
                br.count(c)
            return ev

        # the method's own attributes too (LMCache's @request_handler marks
        # on the function, which its RPC registry reads; signature via
        # __wrapped__): without them the server has no `lookup` handler
        functools.update_wrapper(wrapped, orig)
        out += [(cls, meth, wrapped), (mod, "Event", make_event)]
    return out


def lmcache_has_token_trace() -> bool:
    """Whether the installed LMCache does token traces itself (0.5.7 on: its
    ObservabilityConfig has token_trace_enabled, its parser
    --enable-token-trace, its MP_LOOKUP carries token_ids). False when that
    cannot be told (no LMCache, or not 0.5.x)."""
    try:
        import dataclasses
        import importlib

        cfg = importlib.import_module("lmcache.v1.mp_observability.config")
        return any(f.name == "token_trace_enabled"
                   for f in dataclasses.fields(cfg.ObservabilityConfig))
    except Exception:  # noqa: BLE001 - LMCache missing or not 0.5.x
        return False


def install(*, l2_loads: bool = True, warn: Callable[[str], None] | None = None,
            **cbt_config: Unpack[_Config]) -> None:
    """Install the bridge in this process (idempotent for one config).

    cbt_config: cbt.init's keywords. cbt starts when LMCache's tracing would
    (init_otel_tracing under --enable-tracing, with otlp_endpoint and
    otlp_protocol from LMCache's flag by otlp_export_target's rule unless
    otlp_endpoint is given here), or when a
    stand-in subscriber is made on a hand-built bus. Needs LMCache's
    observability modules importable (``lmcache.v1.mp_observability``):
    MissingDependency (an ImportError, one line) names what is missing when
    they are not, e.g. torch under ``pip install --no-deps lmcache``.

    token_trace (one of cbt.init's keywords): LMCache 0.5.7's
    ``--enable-token-trace``: cbt's MP builder makes the ``mp.request.trace``
    spans (``cbt.init(token_trace=True)``)
    and the MP stand-in subscribes to MP_LOOKUP as 0.5.7's does. On an
    LMCache that does not publish token ids (0.5.6:
    ``lmcache_has_token_trace()`` false) the lookups that publish MP_LOOKUP
    also add the prompt's ``token_ids`` there as 0.5.7 does
    (``_hook_token_ids``). On 0.5.7, LMCache also hands the stand-in
    ``token_trace_enabled`` itself; a stand-in made so turns it on here too
    when cbt has not started yet (else it warns: cbt runs without them).
    """
    token_trace = bool(cbt_config.get("token_trace"))
    global _bridge
    if _bridge is not None:
        if (_bridge.config == cbt_config and _bridge.l2_loads == l2_loads
                and _bridge.token_trace == token_trace):
            return
        raise RuntimeError("cbt.lmcache is installed with another config: uninstall() first")
    tracing, otel_init, event_bus, _ = _import_lmcache(_TRACING, _OTEL_INIT, _EVENT_BUS, _EVENT)
    br = _Bridge(dict(cbt_config), l2_loads, warn or _default_warn, token_trace)
    classes, get_span_registry = _make_standins(br)

    def init_otel_tracing(otlp_endpoint: str | None = None,
                          resource_attributes: object = None) -> None:
        """cbt.lmcache's stand-in: start cbt with its OTLP exporter."""
        br.start(otlp_endpoint, from_lmcache=True)

    EventBus = event_bus.EventBus
    _warn_if_initialised(tracing, event_bus, br.warn)
    orig_pos = EventBus.__dict__["publish_on_stream"]

    def publish_on_stream(self: Any, stream: Any, event: Any) -> None:
        if not self._config.enabled:
            return
        handle = _cuda_handle(stream)
        if handle and self in br.buses and br.on_stream(handle, event):
            # cbt has it as a CUDA mark; LMCache's own path still runs for
            # its other subscribers (their timing as without the bridge),
            # and the stand-ins skip the event there
            _mark_fed(event, bool(getattr(event_bus, "_has_native_recorder", False)))
        orig_pos(self, stream, event)

    publish_on_stream.__doc__ = orig_pos.__doc__
    for obj, attr, new in ([(tracing, n, c) for n, c in classes.items()]
                           + [(tracing, "get_span_registry", get_span_registry),
                              (otel_init, "init_otel_tracing", init_otel_tracing),
                              (EventBus, "publish_on_stream", publish_on_stream)]
                             + (_hook_token_ids(br) if token_trace
                                and not lmcache_has_token_trace() else [])):
        br.saved.append((obj, attr, obj.__dict__.get(attr, _MISSING)))
        setattr(obj, attr, new)
    _bridge = br
    atexit.register(_atexit)


_MISSING = object()


def _warn_if_initialised(tracing: ModuleType, event_bus: ModuleType,
                         warn: Callable[[str], None]) -> bool:
    """Warn when LMCache's global bus has LMCache's own tracing subscribers
    registered already (init_observability ran before install()): the bridge
    cannot take their place there, so that bus keeps building LMCache's spans
    and cbt gets nothing from it. True when it warned."""
    bus = getattr(event_bus, "_global_bus", None)
    originals = tuple(c for c in (getattr(tracing, n, None) for n in STANDIN_SUBSCRIPTIONS)
                      if isinstance(c, type))
    subs = list(getattr(bus, "_registered_subscribers", ()) or ())
    found = sorted({type(x).__name__ for x in subs if originals and isinstance(x, originals)})
    if found:
        warn("cbt.lmcache: install() after LMCache's init_observability: the global EventBus "
             f"has LMCache's own {', '.join(found)} already; that bus keeps LMCache's spans "
             "and sends cbt nothing. Call install() first (python -m cbt.lmcache does).")
    return bool(found)


def _unsubscribe(br: _Bridge) -> None:
    """Take the stand-ins' callbacks off every bus they registered on, so
    has_subscribers answers as before they came."""
    for bus, refs in list(br.standins.items()):
        mine = {id(s) for s in (r() for r in refs) if s is not None}
        for s in (r() for r in refs):
            if s is not None and s._registered:
                s._registered = False
                with _lock:
                    br.live -= 1
        lock = getattr(bus, "_lock", None) or threading.Lock()
        with lock:
            for t, cbs in list(bus._subscribers.items()):
                cbs[:] = [cb for cb in cbs if id(getattr(cb, "__self__", None)) not in mine]
                if not cbs:
                    del bus._subscribers[t]
            bus._registered_subscribers[:] = [x for x in bus._registered_subscribers
                                              if id(x) not in mine]
    br.standins.clear()


def _atexit() -> None:
    if _bridge is not None:
        _bridge.stop()


def uninstall() -> None:
    """Put LMCache's originals back and shut down cbt if the bridge started it."""
    global _bridge
    br = _bridge
    if br is None:
        return
    for obj, attr, old in reversed(br.saved):
        if old is _MISSING:
            delattr(obj, attr)
        else:
            setattr(obj, attr, old)
    _unsubscribe(br)
    br.stop()
    _bridge = None


def installed() -> bool:
    return _bridge is not None


def counters() -> dict[str, int]:
    """The bridge's counters: events_in (LMCache events handed to cbt),
    events_out (cbt events published), events_refused,
    stream_marks, stream_fallbacks, token_ids_added (0.5.6 MP_LOOKUPs given
    their token_ids under token_trace; token_ids_unmatched: one whose
    session was not the running lookup's key), and dropped_<why> for each value left out
    (none, list, dict, bytes, int_range, object, key,
    too_many, bad_sample). Empty when not installed."""
    br = _bridge
    if br is None:
        return {}
    with br.clock:
        c, dropped = dict(br.c), dict(br.dropped)
    out = {k: c.get(k, 0) for k in ("events_in", "events_out", "events_refused",
                                     "stream_marks", "stream_fallbacks", "stream_refused",
                                     "stream_partial")}
    out.update({k: v for k, v in c.items() if k not in out})
    out.update({f"dropped_{k}": v for k, v in dropped.items()})
    out["dropped"] = sum(dropped.values())
    return out
