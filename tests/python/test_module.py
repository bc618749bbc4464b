"""tests/python/test_module.py — how cbt._cbt is built and loaded (docs/python.md,
"The extension module").

- The module is the limited-API build: _cbt.abi3.so, LIMITED_API 0x030A0000, a
  cp310-abi3 wheel, Requires-Python >= 3.10 (or, when the suite runs against
  the full-API build, CBT_PY_LIMITED_API=OFF in the environment, the
  interpreter's own kind).
- The same files import and trace under every other CPython >= 3.10 found on
  the machine (the point of abi3).
- Its classes are heap types, immutable as the static types were, PSpan not
  instantiable from Python; every instance holds its type and gives it back.
- A second exec of the module (importlib.util.module_from_spec +
  exec_module) raises ImportError saying why and leaves the first module
  working; importlib.reload gives the same module; an import in a
  sub-interpreter raises the same ImportError.
- On a free-threaded CPython the import turns the GIL on (Py_mod_gil).
What could leave a process in a bad state runs in a child interpreter.
"""
import glob
import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

import cbt
from cbt import _cbt

Py_TPFLAGS_IMMUTABLETYPE = 1 << 8
Py_TPFLAGS_HEAPTYPE = 1 << 9
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def expect_limited():
    """Whether this run expects the limited-API build: the default, unless
    the interpreter is free-threaded (it cannot load abi3) or the runner
    says it built the full-API variant (CBT_PY_LIMITED_API=OFF)."""
    if FREE_THREADED:
        return False
    return os.environ.get("CBT_PY_LIMITED_API", "ON").upper() not in ("OFF", "0", "NO", "FALSE")


