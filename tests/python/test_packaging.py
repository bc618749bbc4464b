"""tests/python/test_packaging.py — the package as pip installs it (docs/install.md,
"The Python package").

- cbt.build_info() tells what the build has, and agrees with the extension's
  own HAVE_* constants; the extension names neither the CUDA runtime nor CUPTI
  in its DT_NEEDED (it imports where CUDA is not installed);
- the `cbt` command is installed: the entry point and `python -m cbt` run the
  C program with the same arguments and exit status;
- a source build that cannot build the OTLP exporter or recording stops with
  the apt-get line, and CBT_PY_REQUIRE=OFF builds without them and says so
  (CMake's configure step alone, as pip's build runs it, with the development
  packages hidden from it);
- the repaired wheel (CBT_WHEEL, set by scripts/pytest.sh to the wheel it
  installed here) installed into a fresh venv where the development packages,
  the system copies of the bundled libraries and the CUDA toolkit are hidden
  (scripts/wheel_test.sh): the quick start, the `cbt` command, the bridge test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import cbt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def test_build_info_says_what_the_build_has():
    b = cbt.build_info()
    want = {"version": str, "cuda": bool, "cuda_version": str, "cuda_runtime": str,
            "cupti": bool, "cupti_loading": str, "nvtx": bool, "otlp_http": bool,
            "otlp_grpc": bool, "recording": bool, "limited_api": bool, "required": bool,
            "left_out": list, "cuda_loaded": dict}
    assert set(b) == set(want)
    for k, t in want.items():
        assert isinstance(b[k], t), (k, b[k])
    assert b["version"] == cbt.__version__
    # the build's facts agree with what the extension was compiled with
    assert b["cuda"] == bool(cbt._cbt.HAVE_CUDA)
    assert b["otlp_http"] == bool(cbt._cbt.HAVE_OTLP)
    assert b["recording"] == bool(cbt._cbt.HAVE_RECORDING)
    assert b["limited_api"] == cbt._cbt.__file__.endswith(".abi3.so") == bool(cbt._cbt.LIMITED_API)
    assert b["cuda_runtime"] == ("static" if b["cuda"] else "")
    assert b["cupti_loading"] == ("dlopen" if b["cupti"] else "")
    assert not b["otlp_grpc"] or b["otlp_http"]
    if b["required"]:
        assert b["otlp_http"] and b["recording"] and b["left_out"] == []
    for fam, path in b["cuda_loaded"].items():
        assert fam in ("libcuda", "libcudart", "libcupti") and os.path.isabs(path)


def test_extension_needs_no_cuda_library():
    if not shutil.which("readelf"):
        pytest.skip("no readelf (binutils) to read the extension's DT_NEEDED")
    for f in (cbt._cbt.__file__, os.path.join(os.path.dirname(cbt.__file__), "_bin", "cbt")):
        out = subprocess.run(["readelf", "-d", f], capture_output=True, text=True,
                             check=True).stdout
        needed = [ln.split("[")[1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln]
        cuda = [n for n in needed if n.startswith(("libcudart", "libcupti", "libcuda."))]
        assert cuda == [], f"{f} needs {cuda}: it would not import without CUDA"


def _run(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_cbt_command_is_installed():
    exe = os.path.join(BIN, "cbt")
    assert os.access(exe, os.X_OK), f"pip installed no cbt command in {BIN}"
    p = _run([exe, "version"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"cbt {cbt.__version__}"
    p = _run([exe, "--help"])
    assert p.returncode == 0 and "cbt replay FILE.lct" in p.stdout


def test_python_m_cbt_passes_argv_and_exit_status():
    prog = os.path.join(os.path.dirname(cbt.__file__), "_bin", "cbt")
    for args in (["version"], ["no-such-command"], ["replay", "/nonexistent/x.lct"],
                 ["demo", "--requests", "0"]):
        direct = _run([prog, *args])
        for argv in ([os.path.join(BIN, "cbt"), *args], [sys.executable, "-m", "cbt", *args]):
            p = _run(argv)
            assert (p.returncode, p.stdout, p.stderr) == (direct.returncode, direct.stdout,
                                                          direct.stderr), (argv, p, direct)
    assert _run([sys.executable, "-m", "cbt", "no-such-command"]).returncode == 2


def _configure(tmp, *defines, env_extra=None):
    """CMake's configure step as pip's build runs it (SKBUILD), with libcurl,
    protobuf-c, zlib and msgpack-c hidden: pkg-config sees no modules, find_*
    searches no system include or library folder."""
    env = dict(os.environ, PKG_CONFIG_LIBDIR=os.path.join(tmp, "no-pkgconfig"),
               PKG_CONFIG_PATH="")
    env.update(env_extra or {})
    cmd = ["cmake", "-S", ROOT, "-B", os.path.join(tmp, "b"), "-DSKBUILD=2",
           "-DCBT_WITH_CUDA=OFF", "-DCBT_BUILD_TESTS=OFF", "-DCBT_BUILD_BENCH=OFF",
           f"-DPython_EXECUTABLE={sys.executable}",
           "-DCMAKE_IGNORE_PATH=/usr/include;/usr/lib;/usr/lib/x86_64-linux-gnu;"
           "/lib/x86_64-linux-gnu;/usr/local/include;/usr/local/lib", *defines]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def test_source_build_without_dev_packages_fails_with_the_apt_line():
    if not shutil.which("cmake"):
        pytest.skip("no cmake")
    with tempfile.TemporaryDirectory() as tmp:
        p = _configure(tmp)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    line = next((ln.strip() for ln in out.splitlines() if "apt-get install" in ln), "")
    for pkg in ("libcurl4-openssl-dev", "libprotobuf-c-dev", "zlib1g-dev", "libmsgpack-dev"):
        assert pkg in line.split(), f"{pkg} not in {line!r}:\n{out}"
    assert "CBT_PY_REQUIRE=OFF" in out


def test_source_build_opt_out_builds_without_and_says_so():
    if not shutil.which("cmake"):
        pytest.skip("no cmake")
    with tempfile.TemporaryDirectory() as tmp:
        p = _configure(tmp, "-DCBT_PY_REQUIRE=OFF")
        out = p.stdout + p.stderr
        assert p.returncode == 0, out
        assert "built WITHOUT otlp, recording" in " ".join(out.split()), out
        assert "the CPU backend alone" in " ".join(out.split()), out  # no CUDA: said too
        ns: dict = {}
        with open(os.path.join(tmp, "b", "python", "_build_config.py")) as f:
            exec(f.read(), ns)
    assert ns["OTLP"] is False and ns["RECORDING"] is False and ns["CUDA"] is False
    assert ns["REQUIRED"] is False and ns["LEFT_OUT"] == ("otlp", "recording")


def test_repaired_wheel_installs_where_nothing_it_was_built_with_is():
    wheel = os.environ.get("CBT_WHEEL", "")
    if not wheel:
        pytest.skip("CBT_WHEEL is not set: scripts/pytest.sh sets it to the repaired wheel "
                    "(scripts/wheel.sh) it installs")
    env = dict(os.environ, CBT_PIP_PYTHON=sys.executable)
    p = subprocess.run([os.path.join(ROOT, "scripts", "wheel_test.sh"), wheel],
                       capture_output=True, text=True, timeout=600, env=env)
    print(p.stdout)
    print(p.stderr, file=sys.stderr)
    if p.returncode == 77:
        pytest.skip(next((ln[len("SKIP: "):] for ln in p.stdout.splitlines()
                          if ln.startswith("SKIP: ")), "scripts/wheel_test.sh: 77"))
    assert p.returncode == 0, p.stdout + p.stderr
