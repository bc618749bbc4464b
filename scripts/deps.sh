#!/usr/bin/env bash
# scripts/deps.sh — make sure what cbt builds with is present.
#
#   scripts/deps.sh [lib] [test] [fuzz]    (no word: test, which is all three)
#
#   lib    the library and the cbt command (make demo, make bench): a C
#          compiler, make, cmake, pkg-config, protoc-c, and the pkg-config
#          modules libprotobuf-c, libcurl, zlib, and msgpack-c (msgpack.h,
#          libmsgpackc: the LMCT trace-file codec); softly libnghttp2-dev
#          (bench_load --protocol grpc's loopback collector; without it that
#          mode alone says SKIP)
#   test   lib + cmocka + python3 with venv/ensurepip + the openssl command
#          + Chromium (the HTML report opened headless: tests/report_browser.py)
#          + fuzz (make test)
#   fuzz   clang that links -fsanitize=fuzzer,address,undefined (make fuzz)
#
# Each need is checked by what the build itself uses (a command on PATH, a
# pkg-config module, a compile-and-link probe), not by dpkg, so tools that
# came some other way count. Each unmet need maps to a Debian package:
#   as root     apt-get update once (before the package names are worked out:
#               apt-cache knows nothing on a fresh image until then), installs
#               only those packages, checks again and installs in a second
#               pass what that check newly names (libFuzzer's package once
#               the installed clang tells its version)
#   otherwise   prints the one apt-get line needed and exits 1
#
#   CBT_NO_DEPS=1        skip this script entirely (you provide everything)
#   CBT_DEPS_DRY_RUN=1   print what is missing and what would be installed, exit 0
#   CC, CLANG            the compilers probed (default cc, clang), as cmake
#                        and scripts/fuzz.sh use them
#
# CUDA is not a Debian package here: nvcc is looked for at
# /usr/local/cuda/bin/nvcc and the build goes without it when absent.
set -euo pipefail

if [ -n "${CBT_NO_DEPS:-}" ] && [ "${CBT_NO_DEPS}" != 0 ]; then
  echo "cbt: CBT_NO_DEPS=${CBT_NO_DEPS}: not checking or installing dependencies (scripts/deps.sh skipped)"
  exit 0
fi

want_lib=0 want_test=0 want_fuzz=0
[ $# -eq 0 ] && set -- test
for a in "$@"; do
  case "${a#--}" in
    lib) want_lib=1 ;;
    fuzz) want_fuzz=1 ;;
    test|all) want_lib=1 want_test=1 want_fuzz=1 ;;
    *) echo "usage: scripts/deps.sh [lib] [test] [fuzz]" >&2; exit 2 ;;
  esac
done

CC_PROBE="${CC:-cc}"
CC_FUZZ="${CLANG:-clang}"
work="$(mktemp -d "${TMPDIR:-/tmp}/cbt-deps.XXXXXX")"
trap 'rm -rf "$work"' EXIT

dry=0
if [ -n "${CBT_DEPS_DRY_RUN:-}" ] && [ "${CBT_DEPS_DRY_RUN}" != 0 ]; then dry=1; fi

have() { command -v "$1" >/dev/null 2>&1; }
# a browser for the HTML report's test, found as tests/headless.py finds it
# ($CBT_CHROMIUM, when set, is the only one it uses: nothing is installed for it)
have_chromium() {
  if [ -n "${CBT_CHROMIUM+x}" ]; then
    return 0
  fi
  have chromium || have chromium-browser || have google-chrome || have google-chrome-stable
}
list() { local out="" x; for x in "$@"; do out="${out:+$out, }$x"; done; printf '%s' "$out"; }

# probe_c "<includes>" [link flags...]: does $CC_PROBE compile and link a
# program with these headers and libraries?
probe_c() {
  local inc="$1"; shift
  have "$CC_PROBE" || return 1
  { printf '%b\n' "$inc"; printf 'int main(void) { return 0; }\n'; } >"$work/p.c"
  "$CC_PROBE" "$work/p.c" -o "$work/p" "$@" >/dev/null 2>&1
}

# a pkg-config module the build finds with pkg_check_modules; without
# pkg-config (itself a need), its header and library stand in for it
pc_module() { # module "<includes>" link-flag
  if have pkg-config; then
    pkg-config --exists "$1"
  else
    probe_c "$2" "$3"
  fi
}

# clang with libFuzzer and the sanitizer runtimes, as scripts/fuzz.sh builds
fuzz_links() {
  have "$CC_FUZZ" || return 1
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    >"$work/fz.c"
  "$CC_FUZZ" -fsanitize=fuzzer,address,undefined "$work/fz.c" -o "$work/fz" >/dev/null 2>&1
}

