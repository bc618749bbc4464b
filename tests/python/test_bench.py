"""tests/python/test_bench.py — bench/bench_python.py runs where its peers are
missing: LMCache's unpacked wheel absent (--lmcache-root pointing nowhere)
is a "# SKIP: lmcache_publish ..." line, not a FileNotFoundError, and cbt's
own figures are still printed."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_python_skips_a_missing_lmcache_and_still_measures_cbt(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_python.py"),
                        "--n", "2000", "--repeat", "1",
                        "--lmcache-root", str(tmp_path / "no-lmcache")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    names = [ln.split()[0] for ln in lines if not ln.startswith("#")]
    for fig in ("cbt.publish", "cbt.publish_0values", "cbt.publish_8values",
                "cbt.publish_disabled", "cbt.span"):
        assert fig in names, r.stdout
    skips = [ln for ln in lines if ln.startswith("# SKIP: lmcache_publish")]
    assert len(skips) == 1 and "no-lmcache" in skips[0], r.stdout
    assert not any(n.startswith("lmcache_") for n in names), r.stdout
