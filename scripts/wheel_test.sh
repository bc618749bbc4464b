#!/usr/bin/env bash
# scripts/wheel_test.sh — the repaired wheel (scripts/wheel.sh) on a machine that
# has none of what it was built with: tests/python/test_wheel.py runs it.
#
#   scripts/wheel_test.sh WHEEL
#
# Outside: a fresh venv (python3 -m venv --without-pip) into which the pip of
# the running venv installs WHEEL and the test pins (CBT_TEST_PINS: pytest,
# msgspec, opentelemetry-*; from a local wheelhouse, build/wheelhouse, filled
# once by `pip download`), and LMCache's cached files for the bridge test
# (tests/lmcache/setup_env.sh, a no-op once made).
#
# Inside `unshare -rm` (a private mount namespace; -r maps this user to root
# in it, so it needs no privilege where user namespaces are allowed):
#   - /usr/include is an empty tmpfs: no development headers;
#   - /dev/null is bind-mounted over every system copy of a library the wheel
#     bundles (as named in its cbt.libs/) and of libcurl.so.4,
#     libprotobuf-c.so.1, libmsgpackc.so.2 and all they load but glibc, so
#     only bundled copies can load (the interpreter's own libraries, such as
#     the libffi of its _ctypes, stay: the test names them);
#   - the CUDA toolkit (/usr/local/cuda*, and every libcudart/libcupti the
#     ld.so cache names) is hidden the same way: the wheel must import
#     without CUDA (the driver, libcuda.so.1, is left: it is not the toolkit);
#   - LD_LIBRARY_PATH is empty;
# and there it runs, from an empty folder:
#   1. the quick start of docs/python.md (its first ```python block), whose
#      last line must print 2; cbt.build_info(); the extension's mappings
#      must be the bundled copies;
#   2. `cbt --help`, `cbt version`, `cbt demo` (recording with --trace-level
#      gpu) and `cbt replay` of that recording, through the installed `cbt`
#      command; an unknown command's exit status (2) through `cbt` and
#      `python -m cbt` alike;
#   3. tests/python/test_lmcache_bridge.py under pytest.
#
# Exit: 0 when all pass; 1 naming what failed; 77 with "SKIP: <reason>" when
# unshare (or a mount inside it) is not permitted here, or python3 has no venv.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 WHEEL" >&2; exit 2; }
wheel="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
[ -f "$wheel" ] || { echo "cbt wheel test: no wheel $1" >&2; exit 2; }
py="${CBT_PYTHON3:-python3}"
pip_py="${CBT_PIP_PYTHON:-$(command -v python3)}" # a python whose pip installs into the fresh venv
pins="${CBT_TEST_PINS:-pytest==9.2.0 msgspec==0.23.0 opentelemetry-api==1.40.0 opentelemetry-sdk==1.40.0}"
house="${CBT_WHEELHOUSE:-$root/build/wheelhouse}"
lmenv="${CBT_LMCACHE_ENV:-$root/build/lmcache-env}"

skip() { echo "SKIP: $*"; exit 77; }
die() { echo "cbt wheel test: FAILED: $*" >&2; exit 1; }

command -v unshare >/dev/null 2>&1 || skip "wheel test: no unshare command (util-linux)"
why="$(unshare -rm sh -c 'mount -t tmpfs tmpfs /mnt 2>&1 && mount --bind /dev/null /etc/hostname 2>&1' 2>&1)" ||
  skip "wheel test: unshare -rm with mounts is not permitted here (${why:-unshare failed}): the isolated install is not checked"
"$py" -c 'import venv' >/dev/null 2>&1 || skip "wheel test: '$py -m venv' is not available"

# the pins this test needs: pytest, msgspec, opentelemetry-* (not the build tools)
want=""
for p in $pins; do
  case "$p" in pytest==*|msgspec==*|opentelemetry-*==*) want="$want $p" ;; esac
done
mkdir -p "$house"
if ! grep -qxF "$want" "$house/.cbt-pins" 2>/dev/null; then
  # shellcheck disable=SC2086
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$pip_py" -m pip download -q --timeout 15 --retries 1 \
    -d "$house" $want || die "pip download $want into $house"
  printf '%s\n' "$want" >"$house/.cbt-pins"