# The Debian package that has libclang_rt.fuzzer for the clang in use (or the
# one `clang` would bring): libclang-rt-N-dev (Debian 12), libclang-common-N-dev
# (Debian 11 and before). Empty when it cannot be told.
clang_major() {
  local v=""
  if have "$CC_FUZZ"; then
    v="$("$CC_FUZZ" --version 2>/dev/null | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -n1)"
  fi
  if [ -z "$v" ]; then
    case "$(basename "$CC_FUZZ")" in
      clang-[0-9]*) v="${CC_FUZZ##*clang-}" ;;
      *) have apt-cache && v="$(apt-cache depends clang 2>/dev/null | sed -n 's/^ *Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -n1)" ;;
    esac
  fi
  printf '%s' "$v"
}
fuzzer_pkg() {
  local n; n="$(clang_major)"
  [ -n "$n" ] || return 0
  if ! have apt-cache; then
    printf 'libclang-rt-%s-dev' "$n"; return 0
  fi
  local p
  for p in "libclang-rt-$n-dev" "libclang-common-$n-dev"; do
    if apt-cache show "$p" >/dev/null 2>&1; then
      printf '%s' "$p"; return 0
    fi
  done
}

# check: fills needs[] ("what (package)") and pkgs[] (unique packages);
# soft needs (python venv, fuzz) are only warned about if an install
# leaves them unmet: their steps then say they are skipped.
needs=() pkgs=() hard_unmet=0 notes=() hard_pkgs=()
need() { # what package [soft]
  needs+=("$1 ($2)")
  local p
  if [ "${3:-}" != soft ]; then
    hard_unmet=1
    for p in "${hard_pkgs[@]+"${hard_pkgs[@]}"}"; do [ "$p" = "$2" ] && break; done
    [ "${p:-}" = "$2" ] || hard_pkgs+=("$2")
  fi
  for p in "${pkgs[@]+"${pkgs[@]}"}"; do [ "$p" = "$2" ] && return 0; done
  pkgs+=("$2")
}
check() {
  needs=() pkgs=() hard_unmet=0 notes=() hard_pkgs=()
  if [ $want_lib = 1 ]; then
    if ! have "$CC_PROBE" || ! probe_c '#include <stdio.h>'; then
      need "C compiler $CC_PROBE" build-essential
    fi
    have make || need make build-essential
    have cmake || need cmake cmake
    have pkg-config || need pkg-config pkg-config
    have protoc-c || need protoc-c protobuf-c-compiler
    pc_module libprotobuf-c '#include <protobuf-c/protobuf-c.h>' -lprotobuf-c \
      || need "pkg-config libprotobuf-c" libprotobuf-c-dev
    pc_module libcurl '#include <curl/curl.h>' -lcurl || need "pkg-config libcurl" libcurl4-openssl-dev
    pc_module zlib '#include <zlib.h>' -lz || need "pkg-config zlib" zlib1g-dev
    # CMake finds msgpack-c by its header and library (CBT_WITH_MSGPACK)
    probe_c '#include <msgpack.h>' -lmsgpackc || need "msgpack.h + libmsgpackc" libmsgpack-dev
    # bench_load --protocol grpc's loopback h2c collector (bench/grpc_sink.c):
    # soft, the bench builds without it and that one mode says SKIP
    probe_c '#include <nghttp2/nghttp2.h>' -lnghttp2 \
      || need "nghttp2/nghttp2.h (bench_load --protocol grpc)" libnghttp2-dev soft
  fi
  if [ $want_test = 1 ]; then
    # CMake finds cmocka by its header and library (find_path/find_library)
    # (a pkg-config cmocka elsewhere counts when its flags make the probe pass)
    local cm='#include <stdarg.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <setjmp.h>\n#include <cmocka.h>'
    if ! probe_c "$cm" -lcmocka; then
      # shellcheck disable=SC2046
      if ! { have pkg-config && pkg-config --exists cmocka \
             && probe_c "$cm" $(pkg-config --cflags --libs cmocka); }; then
        need "cmocka.h + libcmocka" libcmocka-dev
      fi
    fi
    if ! have python3; then
      need python3 python3 soft
      need "python3 venv+ensurepip" python3-venv soft
    elif ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
      need "python3 venv+ensurepip" python3-venv soft
    fi
    # the OTLP/gRPC tests make their TLS certificates with it (tests/grpc_collector.py certs)
    have openssl || need "openssl (the command)" openssl soft
    # the HTML report opened in a headless browser (tests/report_browser.py);
    # soft: without it those tests say SKIP. Debian's package is ~120 MB to
    # fetch, ~410 MB installed without recommends
    if ! have_chromium; then
      need "chromium (the HTML report's headless browser test)" chromium soft
    fi
  fi
  if [ $want_fuzz = 1 ] && ! fuzz_links; then
    if ! have "$CC_FUZZ"; then
      case "$(basename "$CC_FUZZ")" in
        clang-[0-9]*) need "$CC_FUZZ" "$(basename "$CC_FUZZ")" soft ;;
        *) need "$CC_FUZZ" clang soft ;;
      esac
    fi
    local fp; fp="$(fuzzer_pkg)"
    if [ -n "$fp" ]; then
      need "libFuzzer for $CC_FUZZ" "$fp" soft
    else
      notes+=("cbt: cannot tell which Debian package has libFuzzer for $CC_FUZZ; the fuzz step will print SKIP:")
    fi
  fi
}

