"""tests/lmcache/lmcache_import.py — LMCache 0.5.6's event types and tracing
subscribers, imported without torch (docs/lmcache-0.5.6.md §5).

The package ``__init__`` files on the way to the subscribers import torch (or
native code linked against libtorch), so bare package objects with the right
``__path__`` are put into ``sys.modules`` first and those files never run; the
leaf modules then load from the unpacked wheel as usual. ``transfer_phase.py``
also needs ``lmcache.lmcache_native``, which is a stub here (its
``TransferDirection`` values are those of ``lmcache/lmcache_native.pyi``).

``load(root)`` installs an OpenTelemetry ``TracerProvider`` with an
``InMemorySpanExporter`` behind a ``SimpleSpanProcessor`` (before the
subscriber modules are imported, as §5 did) and returns what the driver uses.
"""

from __future__ import annotations

import enum
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

_BARE_PACKAGES = (
    "lmcache",
    "lmcache.v1",
    "lmcache.v1.mp_observability",
    "lmcache.v1.mp_observability.subscribers",
    "lmcache.v1.mp_observability.subscribers.tracing",
    "lmcache.v1.mp_observability.trace",
    "lmcache.v1.platform",
)


@dataclass
class LMCache:
    """What the conformance driver needs of LMCache and of the OTel SDK."""

    Event: Any
    EventType: Any
    SpanRegistry: Any
    MPServerTracingSubscriber: Any
    BlendTracingSubscriber: Any
    TimeoutTracingSubscriber: Any
    TransferPhaseTracingSubscriber: Any
    exporter: Any  # InMemorySpanExporter: get_finished_spans()
    version: str


def load(root: str) -> LMCache:
    """Import LMCache 0.5.6 from the unpacked wheel at ``root``."""
    if not os.path.isfile(os.path.join(root, "lmcache", "v1", "mp_observability", "event.py")):
        raise FileNotFoundError(f"{root} holds no unpacked lmcache wheel")
    for name in _BARE_PACKAGES:
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = pkg
    nat = types.ModuleType("lmcache.lmcache_native")
    nat.TransferDirection = enum.IntEnum("TransferDirection", {"H2D": 0, "D2H": 1})
    nat.PageBufferShapeDesc = nat.KernelGroupSpec = type("Stub", (), {})
    sys.modules["lmcache.lmcache_native"] = nat

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    from lmcache.v1.mp_observability.event import Event, EventType
    from lmcache.v1.mp_observability.subscribers.tracing.cb_server import BlendTracingSubscriber
    from lmcache.v1.mp_observability.subscribers.tracing.mp_server import (
        MPServerTracingSubscriber,
    )
    from lmcache.v1.mp_observability.subscribers.tracing.span_registry import SpanRegistry
    from lmcache.v1.mp_observability.subscribers.tracing.timeout import TimeoutTracingSubscriber
    from lmcache.v1.mp_observability.subscribers.tracing.transfer_phase import (
        TransferPhaseTracingSubscriber,
    )

    version = "?"
    vfile = os.path.join(root, "lmcache", "_version.py")
    if os.path.isfile(vfile):
        ns: dict[str, Any] = {}
        with open(vfile) as f:
            exec(compile(f.read(), vfile, "exec"), ns)  # noqa: S102 - the wheel's own file
        version = str(ns.get("__version__", ns.get("version", "?")))
    return LMCache(Event, EventType, SpanRegistry, MPServerTracingSubscriber,
                   BlendTracingSubscriber, TimeoutTracingSubscriber,
                   TransferPhaseTracingSubscriber, exporter, version)