fi
if [ -x "$root/tests/lmcache/setup_env.sh" ]; then
  "$root/tests/lmcache/setup_env.sh" "$lmenv" >/dev/null # the bridge test's cache (77: it skips)
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/cbt-wheeltest.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$py" -m venv --without-pip "$work/venv" || die "$py -m venv --without-pip $work/venv"
# shellcheck disable=SC2086
PIP_DISABLE_PIP_VERSION_CHECK=1 "$pip_py" -m pip --python "$work/venv/bin/python" install -q \
  --no-index --find-links "$house" "$wheel" $want || die "pip install $(basename "$wheel") into a fresh venv"

# what to hide: the system copies of each bundled library (cbt.libs/libfoo-1a2b3c4d.so.1.2
# is a copy of libfoo.so.1.2), the CUDA toolkit's libraries, the toolkit itself
"$work/venv/bin/python" - "$work/venv" >"$work/hide" <<'EOF' || die "listing what to hide"
import glob, os, re, subprocess, sys
venv = sys.argv[1]
libs = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "cbt.libs", "*"))
names = {re.sub(r"-[0-9a-f]{8}(?=[.])", "", os.path.basename(p)) for p in libs}
dirs = ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib",
        "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"]
try:
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
except OSError:
    cache = ""
dirs += sorted({os.path.dirname(m) for m in re.findall(r"=> (\S+)", cache)})
hide = set()
# and, whatever the wheel holds, the libraries cbt links and all they pull in
# (ldd), but glibc's own: what a machine without the development packages and
# their runtime packages lacks
glibc = re.compile(r"^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|ld-linux[-\w]*)\.so")
for root in ("libcurl.so.4", "libprotobuf-c.so.1", "libmsgpackc.so.2"):
    m = re.search(r"\s" + re.escape(root) + r" \(.*\) => (\S+)", cache)
    if not m:
        continue
    hide.add(os.path.realpath(m.group(1)))
    try:
        out = subprocess.run(["ldd", m.group(1)], capture_output=True, text=True).stdout
    except OSError:
        break
    for name, path in re.findall(r"^\s*(\S+) => (/\S+)", out, re.M):
        if not glibc.match(name):
            hide.add(os.path.realpath(path))
for d in dirs:
    for n in names:
        p = os.path.join(d, n)
        if os.path.isfile(p):
            hide.add(os.path.realpath(p))
    for p in glob.glob(os.path.join(d, "libcudart.so*")) + glob.glob(os.path.join(d, "libcupti.so*")):
        if os.path.isfile(p):
            hide.add(os.path.realpath(p))
# ... but not what the interpreter itself loads (its lib-dynload modules: _ctypes
# needs libffi, _ssl libssl): the machine the wheel is for has its Python's own
# libraries; the extension loads its bundled copies (checked inside, by the maps)
import sysconfig
keep = set()
objs = [os.path.realpath(sys.executable)] + glob.glob(os.path.join(sysconfig.get_config_var("DESTSHARED") or "", "*.so"))
for o in objs:
    try:
        out = subprocess.run(["ldd", o], capture_output=True, text=True).stdout
    except OSError:
        break
    keep |= {os.path.realpath(m) for m in re.findall(r"=> (/\S+)", out)}
print("\n".join(sorted(hide - keep)))
for k in sorted(hide & keep):
    print(f"cbt wheel test: left visible (the interpreter's own): {k}", file=sys.stderr)
EOF
# the quick start: the first ```python block after "## API" in docs/python.md
awk '/^## API/{a=1} a&&/^```python/{b=1;next} b&&/^```/{exit} b' "$root/docs/python.md" >"$work/quickstart.py"
[ -s "$work/quickstart.py" ] || die "no quick start (a \`\`\`python block after ## API) in docs/python.md"

cat >"$work/inside.sh" <<'EOF'
set -uo pipefail
work="$1" root="$2"
fail() { echo "cbt wheel test: FAILED: $*" >&2; exit 1; }
n=0 # the files first: some lie in the folders hidden next
while IFS= read -r f; do
  [ -n "$f" ] || continue
  mount --bind /dev/null "$f" || fail "bind /dev/null over $f"
  n=$((n + 1))
done <"$work/hide"
mount -t tmpfs tmpfs /usr/include || fail "tmpfs over /usr/include"
for d in /usr/local/cuda*; do
  [ -d "$d" ] && ! [ -L "$d" ] && { mount -t tmpfs tmpfs "$d" || fail "tmpfs over $d"; }
