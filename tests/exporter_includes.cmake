# tests/exporter_includes.cmake — ctest exporter_includes:
#   cmake -DCBT_SOURCE_DIR=<source tree> -P tests/exporter_includes.cmake
# The rule of docs/architecture.md and exporter/CMakeLists.txt: of host/, a
# file under exporter/ includes only these shared headers of host/internal/,
set(allowed internal/json.h internal/hash.h internal/publish_hook.h internal/abi.h internal/span_queue.h)
# and never a header of another host/ folder directly (core/..., spans/...,
# host/..., ../host/...), quoted or in angle brackets. Fails naming every
# file:line that breaks it.
cmake_minimum_required(VERSION 3.24)
if(NOT CBT_SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DCBT_SOURCE_DIR=<cbt source tree> -P ${CMAKE_CURRENT_LIST_FILE}")
endif()
if(NOT IS_DIRECTORY "${CBT_SOURCE_DIR}/exporter" OR NOT IS_DIRECTORY "${CBT_SOURCE_DIR}/host")
  message(FATAL_ERROR "${CBT_SOURCE_DIR} has no exporter/ and host/")
endif()

# host/'s folders, as the tree has them now (internal/ is checked against the list)
file(GLOB host_entries RELATIVE "${CBT_SOURCE_DIR}/host" LIST_DIRECTORIES true "${CBT_SOURCE_DIR}/host/*")
set(host_dirs "")
foreach(d ${host_entries})
  if(IS_DIRECTORY "${CBT_SOURCE_DIR}/host/${d}" AND NOT d STREQUAL "internal")
    list(APPEND host_dirs "${d}")
  endif()
endforeach()
if(NOT host_dirs)
  message(FATAL_ERROR "no folders found under ${CBT_SOURCE_DIR}/host")
endif()

file(GLOB_RECURSE files RELATIVE "${CBT_SOURCE_DIR}"
     "${CBT_SOURCE_DIR}/exporter/*.c" "${CBT_SOURCE_DIR}/exporter/*.h"
     "${CBT_SOURCE_DIR}/exporter/*.cu" "${CBT_SOURCE_DIR}/exporter/*.cpp"
     "${CBT_SOURCE_DIR}/exporter/*.inc")
set(bad "")
set(n_includes 0)
foreach(f ${files})
  file(STRINGS "${CBT_SOURCE_DIR}/${f}" lines)
  set(lineno 0)
  foreach(line IN LISTS lines)
    math(EXPR lineno "${lineno} + 1")
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]([^\">]+)[\">]")
      continue()
    endif()
    set(inc "${CMAKE_MATCH_1}")
    math(EXPR n_includes "${n_includes} + 1")
    # ./x.h and a/../b.h spelled out, so a path cannot walk round the rule
    string(REGEX REPLACE "^(\\./)+" "" inc_n "${inc}")
    set(why "")
    if(inc_n MATCHES "(^|/)\\.\\./" OR inc_n MATCHES "(^|/)host/")
      set(why "reaches into host/ by path")
    elseif(inc_n MATCHES "^internal/")
      if(NOT inc_n IN_LIST allowed)
        set(why "host/internal/ header outside the allowed list")
      endif()
    else()
      string(REGEX MATCH "^[^/]+" first "${inc_n}")
      if(inc_n MATCHES "/" AND first IN_LIST host_dirs)
        set(why "header of host/${first}/")
      endif()
    endif()
    if(why)
      list(APPEND bad "${f}:${lineno}: #include \"${inc}\": ${why}")
    endif()
  endforeach()
endforeach()

list(LENGTH files n_files)
if(n_files EQUAL 0)
  message(FATAL_ERROR "no source files found under ${CBT_SOURCE_DIR}/exporter")
endif()
if(bad)
  list(JOIN bad "\n  " bad)
  list(JOIN allowed ", " allowed_s)
  list(JOIN host_dirs "," host_dirs_s)
  message(FATAL_ERROR "exporter/ includes what it must not (allowed of host/: ${allowed_s}; "
                      "no header of host/{${host_dirs_s}}/):\n  ${bad}")
endif()
message(STATUS "exporter_includes: ${n_files} files, ${n_includes} includes under exporter/: "
               "of host/ only internal/{json,hash,publish_hook,abi}.h")
