# cmake/install.cmake — what `cmake --install` puts under the prefix
# (docs/install.md):
#   include/cbt.h, include/cbt/*.h     every public header, build_config.h included
#   lib/libcbt.so.*, lib/libcbt.a      the library, shared and static
#   lib/libcbt_kernels.so.*, .a        the KV kernels
#   bin/cbt                            the command
#   lib/cmake/cbt/                     find_package(cbt CONFIG): cbt::cbt, cbt::cbt_static,
#                                      cbt::kernels, cbt::kernels_static
#   lib/pkgconfig/cbt.pc               pkg-config cbt (--static for libcbt.a)
include(CMakePackageConfigHelpers)

set(CBT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/cbt)

install(FILES include/cbt.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# cbt/lmct.h only with its codec in libcbt (msgpack-c: CBT_WITH_MSGPACK)
if(CBT_WITH_MSGPACK_ON)
  install(DIRECTORY include/cbt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h")
else()
  install(DIRECTORY include/cbt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h" PATTERN "lmct.h" EXCLUDE)
endif()
install(FILES ${PROJECT_BINARY_DIR}/include/cbt/build_config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cbt)

set_target_properties(cbt PROPERTIES EXPORT_NAME cbt)
set_target_properties(cbt_static PROPERTIES EXPORT_NAME cbt_static)
set_target_properties(cbt_kernels PROPERTIES EXPORT_NAME kernels)
set_target_properties(cbt_kernels_static PROPERTIES EXPORT_NAME kernels_static)
# The static libraries' link interface must be complete on its own for a C
# program linked by the C compiler (cbt::cbt_static in a project that never
# enables CUDA): the nvcc-compiled objects inside (host stubs of the device
# code) need the C++ runtime, which only nvcc's own link line would add.
if(CBT_WITH_CUDA_ON)
  target_link_libraries(cbt_static INTERFACE stdc++)
  target_link_libraries(cbt_kernels_static INTERFACE stdc++)
endif()
# An installed libcbt_kernels.so finds the libcbt.so.<ABI> next to it (its
# users' RUNPATH does not apply to the libraries they load).
set_property(TARGET cbt_kernels APPEND PROPERTY INSTALL_RPATH "$ORIGIN")
# (the targets' INSTALL_INTERFACE already names include/: no INCLUDES DESTINATION,
# which would list it twice)
install(TARGETS cbt cbt_static cbt_kernels cbt_kernels_static EXPORT cbtTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS cbt_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT cbtTargets NAMESPACE cbt:: DESTINATION ${CBT_CMAKE_DIR})

set(CBT_CUDA_TOOLKIT_ROOT "")
if(CBT_WITH_CUDA_ON AND CUDAToolkit_BIN_DIR)
  get_filename_component(CBT_CUDA_TOOLKIT_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(cmake/cbtConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cbtConfig.cmake INSTALL_DESTINATION ${CBT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cbtConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cbtConfig.cmake ${PROJECT_BINARY_DIR}/cbtConfigVersion.cmake
        DESTINATION ${CBT_CMAKE_DIR})

# ---- pkg-config: what a Makefile needs to compile and link against cbt ---------------
# Libs.private is what `pkg-config --static cbt` adds for libcbt.a: the
# libraries it calls, themselves linked as usual (shared where they are).
# libcurl, protobuf-c and zlib are named there, not in Requires.private: that
# would make --static pull in libcurl's own static dependencies (ldap, zstd,
# ...), which a system with libcurl's -dev package alone does not have. A fully
# static program adds `pkg-config --static libcurl` itself (docs/install.md).
set(CBT_PC_REQUIRES_PRIVATE "")
set(CBT_PC_LIBS_PRIVATE "-lpthread -lm")
if(CBT_WITH_OTLP_ON)
  set(_pc_dirs ${CURL_LIBRARY_DIRS} ${PROTOBUFC_LIBRARY_DIRS})
  if(_pc_dirs)
    list(REMOVE_DUPLICATES _pc_dirs)
    list(REMOVE_ITEM _pc_dirs ${CMAKE_C_IMPLICIT_LINK_DIRECTORIES})
  endif()
  foreach(d ${_pc_dirs})
    string(APPEND CBT_PC_LIBS_PRIVATE " -L${d}")
  endforeach()
  string(APPEND CBT_PC_LIBS_PRIVATE " -lcurl -lprotobuf-c -lz")
endif()
if(CBT_WITH_MSGPACK_ON)
  get_filename_component(_msgpack_dir "${MSGPACK_LIBRARY}" DIRECTORY)
  if(NOT _msgpack_dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
    string(APPEND CBT_PC_LIBS_PRIVATE " -L${_msgpack_dir}")
  endif()
  get_filename_component(_msgpack_name "${MSGPACK_LIBRARY}" NAME_WE)
  string(REGEX REPLACE "^lib" "" _msgpack_name "${_msgpack_name}")
  string(APPEND CBT_PC_LIBS_PRIVATE " -l${_msgpack_name}") # trace recording (cbt/replay.h)
endif()
if(CBT_WITH_NVTX_ON AND CMAKE_DL_LIBS)
  string(APPEND CBT_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}") # NVTX loads its tool with dlopen
endif()
if(CBT_WITH_CUDA_ON)
  string(APPEND CBT_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -Wl,-rpath,${CUDAToolkit_LIBRARY_DIR} -lcudart")
  if(CBT_WITH_CUPTI_ON)
    get_filename_component(_cupti_dir "${CUDA_cupti_LIBRARY}" DIRECTORY)
    if(NOT _cupti_dir STREQUAL CUDAToolkit_LIBRARY_DIR)
      string(APPEND CBT_PC_LIBS_PRIVATE " -L${_cupti_dir} -Wl,-rpath,${_cupti_dir}")
    endif()
    string(APPEND CBT_PC_LIBS_PRIVATE " -lcupti")
  endif()
  string(APPEND CBT_PC_LIBS_PRIVATE " -lstdc++")
endif()
# The prefix is the one installed into (`cmake --install --prefix P`, or
# CMAKE_INSTALL_PREFIX), so cbt.pc is written at install time: configured now
# with @CBT_PC_PREFIX@ left in, that filled in by the install step.
foreach(d LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${d}}")
    set(CBT_PC_${d} "${CMAKE_INSTALL_${d}}")
  else()
    set(CBT_PC_${d} "\${prefix}/${CMAKE_INSTALL_${d}}")
  endif()
endforeach()
set(CBT_PC_PREFIX "@CBT_PC_PREFIX@")
configure_file(cmake/cbt.pc.in ${PROJECT_BINARY_DIR}/cbt.pc.stage @ONLY)
install(CODE "set(CBT_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${PROJECT_BINARY_DIR}/cbt.pc.stage\" \"${PROJECT_BINARY_DIR}/cbt.pc\" @ONLY)")
install(FILES ${PROJECT_BINARY_DIR}/cbt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
