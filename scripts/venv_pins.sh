# scripts/venv_pins.sh — sourced by scripts/pydeps.sh, scripts/pytest.sh and
# scripts/wheel.sh: the one way this repository makes a Python venv and puts
# pinned PyPI packages in it.
#
#   cbt_venv_pins VENV MARKER LABEL PIN...
#
# Makes VENV with ${CBT_PYTHON3:-python3} -m venv when it has no bin/python
# (a venv that fails to make is removed), then pip-installs the PINs unless
# MARKER holds their line already (one line per pin set; a set installed is
# appended, so two callers' sets share a venv). pip gets a short timeout and
# one retry, so no network fails in seconds. Takes no lock: callers that may
# run together serialise themselves (flock). Messages go to stderr, begun
# with LABEL.
#
# Returns 0 when the pins are in VENV; 3 when python3 or its venv module is
# missing (Debian: python3-venv); 2 when PyPI (or the configured index)
# cannot be reached; 1 when pip failed with the index reachable.
cbt_venv_pins() {
  local venv="$1" marker="$2" label="$3"
  shift 3
  local want="$*" py="${CBT_PYTHON3:-python3}" fresh=0
  if [ -x "$venv/bin/python" ] && grep -qxF "$want" "$marker" 2>/dev/null; then
    return 0
  fi
  if ! [ -x "$venv/bin/python" ]; then
    if ! command -v "$py" >/dev/null 2>&1; then
      echo "$label: $py is not installed (Debian: apt-get install -y python3 python3-venv)" >&2
      return 3
    fi
    # Debian's python3 has the venv module but not ensurepip without
    # python3-venv, and `python3 -m venv` then fails: check both
    if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
      echo "$label: '$py -m venv' is not available (Debian: apt-get install -y python3-venv)" >&2
      return 3
    fi
    echo "$label: creating the Python venv $venv" >&2
    if ! "$py" -m venv "$venv"; then
      rm -rf "$venv"
      echo "$label: '$py -m venv $venv' failed" >&2
      return 1
    fi
    fresh=1
  fi
  echo "$label: installing $want into $venv" >&2
  if ! PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install -q \
        --timeout 15 --retries 1 "$@"; then
    # a reachable index that fails is a failure; an unreachable one is not
    local probe="${TMPDIR:-/tmp}/cbt-pyprobe-$$" reached=1
    "$venv/bin/python" -m pip download -q --no-deps --timeout 10 --retries 0 -d "$probe" \
      pip >/dev/null 2>&1 || reached=0
    rm -rf "$probe"
    [ "$fresh" = 1 ] && rm -rf "$venv" # no half-made venv left behind
    if [ "$reached" = 0 ]; then
      echo "$label: PyPI (or the configured index) cannot be reached" >&2
      return 2
    fi
    echo "$label: pip could not install $want" >&2
    return 1
  fi
  printf '%s\n' "$want" >>"$marker"
  return 0
}
