"""tests/lmcache/trace_analyze.py — LMCache 0.5.7's `lmcache` command (its
`bench trace-analyze`) from the unpacked lmcache-cli wheel, in the venv
that has LMCache 0.5.6 installed (make test-lmcache-server; docs/testing.md).

    python tests/lmcache/trace_analyze.py ROOT bench trace-analyze -i FILE ...

ROOT holds the unpacked lmcache-cli 0.5.7rc3 wheel (pure Python). Its
directory goes first on sys.path, so `lmcache` is 0.5.7's package, not the
installed 0.5.6 (which is neither changed nor imported); torch, numba, numpy,
blake3 and sortedcontainers come from the venv. One package is not run:
`lmcache.v1.multiprocess.modules.blend/__init__.py` re-exports the whole
blend module, starting with `from lmcache import device_ops`, which exists
only with LMCache's native extension (not in the lmcache-cli wheel: 0.5.7's
`lmcache/__init__` then logs "CLI-only mode"). trace-analyze needs only
`blend.matcher` from it, so that package is put in sys.modules bare (its
__path__ the wheel's directory) and its leaf modules load as usual, the
way tests/lmcache/lmcache_import.py loads LMCache's subscribers.
Everything else is LMCache's own CLI: lmcache.cli.main.main(ARGS).
"""

from __future__ import annotations

import os
import sys
import types


def main() -> int:
    if len(sys.argv) < 2 or not os.path.isfile(
            os.path.join(sys.argv[1], "lmcache", "tools", "cache_simulator", "trace_analyze.py")):
        sys.stderr.write("usage: trace_analyze.py ROOT LMCACHE-ARGS... "
                         "(ROOT: the unpacked lmcache-cli 0.5.7 wheel)\n")
        return 2
    root = os.path.abspath(sys.argv[1])
    sys.path.insert(0, root)
    import lmcache

    if os.path.dirname(os.path.abspath(lmcache.__file__)) != os.path.join(root, "lmcache"):
        sys.stderr.write(f"trace_analyze.py: lmcache came from {lmcache.__file__}, not {root}\n")
        return 2
    import lmcache.v1.multiprocess.modules  # noqa: F401 - the parents, as usual

    name = "lmcache.v1.multiprocess.modules.blend"
    pkg = types.ModuleType(name)
    pkg.__path__ = [os.path.join(root, *name.split("."))]
    sys.modules[name] = pkg
    from lmcache.cli.main import main as lmcache_main

    sys.argv = ["lmcache"] + sys.argv[2:]
    rc = lmcache_main()
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