def run_py(code, python=sys.executable, timeout=120, env=None):
    return subprocess.run([python, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env)


def wheel_tags():
    text = importlib.metadata.distribution("cbt").read_text("WHEEL") or ""
    return [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Tag:")]


def test_module_is_the_abi3_build():
    name = os.path.basename(_cbt.__file__)
    tags = wheel_tags()
    assert importlib.metadata.metadata("cbt")["Requires-Python"] == ">=3.10"
    if expect_limited():
        assert name == "_cbt.abi3.so", f"not the limited-API module: {name}"
        assert _cbt.LIMITED_API == 0x030A0000
        assert tags and all(t.startswith("cp310-abi3-") for t in tags), tags
    else:
        assert name == "_cbt" + sysconfig.get_config_var("EXT_SUFFIX"), name
        assert _cbt.LIMITED_API == 0
        assert tags and not any("abi3" in t for t in tags), tags


def other_cpythons():
    """Interpreters other than this one that can load a cp310-abi3 module
    (CPython >= 3.10, not free-threaded): CBT_OTHER_PYTHONS (':'-separated),
    python3.10 ... python3.15 on PATH, and pyenv's versions."""
    cands = [p for p in os.environ.get("CBT_OTHER_PYTHONS", "").split(":") if p]
    cands += [shutil.which(f"python3.{m}") or "" for m in range(10, 16)]
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    cands += sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3")))
    me = sys.version_info[:2]
    found = {}
    for p in cands:
        if not p or not os.access(p, os.X_OK):
            continue
        r = run_py("import sys, sysconfig; print(sys.implementation.name, *sys.version_info[:2],"
                   " bool(sysconfig.get_config_var('Py_GIL_DISABLED')))", python=p, timeout=30)
        if r.returncode != 0:
            continue  # a pyenv shim for a version not selected, a broken install
        impl, major, minor, ft = r.stdout.split()
        ver = (int(major), int(minor))
        if impl == "cpython" and ver >= (3, 10) and ver != me and ft == "False":
            found.setdefault(ver, p)
    return sorted(found.items())


def test_the_same_module_traces_under_every_other_cpython(tmp_path):
    if not expect_limited():
        pytest.skip("the full-API build loads only under the CPython it was built for")
    others = other_cpythons()
    if not others:
        pytest.skip("no other CPython >= 3.10 here (CBT_OTHER_PYTHONS, python3.1x on PATH, "
                    "~/.pyenv/versions)")
    pkg = tmp_path / "site"
    shutil.copytree(os.path.dirname(cbt.__file__), pkg / "cbt",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # a repaired wheel's bundled libraries (auditwheel: the module's RPATH is
    # $ORIGIN/../cbt.libs), as scripts/pytest.sh installs it
    libs = os.path.join(os.path.dirname(os.path.dirname(cbt.__file__)), "cbt.libs")
    if os.path.isdir(libs):
        shutil.copytree(libs, pkg / "cbt.libs")
    code = f"""
import sys
sys.path.insert(0, {str(pkg)!r})
import cbt, cbt._cbt as m
assert m.__file__.startswith({str(pkg)!r}) and m.__file__.endswith('.abi3.so'), m.__file__
assert all(t.__flags__ & {Py_TPFLAGS_HEAPTYPE} for t in (m.CpuStream, m.SpanContext, m.PSpan))
cbt.init(spans_path={str(tmp_path / 'spans.jsonl')!r}, otlp_endpoint='')
cbt.publish('mp.request.start', 'r1', model='m')
with cbt.span('cb.check', session_id='r1', imp_count=1):
    pass
cbt.publish('mp.request.end', 'r1')
print(sys.version_info[0], sys.version_info[1], cbt.shutdown()['spans_ended'])
"""
    for ver, python in others:
        r = run_py(code, python=python)
        assert r.returncode == 0, f"CPython {ver} ({python}): {r.stderr[-2000:]}"
        assert r.stdout.split() == [str(ver[0]), str(ver[1]), "2"], (python, r.stdout)


def test_classes_are_immutable_heap_types():
    for t in (cbt.CpuStream, cbt.SpanContext, _cbt.PSpan):
        assert t.__flags__ & Py_TPFLAGS_HEAPTYPE, t
        assert t.__flags__ & Py_TPFLAGS_IMMUTABLETYPE, t
        with pytest.raises(TypeError):
            t.extra = 1  # as with the static types they replaced
    assert cbt.CpuStream.__module__ == "cbt" and cbt.SpanContext.__module__ == "cbt"
    assert _cbt.PSpan.__module__ == "cbt._cbt"
    with pytest.raises(TypeError, match="cannot create"):
        _cbt.PSpan()  # only cbt.span makes one
    for t in (cbt.CpuStream, cbt.SpanContext):
        with pytest.raises(TypeError):
            type("Sub", (t,), {})  # not subclassable, as before


TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_instances_hold_their_type_and_give_it_back():
    ctx = cbt.extract(TP)
    makers = {
        cbt.SpanContext: [lambda: cbt.SpanContext("0af7651916cd43dd8448eb211c80319c",
                                                  "b7ad6b7169203331"),
                          lambda: cbt.extract(TP)],
        _cbt.PSpan: [lambda: _cbt.span_begin("cb.check", ctx, "", 0, None, None)],
        cbt.CpuStream: [lambda: cbt.CpuStream()],
    }
    for t, makes in makers.items():
        for make in makes:
            n = 4 if t is cbt.CpuStream else 200  # a stream is a thread
            before = sys.getrefcount(t)
            objs = [make() for _ in range(n)]
            assert all(type(o) is t for o in objs)
            assert sys.getrefcount(t) >= before + n, t  # each instance holds its type
            if t is cbt.CpuStream:
                [o.close() for o in objs]  # noqa: its own scope: no name left holding one
            del objs
            assert sys.getrefcount(t) == before, f"{t.__name__}: dealloc keeps its type"


def test_a_second_exec_is_refused_and_the_first_module_keeps_working(tmp_path):
    spans = str(tmp_path / "spans.jsonl")
    r = run_py(f"""
import importlib, importlib.util, cbt, cbt._cbt as first
spec = importlib.util.find_spec('cbt._cbt')
copy = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(copy)
except ImportError as e:
    print('refused:', e)
else:
    print('second exec succeeded')
assert importlib.reload(first) is first, 'reload made another module'
cbt.init(spans_path={spans!r}, otlp_endpoint='')
cbt.publish('mp.request.start', 'r1')
cbt.publish('mp.request.end', 'r1')
try:
    cbt.extract('nope')
except cbt.Error as e:  # the first module's Error class, still its errors'
    print('cbt.Error', e.status == first.ERR_BAD_TRACEPARENT)
try:
    cbt.publish('mp.request.start', 'r2', x=object())
except TypeError:
    print('TypeError')
print('spans_ended', cbt.shutdown()['spans_ended'])
""")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.splitlines()
    assert out[0].startswith("refused: cbt._cbt is loaded already in this process"), out
    assert "one per process" in out[0] and "module_from_spec" in out[0], out
    assert out[1:] == ["cbt.Error True", "TypeError", "spans_ended 1"], out


def test_an_import_in_a_sub_interpreter_is_refused(tmp_path):
    r = run_py("import _testcapi; print(hasattr(_testcapi, 'run_in_subinterp'))")
    if r.returncode != 0 or r.stdout.strip() != "True":
        pytest.skip("this CPython has no _testcapi.run_in_subinterp (its test modules are "
                    "not installed)")
    out = str(tmp_path / "sub.txt")
    r = run_py(f"""
import _testcapi, cbt
code = '''
try:
    import cbt
    r = 'imported'
except ImportError as e:
    r = 'ImportError: ' + str(e)
open({out!r}, 'w').write(r)
'''
assert _testcapi.run_in_subinterp(code) == 0
cbt.init(otlp_endpoint='')
cbt.publish('mp.request.start', 'r1')
print('published', cbt.shutdown()['published'])
""")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["published", "1"], r.stdout
    with open(out) as f:
        msg = f.read()
    assert msg.startswith("ImportError: cbt._cbt is loaded already in this process"), msg
    assert "sub-interpreter" in msg


def test_free_threaded_import_turns_the_gil_on():
    if not FREE_THREADED:
        pytest.skip("not a free-threaded CPython (Py_mod_gil matters only there)")
    r = run_py("import sys; a = sys._is_gil_enabled(); import cbt; "
               "print(a, sys._is_gil_enabled())", env=dict(os.environ, PYTHON_GIL=""))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"], r.stdout
