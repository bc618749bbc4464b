# cmake/python_package.cmake — what the Python package's build (scikit-build-core:
# `pip install .`, `make wheel`; pyproject.toml) adds to a plain cmake build.
# Included by the top-level CMakeLists.txt when SKBUILD is set, after the
# targets exist; the extension itself is python/CMakeLists.txt.
#
#   1. A source build that cannot build what the docs promise stops here,
#      naming the one apt-get line that fixes it: the OTLP exporter (libcurl,
#      protobuf-c and protoc-c, zlib) and trace recording (msgpack-c).
#      CBT_PY_REQUIRE=OFF (pip install . -C cmake.define.CBT_PY_REQUIRE=OFF, or
#      CBT_PY_REQUIRE=OFF in the environment: pyproject.toml) builds without
#      them and says so. CUDA stays optional: without nvcc the package is the
#      CPU backend alone, and the build says that too.
#   2. cbt/_build_config.py: what this build has, for cbt.build_info().
#   3. The `cbt` command (target cbt_cli) installed as cbt/_bin/cbt, which the
#      `cbt` entry point and `python -m cbt` run (python/cbt/_cli.py).
# pip shows these messages with -v, and always when the build fails.

set(CBT_PY_REQUIRE ON CACHE BOOL
    "The Python package's build stops when OTLP or trace recording cannot be built")

# ---- 1. what is missing, as Debian packages ---------------------------------------
set(_py_missing "")  # what, for the message
set(_py_pkgs "")     # Debian packages
set(_py_left_out "") # the parts a CBT_PY_REQUIRE=OFF build goes without
macro(_cbt_py_need what pkg)
  list(APPEND _py_missing "${what}")
  list(APPEND _py_pkgs "${pkg}")
endmacro()
if(NOT CBT_WITH_OTLP_ON)
  if(CBT_WITH_OTLP STREQUAL "OFF")
    list(APPEND _py_missing "OTLP (CBT_WITH_OTLP=OFF was asked for)")
  else()
    if(NOT PkgConfig_FOUND) # and libcurl, protobuf-c cannot be looked for without it
      _cbt_py_need("pkg-config" pkg-config)
      _cbt_py_need("libcurl (not looked for without pkg-config)" libcurl4-openssl-dev)
      _cbt_py_need("protobuf-c (not looked for without pkg-config)" libprotobuf-c-dev)
    else()
      if(NOT CURL_FOUND)
        _cbt_py_need("libcurl (pkg-config libcurl)" libcurl4-openssl-dev)
      endif()
      if(NOT PROTOBUFC_FOUND)
        _cbt_py_need("protobuf-c (pkg-config libprotobuf-c)" libprotobuf-c-dev)
      endif()
    endif()
    if(NOT PROTOC_C)
      _cbt_py_need("protoc-c" protobuf-c-compiler)
    endif()
    if(NOT ZLIB_FOUND)
      _cbt_py_need("zlib" zlib1g-dev)
    endif()
  endif()
  list(APPEND _py_left_out "otlp")
endif()
if(NOT CBT_WITH_MSGPACK_ON)
  if(CBT_WITH_MSGPACK STREQUAL "OFF")
    list(APPEND _py_missing "msgpack-c (CBT_WITH_MSGPACK=OFF was asked for)")
  else()
    _cbt_py_need("msgpack-c (msgpack.h, libmsgpackc)" libmsgpack-dev)
  endif()
  list(APPEND _py_left_out "recording")
endif()
list(REMOVE_DUPLICATES _py_pkgs)
list(JOIN _py_missing ", " _py_missing_s)
list(JOIN _py_pkgs " " _py_pkgs_s)
list(JOIN _py_left_out ", " _py_left_out_s)
if(_py_left_out)
  if(_py_pkgs)
    set(_py_fix "Install them (Debian/Ubuntu):\n  apt-get install ${_py_pkgs_s}\n")
  else()
    set(_py_fix "Drop the CBT_WITH_* option that turned them off.\n")
  endif()
  if(CBT_PY_REQUIRE)
    message(FATAL_ERROR
      "cbt: the Python package needs the OTLP exporter and trace recording, and this "
      "build cannot have ${_py_left_out_s}: missing ${_py_missing_s}.\n${_py_fix}"
      "Or build without them, knowingly:\n"
      "  pip install . -C cmake.define.CBT_PY_REQUIRE=OFF   (or CBT_PY_REQUIRE=OFF in the environment)\n"
      "(docs/install.md, \"The Python package\")")
  endif()
  message(WARNING
    "cbt: CBT_PY_REQUIRE=OFF: this package is built WITHOUT ${_py_left_out_s} "
    "(missing ${_py_missing_s}); cbt.build_info() says so. ${_py_fix}")
