"""tests/python/test_lmcache_install.py — the bridge where LMCache's server cannot run.

``pip install --no-deps lmcache`` is LMCache's CLI-only mode: ``import
lmcache`` works, but LMCache's observability modules, which the bridge
hooks, import torch. There ``cbt.lmcache.install()`` raises
``cbt.lmcache.MissingDependency`` (an ImportError) whose message is one line
naming torch and the pip line, and ``python -m cbt.lmcache ...`` prints that
line alone and exits 2 (docs/lmcache-bridge.md, "Installing LMCache").

Each case runs in a child interpreter whose sys.path has a stand-in
``lmcache`` package laid out as LMCache 0.5.6's (its subscribers package
imports torch, as the real one's does) and whose sys.meta_path refuses
torch, so the test holds whether or not torch is installed here. The last
case uses the real LMCache 0.5.6 files (tests/lmcache/setup_env.sh's
unpacked wheel, fetched once), and skips with the reason when the package
index cannot be reached.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = os.environ.get("CBT_LMCACHE_ENV", os.path.join(ROOT, "build", "lmcache-env"))

TORCH_LINE = ("cbt.lmcache: LMCache's server needs torch, which is not installed: "
              "pip install lmcache==0.5.6 (pulls torch and the CUDA wheels, ~6 GB)")

# run by the child: torch refused, the stand-in first on sys.path, then
# either `python -m cbt.lmcache ARGS` or install()
RUNNER = textwrap.dedent("""\
    import runpy, sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoTorch())
    site, what, *args = sys.argv[1:]
    if site:
        sys.path.insert(0, site)
    if what == "main":
        sys.argv = ["python -m cbt.lmcache", *args]
        runpy.run_module("cbt.lmcache", run_name="__main__", alter_sys=True)
    else:
        import cbt.lmcache
        try:
            cbt.lmcache.install(spans_path="unused.jsonl")
        except ImportError as e:
            print(type(e).__module__ + "." + type(e).__qualname__)
            print(e.name)
            print(str(e))
            sys.exit(3)
        print("installed")
    """)


def _fake_lmcache(root: str, subscribers_init: str) -> str:
    """A stand-in LMCache at root/site: `import lmcache` works (CLI-only
    mode); lmcache.v1.mp_observability.subscribers runs subscribers_init."""
    site = os.path.join(root, "site")
    files = {
        "lmcache/__init__.py": "__version__ = '0.5.6'\n",
        "lmcache/v1/__init__.py": "",
        "lmcache/v1/mp_observability/__init__.py": "",
        "lmcache/v1/mp_observability/subscribers/__init__.py": subscribers_init,
        "lmcache/v1/mp_observability/subscribers/tracing/__init__.py": "",
        "lmcache/cli/__init__.py": "",
        "lmcache/cli/main.py": "def main(argv):\n    print('lmcache main', argv)\n    return 0\n",
    }
    for rel, text in files.items():
        p = os.path.join(site, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
    return site


def _run(tmp_path, site: str, what: str, *args: str) -> subprocess.CompletedProcess[str]:
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    env = dict(os.environ, LMCACHE_DISABLE_BANNER="1")
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, str(runner), site, what, *args], cwd=str(tmp_path),
                          env=env, capture_output=True, text=True, timeout=120)


def _one_line(p: subprocess.CompletedProcess[str], line: str) -> None:
    assert p.returncode == 2, f"exit {p.returncode}, not 2:\n{p.stdout}\n{p.stderr}"
    assert "Traceback" not in p.stderr, f"a traceback, not one line:\n{p.stderr}"
    assert p.stderr == line + "\n", f"stderr is not the one line:\n{p.stderr!r}"
    assert p.stdout == ""


def test_main_without_torch_one_line_exit_2(tmp_path):
    site = _fake_lmcache(str(tmp_path), "import torch\n")
    _one_line(_run(tmp_path, site, "main", "--", "--help"), TORCH_LINE)
    _one_line(_run(tmp_path, site, "main", "server", "--enable-tracing"), TORCH_LINE)


def test_install_without_torch_raises_missing_dependency(tmp_path):
    site = _fake_lmcache(str(tmp_path), "import torch\n")
    p = _run(tmp_path, site, "install")
    assert p.returncode == 3, f"install() did not raise an ImportError:\n{p.stdout}{p.stderr}"
    assert p.stdout.splitlines() == ["cbt.lmcache.MissingDependency", "torch", TORCH_LINE]


def test_main_without_lmcache(tmp_path):
    p = _run(tmp_path, "", "main", "server")
    _one_line(p, "cbt.lmcache: LMCache is not installed: pip install lmcache==0.5.6 (pulls "
                 "torch and the CUDA wheels, ~6 GB)")


def test_main_without_another_dependency(tmp_path):
    # --no-deps without the light ones either (opentelemetry, msgspec, ...)
    site = _fake_lmcache(str(tmp_path), "import cbt_test_absent_dependency.metrics\n")
    _one_line(_run(tmp_path, site, "main", "server"),
              "cbt.lmcache: LMCache's server needs cbt_test_absent_dependency, which is not "
              "installed (LMCache installed with --no-deps?): pip install lmcache==0.5.6 "
              "installs it")


def test_main_with_an_lmcache_without_the_modules(tmp_path):
    # an LMCache before 0.5 (no lmcache.v1.mp_observability)
    site = _fake_lmcache(str(tmp_path), "")
    os.remove(os.path.join(site, "lmcache", "v1", "mp_observability", "subscribers", "tracing",
                           "__init__.py"))
    os.rmdir(os.path.join(site, "lmcache", "v1", "mp_observability", "subscribers", "tracing"))
    _one_line(_run(tmp_path, site, "main", "server"),
              "cbt.lmcache: this LMCache has no module "
              "lmcache.v1.mp_observability.subscribers.tracing: the bridge needs LMCache 0.5.x: "
              "pip install lmcache==0.5.6")


# the rest of the modules install() imports, for a stand-in whose imports all work
WORKING = {
    "lmcache/v1/mp_observability/otel_init.py":
        "def init_otel_tracing(otlp_endpoint=None, resource_attributes=None):\n    pass\n",
    "lmcache/v1/mp_observability/event.py": textwrap.dedent("""\
        import enum
        from cbt.lmcache import EXTRA_EVENT_TYPES, STANDIN_SUBSCRIPTIONS
        _names = sorted({t for ts in STANDIN_SUBSCRIPTIONS.values() for t in ts}
                        | set(EXTRA_EVENT_TYPES))
        EventType = enum.Enum("EventType", {n: n.lower() for n in _names})
        """),
    "lmcache/v1/mp_observability/event_bus.py": textwrap.dedent("""\
        class EventSubscriber:
            def register(self, bus):
                pass
        class EventBus:
            def publish_on_stream(self, stream, event):
                pass
        """),
}


def test_main_when_lmcache_imports_runs_lmcache(tmp_path):
    # LMCache's modules import: install() goes through and LMCache's main
    # gets the arguments (the one line is only for what is missing)
    site = _fake_lmcache(str(tmp_path), "")
    for rel, text in WORKING.items():
        with open(os.path.join(site, rel), "w", encoding="utf-8") as f:
            f.write(text)
    p = _run(tmp_path, site, "main", "--", "--help")
    assert p.returncode == 0, f"exit {p.returncode}:\n{p.stdout}\n{p.stderr}"
    assert p.stdout == "lmcache main ['--help']\n", p.stdout
    assert p.stderr == "", p.stderr


def test_main_without_torch_real_lmcache(tmp_path):
    """The real LMCache 0.5.6 files (its own imports reach torch through
    subscribers.metrics -> distributed.api), torch refused."""
    # fetched and unpacked once, cached (as test_lmcache_bridge.py's fixture does)
    s = subprocess.run([os.path.join(ROOT, "tests", "lmcache", "setup_env.sh"), ENV],
                       capture_output=True, text=True, timeout=900)
    if s.returncode == 77:
        why = (s.stdout.strip().splitlines() or ["setup_env.sh: 77"])[-1]
        pytest.skip(f"lmcache bridge: {why}")
    assert s.returncode == 0, f"tests/lmcache/setup_env.sh {ENV}: {s.returncode}\n{s.stderr}"
    whl = os.path.join(ENV, "whl")
    p = _run(tmp_path, whl, "main", "--", "--help")
    assert p.returncode == 2, f"exit {p.returncode}, not 2:\n{p.stdout}\n{p.stderr}"
    assert "Traceback" not in p.stderr, p.stderr
    # LMCache logs its own warnings at import ("CLI-only mode"); the bridge's is the last line
    assert p.stderr.splitlines()[-1] == TORCH_LINE, p.stderr
