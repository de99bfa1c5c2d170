# `cmake --install`: the tessera binary, the layer libraries, the public headers,
# the generated tessera/config.h, the docs, a CMake package (find_package(Tessera)
# with Tessera::tessera and one Tessera::<layer> per layer) and a pkg-config file.
# `cpack -G DEB` (cmake/TesseraPackage.cmake) packages the same files.
include(CMakePackageConfigHelpers)

set(TESSERA_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)

install(TARGETS ${TESSERA_LAYER_TARGETS} tessera_lib tessera
  EXPORT TesseraTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT TesseraTargets NAMESPACE Tessera:: DESTINATION ${TESSERA_CMAKE_INSTALL_DIR})

# Public headers: everything under src/tessera except what only the implementation
# includes (backend internals that pull in Gloo, MPI or NCCL headers, queues and wire
# formats, the CLI, the kernels behind the models, the precompiled headers).
# tests/install/check_installed_headers.sh fails if an installed header includes
# one that is not installed.
set(TESSERA_INTERNAL_HEADERS
  "^cli/"
  "^comm/gloo/" "^comm/mpi/" "^comm/nccl/" "^comm/shm/" "^comm/hierarchical/"
  "^comm/agent_store\\.h$" "^comm/collective_check\\.h$" "^comm/process_group_impl\\.h$"
  "^comm/progress_monitor\\.h$" "^comm/serial_executor\\.h$"
  "^comm/base/socket_util\\.h$" "^comm/base/tcp_store_protocol\\.h$"
  "^core/atomic_file\\.h$" "^core/file_io\\.h$" "^core/host_memory\\.h$"
  "^checkpoint/crc32c\\.h$" "^runtime/checkpoint_steps\\.h$"
  "^runtime/offload/chunked_io\\.h$" "^runtime/offload/async_io_engines\\.h$"
  "^models/ops/"
  "^pch_")
file(GLOB_RECURSE tessera_headers RELATIVE ${TESSERA_SRC_DIR}/tessera
  CONFIGURE_DEPENDS ${TESSERA_SRC_DIR}/tessera/*.h)
foreach(header ${tessera_headers})
  set(internal FALSE)
  foreach(pattern ${TESSERA_INTERNAL_HEADERS})
    if(header MATCHES "${pattern}")
      set(internal TRUE)
    endif()
  endforeach()
  if(NOT internal)
    get_filename_component(subdir ${header} DIRECTORY)
    install(FILES ${TESSERA_SRC_DIR}/tessera/${header}
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera/${subdir})
  endif()
endforeach()
install(FILES ${TESSERA_GENERATED_DIR}/tessera/config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

# CMake package.
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TesseraConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/TesseraConfig.cmake
  INSTALL_DESTINATION ${TESSERA_CMAKE_INSTALL_DIR})
# 0.x: a minor version may break the API, so only the same major.minor matches.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/TesseraConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/TesseraConfig.cmake
              ${CMAKE_BINARY_DIR}/package/TesseraConfigVersion.cmake
        DESTINATION ${TESSERA_CMAKE_INSTALL_DIR})

# pkg-config: the same flags for builds without CMake. Torch has no .pc file, so its
# include directories and libraries are written in as found here.
set(TESSERA_PC_LIBS "")
foreach(target tessera_runtime tessera_checkpoint tessera_data tessera_models tessera_parallel
               tessera_comm ${TESSERA_BACKEND_TARGETS} tessera_comm_base tessera_core)
  string(APPEND TESSERA_PC_LIBS " -l${target}")
endforeach()
set(TESSERA_PC_TORCH_CFLAGS "")
foreach(dir ${TORCH_INCLUDE_DIRS})
  string(APPEND TESSERA_PC_TORCH_CFLAGS " -I${dir}")
endforeach()
get_filename_component(TESSERA_PC_TORCH_LIBDIR ${TORCH_LIBRARY} DIRECTORY)
# LibTorch 2.x has no system location: the rpath lets programs find it at run time.
set(TESSERA_PC_TORCH_LIBS
    "-L${TESSERA_PC_TORCH_LIBDIR} -Wl,-rpath,${TESSERA_PC_TORCH_LIBDIR} -ltorch -ltorch_cpu -lc10")
file(RELATIVE_PATH TESSERA_PC_PREFIX_FROM_PC ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
configure_file(${PROJECT_SOURCE_DIR}/cmake/tessera.pc.in ${CMAKE_BINARY_DIR}/package/tessera.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/tessera.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

include(${PROJECT_SOURCE_DIR}/cmake/TesseraPackage.cmake)