# Package names come from apt-cache (which clang `clang` is, whether
# libclang-rt-N-dev exists): on a fresh image its lists are empty until
# `apt-get update`, so as root the lists are updated first whenever anything
# is missing, and the needs are then checked again.
check
updated=0
if [ $dry = 0 ] && { [ ${#pkgs[@]} -ne 0 ] || [ ${#notes[@]} -ne 0 ]; } \
   && have apt-get && [ "$(id -u)" -eq 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  echo "cbt: missing: $(list "${needs[@]+"${needs[@]}"}" "${notes[@]+libFuzzer for $CC_FUZZ}"); updating the package lists first" >&2
  if apt-get update -qq; then
    updated=1
  else
    echo "cbt: apt-get update failed; going on with the package lists at hand" >&2
  fi
  check
fi
for n in "${notes[@]+"${notes[@]}"}"; do echo "$n" >&2; done
if [ ${#pkgs[@]} -eq 0 ]; then
  if [ $dry = 1 ]; then
    if [ ${#notes[@]} -eq 0 ]; then
      echo "cbt: nothing missing"
    else
      echo "cbt: nothing known to install; as root this would run apt-get update and look again"
    fi
  fi
  exit 0
fi

echo "cbt: missing: $(list "${needs[@]}")" >&2
if [ $dry = 1 ]; then
  echo "cbt: would run: apt-get update && apt-get install -y --no-install-recommends ${pkgs[*]}"
  echo "cbt: (then check again, and install what that names too: with fresh package lists it may name libFuzzer's package)"
  exit 0
fi
if ! have apt-get; then
  echo "cbt: no apt-get here: install the equivalents of these Debian packages: ${pkgs[*]}" >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "cbt: install them with (or set CBT_NO_DEPS=1 if you provide them yourself):" >&2
  echo "  sudo apt-get install -y ${pkgs[*]}" >&2
  exit 1
fi

# install_pkgs PKG...: one apt-get install, recommends left out (so a package
# wanted only as a Recommends, libclang-rt-14-dev of libclang-common-14-dev on
# Debian 12, is named itself: by fuzzer_pkg, or by the check after an install)
installed=()
install_pkgs() {
  echo "cbt: installing $*" >&2
  installed+=("$@")
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if [ $updated = 0 ]; then
  apt-get update -qq || echo "cbt: apt-get update failed; trying the install with the package lists at hand" >&2
fi
if ! install_pkgs "${pkgs[@]}"; then
  # One install of everything failed. A soft package this system's lists
  # lack (Ubuntu has no `chromium` deb, say) must not stop the rest: the
  # hard ones again, together, then each soft one alone, a failure of which
  # is only said (its tests report SKIP).
  echo "cbt: apt-get install ${pkgs[*]} failed; installing the needed ones alone" >&2
  if [ ${#hard_pkgs[@]} -gt 0 ] && ! install_pkgs "${hard_pkgs[@]}"; then
    echo "cbt: apt-get install ${hard_pkgs[*]} failed (see above)" >&2
    exit 1
  fi
  for p in "${pkgs[@]}"; do
    is_hard=0
    for q in "${hard_pkgs[@]+"${hard_pkgs[@]}"}"; do [ "$p" = "$q" ] && is_hard=1; done
    [ $is_hard = 1 ] && continue
    install_pkgs "$p" ||
      echo "cbt: could not install $p (optional): the steps that need it will say SKIP" >&2
  done
fi

# What the install did not bring is named by checking again. A package the
# check names only now (libFuzzer's, once the installed clang tells its
# version) is installed in a second pass; what is still missing after that (a
# compiler earlier on PATH than the Debian one, say) is named here rather
# than left to fail later.
hash -r
check
more=()
for p in "${pkgs[@]+"${pkgs[@]}"}"; do
  seen=0
  for q in "${installed[@]}"; do [ "$p" = "$q" ] && seen=1; done
  [ $seen = 1 ] || more+=("$p")
done
if [ ${#more[@]} -ne 0 ]; then
  if ! install_pkgs "${more[@]}"; then
    echo "cbt: apt-get install ${more[*]} failed (see above)" >&2
  fi
  hash -r
  check
fi
for n in "${notes[@]+"${notes[@]}"}"; do echo "$n" >&2; done
if [ ${#pkgs[@]} -ne 0 ]; then
  echo "cbt: still missing after the install: $(list "${needs[@]}")" >&2
  if [ $hard_unmet = 1 ]; then
    exit 1
  fi
  echo "cbt: going on without them: the steps that need them say they are skipped" >&2
fi
exit 0
