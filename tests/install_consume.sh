#!/usr/bin/env bash
# tests/install_consume.sh BUILD_DIR SOURCE_DIR — install cbt from BUILD_DIR
# into a fresh temporary prefix and build out-of-tree users against it, the
# ways docs/install.md tells users to (the sources are in tests/consume/):
#   install          cmake --install BUILD_DIR --prefix <tmp>; the files, the SONAME
#   cmake cbt::cbt   find_package(cbt CONFIG REQUIRED) + cbt::cbt: consumer.c, run
#   cmake cbt::cbt_static   the same with cbt::cbt_static: libcbt.a's exported
#                    link interface alone must be enough (the consumer's own
#                    CURL_LIBRARIES etc. must come out of find_package(cbt) unchanged)
#   cmake missing dependency   tests/consume/missing_dep/: with pkg-config finding
#                    neither libcurl nor libprotobuf-c, find_package(cbt) is not found
#                    softly (cbt_NOT_FOUND_MESSAGE names both); with REQUIRED it fails, saying so
#   pkg-config shared / static   tests/consume/Makefile: pkg-config --cflags --libs cbt,
#                    and --static with libcbt.a; run both
#   headers          each public header alone, as C11 and as C++, -Wall -Wextra -Werror
#   c++ all headers  cxx_all_headers.cpp (g++, -I<prefix>/include only), linked, run
#   nvcc kernel_span kernel_span.cu (CBT_KERNEL_SPAN_BEGIN/END) by nvcc, linked with
#                    libcbt.so; run only when it finds a CUDA device
# One line per step: "OK <step>: ...", "SKIP: <step>: <reason>" or "FAIL <step>: ..."
# followed by the end of that step's log. Exit 0 when no step failed.
# Environment: CC, CXX (default cc, c++), CBT_NVCC (the nvcc to use, "" or unset: nvcc on
# PATH, else /usr/local/cuda/bin/nvcc; a path that is not executable: no nvcc), CBT_CUDA_ARCH (the build's
# CMAKE_CUDA_ARCHITECTURES; default 90), CBT_CONSUME_KEEP=1 (keep the temp dir).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
    exit 2
fi
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
CONSUME=$SRC/tests/consume
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cbt-install-consume.XXXXXX")
if [ "${CBT_CONSUME_KEEP:-0}" = 1 ]; then
    trap 'echo "kept: $TMP"' EXIT
else
    trap 'rm -rf "$TMP"' EXIT
fi
PREFIX=$TMP/prefix
export BUILD SRC CONSUME TMP PREFIX
export CC=${CC:-cc} CXX=${CXX:-c++}
# nothing from the caller's environment may point pkg-config or CMake elsewhere
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR cbt_DIR CMAKE_PREFIX_PATH || true

FAILS=0
T0=$SECONDS

# step NAME FUNCTION: run FUNCTION in a shell of its own (so `set -e` holds
# inside it), its output to a log; exit 77 means skipped, the reason being
# its last line.
step() {
    local name=$1 fn=$2 log rc=0 t=$SECONDS
    log=$TMP/log.$fn
    bash -euo pipefail -c "$fn" >"$log" 2>&1 || rc=$?
    local last
    last=$(tail -n 1 "$log" 2>/dev/null || true)
    if [ $rc -eq 0 ]; then
        echo "OK $name: ${last:-done} ($((SECONDS - t)) s)"
    elif [ $rc -eq 77 ]; then
        echo "SKIP: $name: ${last:-skipped}"
    else
        echo "FAIL $name: exit $rc; the end of its log:"
        tail -n 40 "$log" | sed 's/^/    /'
        FAILS=$((FAILS + 1))
    fi
}

