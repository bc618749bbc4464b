"""tests/lmcache/server_tap.py — `python -m cbt.lmcache ARGS` with a tap that
writes every LMCache event the bridge hands to cbt to a file (make
test-lmcache-server's token-trace run; docs/testing.md).

    python tests/lmcache/server_tap.py EVENTS.pickle -- server --enable-token-trace ...

The tap wraps cbt.lmcache's feed (the stand-ins' forward, on LMCache's drain
thread) and records each event before cbt.lmcache looks at it: its type's
value, its float timestamp (as LMCache stamped it), its session id and its
metadata (LMCache's own dict: the token_ids the bridge adds on 0.5.6 are in
it). Metadata values are kept as they are but for enums, which become their
values (the file is read by another LMCache's modules). One pickled tuple
per event, appended as they come; the file is flushed at each event and
closed at exit. Everything else is `python -m cbt.lmcache`'s main(), unchanged.
"""

from __future__ import annotations

import enum
import pickle
import sys
import threading
from typing import Any


def _plain(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[2] != "--":
        sys.stderr.write("usage: server_tap.py EVENTS.pickle -- LMCACHE-ARGS...\n")
        return 2
    out = open(sys.argv[1], "wb")  # noqa: SIM115 - open for the server's life
    lock = threading.Lock()

    import cbt.lmcache
    from cbt.lmcache import __main__ as bridge_main

    forward = cbt.lmcache._Bridge.forward

    def tapped(self: Any, event: Any) -> None:
        et = event.event_type
        rec = (et if isinstance(et, str) else et.value, event.timestamp,
               event.session_id, _plain(dict(event.metadata or {})))
        with lock:
            if out.closed:  # after main() returned: not part of the run
                sys.stderr.write(f"server_tap: {rec[0]} after the server stopped, not recorded\n")
            else:
                pickle.dump(rec, out)
                out.flush()
        forward(self, event)

    cbt.lmcache._Bridge.forward = tapped  # type: ignore[method-assign]
    try:
        return bridge_main.main(sys.argv[3:])
    finally:
        with lock:
            out.close()
        # what the bridge counted (cbt.lmcache.counters()), for the log
        c = {k: v for k, v in cbt.lmcache.counters().items() if v}
        sys.stderr.write(f"server_tap: cbt.lmcache counters: {c}\n")


if __name__ == "__main__":
    sys.exit(main())
