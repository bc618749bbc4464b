"""tests/python/test_arrays.py — list and tuple values as arrays (docs/python.md,
"Arrays"): what publish() takes and refuses, and what the store counts.

The spans they end up on (mp.request.trace's lmcache.input_ids) are checked
with the MP builder's tests (test_lmcache_bridge.py); here the store's own
counts say each array got in (metrics()["arrays_stored"]) or was refused by
the caller's error, and the process runs in a fresh interpreter because the
store, like the name table, is the process's.
"""
import os
import subprocess
import sys
import textwrap

import pytest

import cbt


def run(code, env=None):
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_lists_and_tuples_of_each_type_are_stored():
    out = run("""
        import cbt
        cbt.init(arrays_capacity=4 << 20)
        m0 = cbt.metrics()
        assert m0["arrays_capacity"] == 4 << 20, m0["arrays_capacity"]
        cbt.publish("mp.lookup", "r1", token_ids=list(range(131072)))
        cbt.publish("mp.lookup", "r2", f=(1.5, float("nan")), b=[True, False], s=["a", "bé"],
                    empty=[])
        cbt.flush()
        m = cbt.metrics()
        print(m["arrays_stored"] - m0["arrays_stored"], m["arrays_dropped"], m["arrays_used"])
        cbt.shutdown()
    """)
    stored, dropped, used = map(int, out.split())
    assert stored == 5 and dropped == 0
    assert used == 0  # no span kept them: the harvester gave them back after dispatch


def test_a_full_store_drops_and_counts_never_raises():
    out = run("""
        import cbt
        cbt.init(arrays_capacity=1 << 20)
        cbt.publish("mp.lookup", "r1", token_ids=list(range(200000)))  # 1.6 MB > 1 MiB
        cbt.flush()
        print(cbt.metrics()["arrays_dropped"])
        cbt.shutdown()
    """)
    assert int(out) == 1


def test_the_environment_sizes_the_store_and_a_bad_value_is_named():
    out = run("""
        import cbt
        cbt.init()
        print(cbt.metrics()["arrays_capacity"])
        cbt.shutdown()
    """, {"CBT_ARRAYS_CAPACITY": str(2 << 20)})
    assert int(out) == 2 << 20
    r = subprocess.run([sys.executable, "-c", "import cbt; cbt.init()"], capture_output=True,
                       text=True, env=dict(os.environ, CBT_ARRAYS_CAPACITY="lots"), timeout=60)
    assert r.returncode != 0
    assert "CBT_ARRAYS_CAPACITY=lots" in r.stderr


@pytest.fixture
def tracer():
    if cbt.enabled():
        cbt.shutdown()
    cbt.init()
    yield
    cbt.shutdown()


@pytest.mark.parametrize("value, words", [
    ([1, 2.5], ["element 1 is a float, not int like element 0"]),
    ([1, True], ["element 1 is a bool"]),
    (["a", None], ["element 1 is a NoneType"]),
    ([[1]], ["element 0 is a list"]),
    ([1, 1 << 64], ["element 1 does not fit in 64 bits"]),
    (["a\0b"], ["NUL"]),
])
def test_a_bad_element_is_named(tracer, value, words):
    with pytest.raises((TypeError, OverflowError, ValueError)) as e:
        cbt.publish("mp.lookup", "r", token_ids=value)
    msg = str(e.value)
    for w in words:
        assert w in msg, msg
    assert "token_ids" in msg or "NUL" in msg


def test_a_dict_or_set_is_not_an_array(tracer):
    for v in ({1: 2}, {1, 2}, range(3)):
        with pytest.raises(TypeError, match="list or tuple"):
            cbt.publish("mp.lookup", "r", token_ids=v)
