#!/usr/bin/env python3
"""bench/bench_python.py — what one event costs from Python, ns per event.

    python bench/bench_python.py [--n N] [--repeat R]

Needs the `cbt` package installed (`pip install .`; make test's venv
build/pyenv has it). Prints one line per figure:

    <name> <ns per event> ns/event (best of R runs of N)

Figures (then, in the same run, LMCache 0.5.6's EventBus.publish and the
OpenTelemetry SDK's start/end span, from bench_python_peers.py):
  cbt.publish              cbt.publish("mp.store.start", sid, engine_id=0, n=7) into a
                           running tracer (MP subscriber on, no sink), 2 values
  cbt.publish_disabled     the same call with no tracer (the names resolve, nothing queued)
  cbt.span                 a `with cbt.span("cb.check", parent=ctx, imp_count=1):` pair
The target for cbt.publish is <= 300 ns (issue 12). The queue is drained by the
harvester while the loop runs; a lane large enough for one run is configured
so that no event is dropped (checked: dropped_full must stay 0).
"""
import argparse
import os
import sys
import time

import cbt


def best_ns(fn, n, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn(n)
        dt = time.perf_counter_ns() - t0
        best = min(best, dt / n)
    return best


def loop_publish(n):
    pub = cbt.publish
    for _ in range(n):
        pub("mp.store.start", "req-1", engine_id=0, n=7)


def loop_span(n):
    ctx = cbt.extract("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    sp = cbt.span
    for _ in range(n):
        with sp("cb.check", parent=ctx, imp_count=1):
            pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--lmcache-root", default=None,
                    help="LMCache 0.5.6's unpacked files (default build/lmcache-env/whl)")
    a = ap.parse_args(argv)
    print(f"# bench_python: python {sys.version.split()[0]}, cbt {cbt.__version__}, "
          f"n={a.n}, best of {a.repeat}")
    loop_publish(1000)  # names resolved and cached before timing
    print(f"cbt.publish_disabled {best_ns(loop_publish, a.n, a.repeat):.0f} ns/event")
    # 2^22 cells: a 3-cell event x n fits one lane even if the harvester stalls
    cbt.init(lane_capacity=1 << 22, max_lanes=4, queue_capacity=1 << 20)
    try:
        loop_publish(1000)
        cbt.flush()
        print(f"cbt.publish {best_ns(loop_publish, a.n, a.repeat):.0f} ns/event")
        cbt.flush()
        print(f"cbt.span {best_ns(loop_span, a.n // 4, a.repeat):.0f} ns/span")
        cbt.flush()
    finally:
        m = cbt.shutdown()
    if m.get("dropped_full"):
        print(f"# warning: {m['dropped_full']} events dropped (queue full): figures flatter",
              file=sys.stderr)
    # the baselines, in the same run (bench_python_peers.py): LMCache 0.5.6's
    # EventBus.publish and the OpenTelemetry SDK's start/end span
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import bench_python_peers as peers
        lm = peers.lmcache_publish_ns(a.n, a.repeat, a.lmcache_root)
        for k, v in lm.items():
            print(f"{k} {v:.0f} ns/event")
        for k, v in peers.otel_span_ns(a.n // 4, a.repeat).items():
            print(f"{k} {v:.0f} ns/span")
    except ImportError as e:  # LMCache's files or the OTel SDK not installed
        print(f"# baselines skipped: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