endif()
if(CBT_WITH_CUDA_ON)
  message(STATUS "cbt: Python package: CUDA ${CUDAToolkit_VERSION} (runtime ${CBT_CUDA_RUNTIME}, "
                 "CUPTI ${CBT_WITH_CUPTI_ON}, dlopen ${CBT_CUPTI_DLOPEN})")
elseif(CBT_WITH_CUDA STREQUAL "OFF")
  message(WARNING "cbt: CBT_WITH_CUDA=OFF: this package is the CPU backend alone "
                  "(no CUDA streams, device rings or CUPTI).")
else()
  message(WARNING "cbt: no CUDA toolkit (nvcc) found: this package is the CPU backend alone "
                  "(no CUDA streams, device rings or CUPTI). nvcc at /usr/local/cuda/bin/nvcc, "
                  "on PATH, or named by CUDACXX builds them in.")
endif()

# ---- 2. cbt/_build_config.py -------------------------------------------------------
macro(_cbt_py_bool var out)
  if(${var})
    set(${out} True)
  else()
    set(${out} False)
  endif()
endmacro()
_cbt_py_bool(CBT_WITH_CUDA_ON CBT_PY_CUDA)
_cbt_py_bool(CBT_WITH_CUPTI_ON CBT_PY_CUPTI)
_cbt_py_bool(CBT_WITH_NVTX_ON CBT_PY_NVTX)
_cbt_py_bool(CBT_WITH_OTLP_ON CBT_PY_OTLP)
_cbt_py_bool(CBT_WITH_MSGPACK_ON CBT_PY_RECORDING)
_cbt_py_bool(CBT_PY_REQUIRE CBT_PY_REQUIRED)
# gRPC rides on HTTP/2: the libcurl linked (bundled in the wheel) must have it
set(CBT_PY_OTLP_GRPC False)
if(CBT_WITH_OTLP_ON)
  pkg_get_variable(_curl_features libcurl supported_features)
  if("HTTP2" IN_LIST _curl_features) # pkg_get_variable splits the list at spaces
    set(CBT_PY_OTLP_GRPC True)
  endif()
endif()
set(CBT_PY_CUDA_RUNTIME "")
set(CBT_PY_CUDA_VERSION "")
if(CBT_WITH_CUDA_ON)
  string(TOLOWER "${CBT_CUDA_RUNTIME}" CBT_PY_CUDA_RUNTIME)
  set(CBT_PY_CUDA_VERSION "${CUDAToolkit_VERSION}")
endif()
set(CBT_PY_CUPTI_LOADING "")
if(CBT_WITH_CUPTI_ON)
  if(CBT_CUPTI_DLOPEN)
    set(CBT_PY_CUPTI_LOADING "dlopen")
  else()
    set(CBT_PY_CUPTI_LOADING "linked")
  endif()
endif()
set(CBT_PY_LEFT_OUT "")
foreach(_p ${_py_left_out})
  string(APPEND CBT_PY_LEFT_OUT "\"${_p}\", ")
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/build_config.py.in
               ${PROJECT_BINARY_DIR}/python/_build_config.py @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/python/_build_config.py DESTINATION cbt COMPONENT python)

# ---- 3. the `cbt` command inside the package ----------------------------------------
# auditwheel repairs it like the extension (its RUNPATH then names the
# bundled libraries' folder); scripts/wheel.sh checks that it did
install(TARGETS cbt_cli RUNTIME DESTINATION cbt/_bin COMPONENT python)
