#!/usr/bin/env python3
"""bench/bench_python.py — what one event costs from Python, ns per event.

    python bench/bench_python.py [--n N] [--repeat R] [--cbt-only] [--lmcache-root DIR]

Needs the `cbt` package installed (`pip install .`; make test's venv
build/pyenv has it). Prints one line per figure:

    <name> <ns per event> ns/event (best of R runs of N)

Figures (then, in the same run, LMCache 0.5.6's EventBus.publish and the
OpenTelemetry SDK's start/end span, from bench_python_peers.py; a peer that
is not installed is skipped with a "# SKIP: <peer>: <reason>" line):
  cbt.publish              cbt.publish("mp.store.start", sid, engine_id=0, n=7) into a
                           running tracer (MP subscriber on, no sink), 2 values
  cbt.publish_0values      the same with no values: what a call costs before its keywords
  cbt.publish_8values      the same with 8 int values: what each keyword adds
  cbt.publish_disabled     the 2-value call with no tracer (the names resolve, nothing queued)
  cbt.span                 a `with cbt.span("cb.check", parent=ctx, imp_count=1):` pair
The first line says what the figures depend on: the CPython, the module's
build (_cbt.abi3.so, the limited API, or the interpreter's own full-API
module) and the CPU.
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


def loop_publish_0(n):
    pub = cbt.publish
    for _ in range(n):
        pub("mp.store.start", "req-1")


def loop_publish_8(n):
    pub = cbt.publish
    for _ in range(n):
        pub("mp.store.start", "req-1", engine_id=0, n=7, a=1, b=2, c=3, d=4, e=5, f=6)


def loop_span(n):
    ctx = cbt.extract("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    sp = cbt.span
    for _ in range(n):
        with sp("cb.check", parent=ctx, imp_count=1):
            pass


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def peer(name, fn):
    """Run one baseline; a peer that is not installed (LMCache's unpacked
    wheel, the OpenTelemetry SDK) is skipped with the reason, the rest run."""
    try:
        return fn()
    except (ImportError, OSError) as e:  # OSError: FileNotFoundError, no unpacked wheel
        print(f"# SKIP: {name}: {type(e).__name__}: {e}")
        return {}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--lmcache-root", default=None,
                    help="LMCache 0.5.6's unpacked files (default build/lmcache-env/whl)")
    ap.add_argument("--cbt-only", action="store_true",
                    help="cbt's figures only (no LMCache or OpenTelemetry baselines)")
    a = ap.parse_args(argv)
    from cbt import _cbt
    build = os.path.basename(_cbt.__file__)
    print(f"# bench_python: python {sys.version.split()[0]}, cbt {cbt.__version__} "
          f"({build}, limited API {getattr(_cbt, 'LIMITED_API', 0):#x}), {cpu_model()} "
          f"x{os.cpu_count()}, n={a.n}, best of {a.repeat}")
    loop_publish(1000)  # names resolved and cached before timing
    loop_publish_8(1000)
    print(f"cbt.publish_disabled {best_ns(loop_publish, a.n, a.repeat):.0f} ns/event")
    # 2^22 cells: a 3-cell event x n fits one lane even if the harvester stalls
    cbt.init(lane_capacity=1 << 22, max_lanes=4, queue_capacity=1 << 20)
    try:
        loop_publish(1000)
        cbt.flush()
        print(f"cbt.publish {best_ns(loop_publish, a.n, a.repeat):.0f} ns/event")
        cbt.flush()
        print(f"cbt.publish_0values {best_ns(loop_publish_0, a.n, a.repeat):.0f} ns/event")
        cbt.flush()
        print(f"cbt.publish_8values {best_ns(loop_publish_8, a.n, a.repeat):.0f} ns/event")
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
    if a.cbt_only:
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_python_peers as peers
    lm = peer("lmcache_publish (LMCache 0.5.6's unpacked wheel: tests/lmcache/setup_env.sh)",
              lambda: peers.lmcache_publish_ns(a.n, a.repeat, a.lmcache_root))
    for k, v in lm.items():
        print(f"{k} {v:.0f} ns/event")
    ot = peer("otel_start_span_end (the OpenTelemetry SDK)",
              lambda: peers.otel_span_ns(a.n // 4, a.repeat))
    for k, v in ot.items():
        print(f"{k} {v:.0f} ns/span")
    return 0


if __name__ == "__main__":
    sys.exit(main())