done
export LD_LIBRARY_PATH= PATH="$work/venv/bin:/usr/bin:/bin"
unset CUDA_HOME CUDA_PATH CBT_CUPTI_LIBRARY
echo "cbt wheel test: hidden: /usr/include, /usr/local/cuda*, $n system libraries (the bundled ones' and CUDA's)"
[ -e /usr/include/stdio.h ] && fail "/usr/include is still there"
mkdir "$work/run" && cd "$work/run" || exit 1
py="$work/venv/bin/python"

# 1. the quick start, build_info, and where the extension's libraries came from
out="$("$py" "$work/quickstart.py" 2>&1)" || fail "the quick start of docs/python.md: $out"
[ "$(tail -n1 <<<"$out")" = 2 ] || fail "the quick start printed '$out', not 2 spans"
echo "cbt wheel test: OK quick start (docs/python.md): $(tail -n1 <<<"$out") spans"
"$py" - <<'PY' || fail "build_info / bundled libraries"
import cbt
b = cbt.build_info()
print("cbt wheel test: build_info:", {k: v for k, v in b.items()})
assert b["otlp_http"] and b["recording"], "the wheel lacks OTLP or recording"
assert not b["left_out"] and b["required"], "an opt-out build was shipped"
if b["cuda"]:
    assert b["cuda_runtime"] == "static", b["cuda_runtime"]
    assert b["cupti_loading"] == "dlopen", b["cupti_loading"]
assert "libcudart" not in b["cuda_loaded"] and "libcupti" not in b["cuda_loaded"], b["cuda_loaded"]
maps = open("/proc/self/maps").read()
for lib in ("libcurl", "libprotobuf-c", "libmsgpackc"):
    paths = {l.split()[-1] for l in maps.splitlines() if "/" + lib in l}
    assert paths and all("/cbt.libs/" in p for p in paths), f"{lib} mapped from {paths}"
print("cbt wheel test: OK import: libcurl, protobuf-c, msgpack-c mapped from cbt.libs/ only")
PY

# 2. the installed command
command -v cbt >/dev/null || fail "no cbt command on PATH after pip install"
cbt --help >help.txt 2>&1 || fail "cbt --help exited $?: $(head -3 help.txt)"
grep -q "cbt replay FILE.lct" help.txt || fail "cbt --help: $(head -3 help.txt)"
cbt version >ver.txt 2>&1 || fail "cbt version: $(cat ver.txt)"
cbt demo --requests 8 --cpu --trees 0 --slowest 0 --output t.json --spans s.jsonl \
  --trace-level gpu --trace-output rec.lct >demo.txt 2>&1 || fail "cbt demo exited $?: $(tail -5 demo.txt)"
[ -s s.jsonl ] && [ -s t.json ] && [ -s rec.lct ] || fail "cbt demo wrote no spans, trace or recording"
cbt replay rec.lct --spans r.jsonl >replay.txt 2>&1 || fail "cbt replay exited $?: $(tail -5 replay.txt)"
[ "$(wc -l <r.jsonl)" -eq "$(wc -l <s.jsonl)" ] ||
  fail "cbt replay gave $(wc -l <r.jsonl) spans, the demo $(wc -l <s.jsonl)"
cbt no-such-command >/dev/null 2>&1; a=$?
"$py" -m cbt no-such-command >/dev/null 2>&1; b=$?
"$work/venv/lib/"python3*/site-packages/cbt/_bin/cbt no-such-command >/dev/null 2>&1; c=$?
[ "$a" = 2 ] && [ "$b" = 2 ] && [ "$c" = 2 ] || fail "exit status of an unknown command: cbt $a, python -m cbt $b, the program $c (want 2)"
echo "cbt wheel test: OK cbt --help, version ($(head -1 ver.txt)), demo ($(wc -l <s.jsonl) spans), replay ($(wc -l <r.jsonl)), exit status 2 through cbt and python -m cbt"

# 3. the bridge test
"$py" -m pytest -q -p no:cacheprovider "$root/tests/python/test_lmcache_bridge.py" >bridge.txt 2>&1 ||
  { tail -30 bridge.txt >&2; fail "tests/python/test_lmcache_bridge.py"; }
echo "cbt wheel test: OK tests/python/test_lmcache_bridge.py: $(grep -E '[0-9]+ passed' bridge.txt | tail -1)"
grep "^SKIP:" bridge.txt || true
EOF
unshare -rm bash "$work/inside.sh" "$work" "$root"
