"""tests/python/test_types.py — the package's types, as a user's mypy sees them.

- every ```python block of docs/python.md is type-checked with
  ``mypy --strict`` against the stubs (python/cbt/*.pyi), and run where it
  can be (a block that imports torch is checked, not run, without torch);
  docs/lmcache-bridge.md's are type-checked;
- ``python -m mypy.stubtest cbt``: the stubs against the installed runtime
  module (the C extension built from this tree and python/cbt/*.py);
- ``mypy --strict python/cbt``: the stubs and the LMCache bridge's code;
- _cbt.c's keyword lists (which stubtest cannot see: a C function has no
  signature to inspect) against the stub's keywords.

mypy comes from scripts/pytest.sh's PINS; without it each test skips with
the reason. The stubs are read from python/ (MYPYPATH), not from the
installed copy, so an edited .pyi is checked without a reinstall.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "python", "cbt")
DOC = os.path.join(ROOT, "docs", "python.md")
# type-checked too (not run: its example needs LMCache)
BRIDGE_DOC = os.path.join(ROOT, "docs", "lmcache-bridge.md")
# docs/python.md has this many ```python blocks at least (the API, a span, the
# replay example, the CacheBlend scheduler and worker): fewer means the
# extraction below stopped finding them, and the check would pass on nothing
MIN_DOC_BLOCKS = 5

# A stand-in for torch's types, only what docs/python.md's worker example
# uses, for a venv without torch (the test venv has none): the example's use
# of cbt is what is checked. With torch installed its own types are used.
TORCH_STUB = {
    "torch/__init__.pyi": "from . import cuda as cuda\n",
    "torch/cuda/__init__.pyi": textwrap.dedent("""\
        class Stream:
            @property
            def cuda_stream(self) -> int: ...
        def current_stream() -> Stream: ...
        """),
}


def _need_mypy() -> None:
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.skip("types: mypy is not installed (scripts/pytest.sh's PINS has it)")


def _env(*stub_dirs: str) -> dict[str, str]:
    env = dict(os.environ)
    env["MYPYPATH"] = os.pathsep.join((os.path.join(ROOT, "python"),) + stub_dirs)
    return env


def _mypy(args: list[str], cwd: str, *stub_dirs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--cache-dir", os.devnull, "--no-error-summary",
                           "--show-error-codes", *args],
                          cwd=cwd, env=_env(*stub_dirs), capture_output=True, text=True,
                          timeout=300)


# ---- docs/python.md's examples ----------------------------------------------------------

def doc_blocks(text: str) -> list[tuple[int, str]]:
    """(line of the block's first code line, code) for each ```python block."""
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            assert j < len(lines), f"docs/python.md:{i + 1}: a ```python block never closes"
            out.append((start + 1, "\n".join(lines[start:j]) + "\n"))
            i = j
        i += 1
    return out


def _blocks(doc: str = DOC) -> list[tuple[int, str]]:
    with open(doc, encoding="utf-8") as f:
        return doc_blocks(f.read())


def _write_blocks(blocks: list[tuple[int, str]], d: str, doc: str = DOC) -> list[str]:
    names = []
    stem = re.sub(r"\W", "_", os.path.basename(doc))
    for line, code in blocks:
        name = f"{stem}_line_{line}.py"
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(code)
        names.append(name)
    return names


def _torch_stub(d: str) -> list[str]:
    """A stub dir for torch when torch is not importable, else none."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        return []
    root = os.path.join(d, "torch-stub")
    for rel, text in TORCH_STUB.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
    return [root]


def _doc_lines(out: str) -> str:
    """mypy's 'python_md_line_N.py:M: ...' as 'docs/python.md:N+M-1: ...'."""
    def sub(m: re.Match[str]) -> str:
        doc = m.group(1).replace("_md", ".md").replace("_", "-")
        return f"docs/{doc}:{int(m.group(2)) + int(m.group(3)) - 1}:"
    return re.sub(r"(\w+_md)_line_(\d+)\.py:(\d+):", sub, out)


def test_doc_examples_found():
    blocks = _blocks()
    assert len(blocks) >= MIN_DOC_BLOCKS, (
        f"docs/python.md: {len(blocks)} ```python blocks found, at least {MIN_DOC_BLOCKS} "
        f"expected: the examples moved or their fences changed, and test_doc_examples_mypy "
        f"would check nothing")


def test_doc_examples_mypy(tmp_path):
    """Every ```python block of docs/python.md (and docs/lmcache-bridge.md)
    passes mypy --strict, each block a module of its own, against the stubs
    in python/cbt."""
    _need_mypy()
    blocks = _blocks()
    assert blocks, "docs/python.md has no ```python block"
    names = _write_blocks(blocks, str(tmp_path))
    names += _write_blocks(_blocks(BRIDGE_DOC), str(tmp_path), BRIDGE_DOC)
    p = _mypy(names, str(tmp_path), *_torch_stub(str(tmp_path)))
    assert p.returncode == 0, (
        "docs/python.md's (or docs/lmcache-bridge.md's) examples do not type-check with "
        "mypy --strict against python/cbt/*.pyi (fix the example, or the stub if the "
        "example is right):\n"
        + _doc_lines(p.stdout + p.stderr))


@pytest.mark.parametrize("line,code", [pytest.param(n, c, id=f"python.md:{n}")
                                       for n, c in _blocks()])
def test_doc_example_runs(line, code, tmp_path):
    """Each block runs as written, in a fresh process and directory (a block
    that imports torch is only type-checked where torch is missing)."""
    import importlib.util

    from cbt import _cbt

    if re.search(r"^\s*import torch\b", code, re.M) and importlib.util.find_spec("torch") is None:
        pytest.skip(f"types: docs/python.md:{line}: the example imports torch, which is not "
                    f"installed (test_doc_examples_mypy still checks it)")
    if "trace_level=\"gpu\"" in code and not _cbt.HAVE_RECORDING:
        pytest.skip(f"types: docs/python.md:{line}: a recording example, and this build has no "
                    f"recording (cbt._cbt.HAVE_RECORDING is 0)")
    env = dict(os.environ)
    for k in ("CB_TRACING", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
              "CBT_TRACE_LEVEL", "CBT_SPANS_PATH"):
        env.pop(k, None)
    p = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (f"docs/python.md:{line}: the example fails when run "
                               f"(exit {p.returncode}):\n{p.stderr[-3000:]}")


# ---- a user's code --------------------------------------------------------------------

def test_typed_usage(tmp_path):
    """tests/python/typed_usage.py (the documented API, path-like file names,
    cbt._cbt's constants, a return inside each context manager) passes mypy
    --strict, and each line marked ``# E: CODE`` gets exactly that error."""
    _need_mypy()
    src = os.path.join(ROOT, "tests", "python", "typed_usage.py")
    want = {}
    with open(src, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            m = re.search(r"# E: ([a-z-]+)\s*$", text)
            if m:
                want[n] = m.group(1)
    assert len(want) >= 8, "typed_usage.py lost its '# E:' lines"
    p = _mypy([src], str(tmp_path))
    got: dict[int, list[str]] = {}
    for m in re.finditer(r"typed_usage\.py:(\d+): error: .*\[([a-z-]+)\]$", p.stdout, re.M):
        got.setdefault(int(m.group(1)), []).append(m.group(2))
    bad = [f"line {n}: expected error [{c}], got {got.get(n, 'none')}"
           for n, c in sorted(want.items()) if c not in got.get(n, [])]
    bad += [f"line {n}: unexpected {codes}" for n, codes in sorted(got.items()) if n not in want]
    assert not bad and "error:" in p.stdout, (
        "mypy --strict on tests/python/typed_usage.py against python/cbt/*.pyi:\n"
        + "\n".join(bad) + "\n--- mypy said:\n" + p.stdout + p.stderr)


# ---- the stubs against the runtime --------------------------------------------------------

def test_stubtest():
    """python -m mypy.stubtest cbt: python/cbt/*.pyi (and the bridge's .py)
    against the package as installed from this tree."""
    _need_mypy()
    allow = os.path.join(ROOT, "tests", "python", "stubtest_allowlist.txt")
    args = [sys.executable, "-m", "mypy.stubtest", "cbt"]
    if os.path.exists(allow):
        args += ["--allowlist", allow]
    p = subprocess.run(args, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (
        "the stubs python/cbt/_cbt.pyi and python/cbt/__init__.pyi differ from the runtime "
        "module (the cbt package built from this tree). stubtest names each entry that "
        "differs, the stub's side first, then the runtime's ('MISSING': a name the other side "
        "has and this one lacks). Make the stub say what the runtime does (docs/python.md is "
        "the reference); a name that is genuinely dynamic goes into "
        "tests/python/stubtest_allowlist.txt, with a comment saying why:\n"
        + p.stdout[-12000:] + p.stderr[-3000:])


def test_mypy_strict_package():
    """mypy --strict python/cbt: the stubs and the bridge (cbt.lmcache) type-check."""
    _need_mypy()
    p = _mypy([os.path.join("python", "cbt")], ROOT)
    assert p.returncode == 0, ("mypy --strict python/cbt fails (the stubs or the LMCache "
                               "bridge's code):\n" + p.stdout + p.stderr)


# ---- _cbt.c's keyword lists against the stub ----------------------------------------------

def c_kwlist(src: str, func: str) -> list[str]:
    """The kwlist of _cbt.c's C function ``func`` (its first
    ``static char *kwlist[] = {...}`` after the definition's line)."""
    m = re.search(r"^static PyObject \*" + re.escape(func) + r"\(", src, re.M)
    assert m, f"python/cbt/_cbt.c has no function {func}: update this test's table"
    k = re.compile(r"static char \*kwlist\[\] = \{(.*?)\};", re.S).search(src, m.end())
    assert k, f"python/cbt/_cbt.c: {func} has no kwlist"
    body = src[m.end():k.start()]
    assert not re.search(r"^static PyObject \*", body, re.M), \
        f"python/cbt/_cbt.c: {func} has no kwlist of its own"
    return re.findall(r'"([^"]+)"', k.group(1))


def stub_keywords(tree: ast.Module, where: str) -> list[str]:
    """The keywords the stub gives: "Class" (a TypedDict's keys),
    "func" or "Class.method" (its parameters, self/cls left out)."""
    parts = where.split(".")
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in parts:
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef))
                     and n.name == part), None)
        assert node is not None, f"python/cbt/_cbt.pyi has no {where}"
        body = getattr(node, "body", [])
    if isinstance(node, ast.ClassDef):
        return [n.target.id for n in node.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    assert isinstance(node, ast.FunctionDef)
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return [n for n in names if n not in ("self", "cls")]


# C function -> where the stub lists its keywords
KWLISTS = {
    "py_init": "_Config",
    "py_flush": "flush",
    "py_replay": "replay",
    "CpuStream_new": "CpuStream.__new__",
    "SpanContext_new": "SpanContext.__new__",
}


def test_stub_keywords_match_c():
    with open(os.path.join(PKG, "_cbt.c"), encoding="utf-8") as f:
        src = f.read()
    with open(os.path.join(PKG, "_cbt.pyi"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    bad = []
    for func, where in KWLISTS.items():
        c, stub = c_kwlist(src, func), stub_keywords(tree, where)
        if set(c) != set(stub):
            bad.append(f"{func} -> {where}: only in _cbt.c: {sorted(set(c) - set(stub))}; "
                       f"only in the stub: {sorted(set(stub) - set(c))}")
    assert not bad, ("python/cbt/_cbt.pyi's keywords differ from _cbt.c's kwlists (stubtest "
                     "cannot see a C function's keywords); add each to the stub with its "
                     "type (docs/python.md):\n" + "\n".join(bad))