# ---- install ---------------------------------------------------------------------
do_install() {
    cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.out"
    local pc
    pc=$(find "$PREFIX" -path '*/pkgconfig/cbt.pc' -print -quit)
    [ -n "$pc" ] || { echo "no cbt.pc installed"; exit 1; }
    local libdir
    libdir=$(dirname "$(dirname "$pc")")
    echo "$libdir" >"$TMP/libdir"
    local abi
    abi=$(sed -n 's/^#define CBT_ABI_VERSION \([0-9][0-9]*\).*/\1/p' "$PREFIX/include/cbt/build_config.h")
    [ -n "$abi" ] || { echo "no CBT_ABI_VERSION in the installed cbt/build_config.h"; exit 1; }
    echo "$abi" >"$TMP/abi"
    for f in include/cbt.h include/cbt/build_config.h bin/cbt; do
        [ -e "$PREFIX/$f" ] || { echo "not installed: $f"; exit 1; }
    done
    for f in libcbt.so "libcbt.so.$abi" libcbt.a libcbt_kernels.so "libcbt_kernels.so.$abi" \
             libcbt_kernels.a cmake/cbt/cbtConfig.cmake cmake/cbt/cbtConfigVersion.cmake \
             cmake/cbt/cbtTargets.cmake; do
        [ -e "$libdir/$f" ] || { echo "not installed: $libdir/$f"; exit 1; }
    done
    local soname
    soname=$(readelf -d "$libdir/libcbt.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [ "$soname" = "libcbt.so.$abi" ] || { echo "SONAME is '$soname', not libcbt.so.$abi"; exit 1; }
    # no header may name one that is not installed (host/internal/ never is)
    if grep -rhoE '#include "[^"]+"' "$PREFIX/include" | sed 's/#include "\(.*\)"/\1/' | sort -u |
        while read -r h; do [ -e "$PREFIX/include/$h" ] || echo "$h"; done | grep .; then
        echo "installed headers include the headers above, which are not installed"
        exit 1
    fi
    echo "$(find "$PREFIX" -type f | wc -l) files under the prefix, SONAME $soname"
}
export -f do_install

# ---- what the installed cbt says it was built with, as cbt.pc has it ------------------
pc_env() {
    export PKG_CONFIG_PATH
    PKG_CONFIG_PATH="$(cat "$TMP/libdir")/pkgconfig"
}
export -f pc_env

# ---- CMake: find_package(cbt CONFIG REQUIRED) -------------------------------------------
do_cmake_configure() {
    pc_env
    local expect="" v
    for part in cuda otlp nvtx cupti; do
        v=$(pkg-config --variable="cbt_with_$part" cbt)
        expect="$expect${expect:+;}$part=$v"
    done
    cmake -S "$CONSUME" -B "$TMP/cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_COMPILER="$CC" -DCMAKE_PREFIX_PATH="$PREFIX" \
        -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
        -DCBT_EXPECT_WITH="$expect" -DCBT_EXPECT_PREFIX="$PREFIX" >"$TMP/cmake.configure.out"
    cat "$TMP/cmake.configure.out"
    cmake --build "$TMP/cmake" -j2
    echo "configured and built ($expect)"
}
export -f do_cmake_configure

# ---- CMake: find_package(cbt) where libcurl and libprotobuf-c cannot be found --------------
do_cmake_missing_dep() {
    pc_env
    [ "$(pkg-config --variable=cbt_with_otlp cbt)" = ON ] ||
        { echo "this cbt was built without OTLP: it links against no libcurl or libprotobuf-c"; exit 77; }
    mkdir -p "$TMP/no-pc"
    local args=(-DCMAKE_C_COMPILER="$CC" -DCMAKE_PREFIX_PATH="$PREFIX"
                -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
    PKG_CONFIG_LIBDIR="$TMP/no-pc" PKG_CONFIG_PATH="" \
        cmake -S "$CONSUME/missing_dep" -B "$TMP/missing_dep" -DCBT_REQUIRED=OFF "${args[@]}"
    local rc=0
    PKG_CONFIG_LIBDIR="$TMP/no-pc" PKG_CONFIG_PATH="" \
        cmake -S "$CONSUME/missing_dep" -B "$TMP/missing_dep_req" -DCBT_REQUIRED=ON "${args[@]}" \
        >"$TMP/missing_dep_req.out" 2>&1 || rc=$?
    cat "$TMP/missing_dep_req.out"
    [ $rc -ne 0 ] || { echo "find_package(cbt REQUIRED) did not fail without libcurl and libprotobuf-c"; exit 1; }
    grep -q "pkg-config module libcurl" "$TMP/missing_dep_req.out" ||
        { echo "find_package(cbt REQUIRED) failed without naming libcurl"; exit 1; }
    echo "not found softly without them; REQUIRED fails naming libcurl and libprotobuf-c"
}
export -f do_cmake_missing_dep

# check_needed BINARY yes|no: whether the binary itself needs libcbt.so.<ABI>
check_needed() {
    local bin=$1 want=$2 abi
    abi=$(cat "$TMP/abi")
    if readelf -d "$bin" | grep -q "(NEEDED).*\[libcbt\.so\.$abi\]"; then
        [ "$want" = yes ] || { echo "$bin needs libcbt.so.$abi: libcbt.a was not linked"; exit 1; }
    else
        [ "$want" = no ] || { echo "$bin does not need libcbt.so.$abi"; exit 1; }
    fi
}
export -f check_needed

do_cmake_shared() {
    [ -x "$TMP/cmake/consumer_shared" ] || { echo "consumer_shared was not built"; exit 1; }
    check_needed "$TMP/cmake/consumer_shared" yes
    "$TMP/cmake/consumer_shared"
}
export -f do_cmake_shared

do_cmake_static() {
    [ -x "$TMP/cmake/consumer_static" ] || { echo "consumer_static was not built"; exit 1; }
    check_needed "$TMP/cmake/consumer_static" no
    "$TMP/cmake/consumer_static"
}
export -f do_cmake_static

# ---- pkg-config + a Makefile ---------------------------------------------------------
do_pc_shared() {
    pc_env
    local p
    p=$(pkg-config --variable=prefix cbt)
    [ "$p" = "$PREFIX" ] || { echo "cbt.pc's prefix is '$p', not the one installed into ($PREFIX)"; exit 1; }
    echo "pkg-config --cflags --libs cbt: $(pkg-config --cflags --libs cbt)"
    make -f "$CONSUME/Makefile" O="$TMP" CC="$CC" shared
    check_needed "$TMP/consumer_pc_shared" yes
    "$TMP/consumer_pc_shared"
}
export -f do_pc_shared

do_pc_static() {
    pc_env
    echo "pkg-config --static --cflags --libs cbt: $(pkg-config --static --cflags --libs cbt)"
    make -f "$CONSUME/Makefile" O="$TMP" CC="$CC" static
    check_needed "$TMP/consumer_pc_static" no
    "$TMP/consumer_pc_static"
}
export -f do_pc_static

# ---- headers: each alone, in C and C++ ------------------------------------------------
do_headers() {
    local n=0 h
    for h in cbt.h $(cd "$PREFIX/include" && ls cbt/*.h); do
        printf '#include "%s"\nint cbt_header_check_(void);\n' "$h" >"$TMP/one.c"
        "$CC" -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$PREFIX/include" "$TMP/one.c" ||
            { echo "$h does not compile alone as C11"; exit 1; }
        cp "$TMP/one.c" "$TMP/one.cpp"
        "$CXX" -Wall -Wextra -Werror -fsyntax-only -I"$PREFIX/include" "$TMP/one.cpp" ||
            { echo "$h does not compile alone as C++"; exit 1; }
        n=$((n + 1))
    done
    echo "$n headers compile alone as C11 and as C++"
}
export -f do_headers

do_cxx() {
    local h missing=""
    for h in $(cd "$PREFIX/include" && ls cbt/*.h); do
        grep -q "^#include \"$h\"" "$CONSUME/cxx_all_headers.cpp" || missing="$missing $h"
    done
    [ -z "$missing" ] || { echo "tests/consume/cxx_all_headers.cpp does not include:$missing"; exit 1; }
    local libdir
    libdir=$(cat "$TMP/libdir")
    "$CXX" -Wall -Wextra -Werror -I"$PREFIX/include" -o "$TMP/cxx_all_headers" \
        "$CONSUME/cxx_all_headers.cpp" -L"$libdir" -Wl,-rpath,"$libdir" -lcbt
    "$TMP/cxx_all_headers"
}
export -f do_cxx

# ---- nvcc: a user's instrumented kernel --------------------------------------------------
find_nvcc() {
    if [ -n "${CBT_NVCC:-}" ]; then
        if [ -x "$CBT_NVCC" ]; then echo "$CBT_NVCC"; fi
    elif command -v nvcc >/dev/null 2>&1; then
        command -v nvcc
    elif [ -x /usr/local/cuda/bin/nvcc ]; then
        echo /usr/local/cuda/bin/nvcc
    fi
}
export -f find_nvcc

do_nvcc() {
    local nvcc
    nvcc=$(find_nvcc)
    if [ -z "$nvcc" ]; then
        if [ -n "${CBT_NVCC:-}" ]; then
            echo "nvcc not found (CBT_NVCC=$CBT_NVCC is not executable)"
        else
            echo "nvcc not found (not on PATH, not /usr/local/cuda/bin/nvcc)"
        fi
        exit 77
    fi
    # the first of the build's architectures ("90", "90-real", "90;80" -> sm_90)
    local arch=${CBT_CUDA_ARCH:-90}
    arch=${arch%%;*}
    arch=${arch%%-*}
    case $arch in '' | *[!0-9]*) arch=90 ;; esac
    local libdir
    libdir=$(cat "$TMP/libdir")
    echo "$nvcc -arch=sm_$arch -cudart shared -I$PREFIX/include ... -lcbt"
    # -cudart shared: the one CUDA runtime libcbt.so itself is linked with
    "$nvcc" -arch="sm_$arch" -cudart shared --Werror all-warnings \
        -Xcompiler=-Wall,-Wextra,-Werror -I"$PREFIX/include" \
        -o "$TMP/kernel_span" "$CONSUME/kernel_span.cu" \
        -L"$libdir" -Xlinker -rpath -Xlinker "$libdir" -lcbt
    check_needed "$TMP/kernel_span" yes
    local rc=0
    "$TMP/kernel_span" || rc=$?
    # 77: built, but no device (or a CPU-only cbt): its last line says which
    exit $rc
}
export -f do_nvcc

step install do_install
if [ -s "$TMP/libdir" ]; then
    step "cmake find_package (configure, build)" do_cmake_configure
    step "cmake cbt::cbt (libcbt.so)" do_cmake_shared
    step "cmake cbt::cbt_static (libcbt.a)" do_cmake_static
    step "cmake missing dependency (soft)" do_cmake_missing_dep
    step "pkg-config cbt (libcbt.so)" do_pc_shared
    step "pkg-config --static cbt (libcbt.a)" do_pc_static
    step "headers alone (C11, C++)" do_headers
    step "c++ all headers (-Wall -Wextra -Werror)" do_cxx
    step "nvcc kernel_span.cu" do_nvcc
fi
if [ "$FAILS" -ne 0 ]; then
    echo "install_consume: $FAILS step(s) failed ($((SECONDS - T0)) s)"
    exit 1
fi
echo "install_consume: all steps passed or skipped ($((SECONDS - T0)) s)"
