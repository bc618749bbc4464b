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
install(DIRECTORY include/cbt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/cbt/build_config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cbt)

set_target_properties(cbt PROPERTIES EXPORT_NAME cbt)
set_target_properties(cbt_static PROPERTIES EXPORT_NAME cbt_static)
set_target_properties(cbt_kernels PROPERTIES EXPORT_NAME kernels)
set_target_properties(cbt_kernels_static PROPERTIES EXPORT_NAME kernels_static)
install(TARGETS cbt cbt_static cbt_kernels cbt_kernels_static EXPORT cbtTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS cbt_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT cbtTargets NAMESPACE cbt:: DESTINATION ${CBT_CMAKE_DIR})

configure_package_config_file(cmake/cbtConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cbtConfig.cmake INSTALL_DESTINATION ${CBT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cbtConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cbtConfig.cmake ${PROJECT_BINARY_DIR}/cbtConfigVersion.cmake
        DESTINATION ${CBT_CMAKE_DIR})

# ---- pkg-config: what a Makefile needs to compile and link against cbt ---------------
# Requires.private / Libs.private are what `pkg-config --static cbt` adds for libcbt.a.
set(CBT_PC_REQUIRES_PRIVATE "")
set(CBT_PC_LIBS_PRIVATE "-lpthread -lm")
if(CBT_WITH_OTLP_ON)
  set(CBT_PC_REQUIRES_PRIVATE "libcurl libprotobuf-c zlib")
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
configure_file(cmake/cbt.pc.in ${PROJECT_BINARY_DIR}/cbt.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cbt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
