# Helpers shared by every Tessera target.
#
# Two precompiled headers, each built once and reused by every target of its kind:
#   * src/tessera/pch_aten.h  (ATen) owned by tessera_core: most targets;
#   * src/tessera/pch_torch.h (torch/torch.h) owned by tessera_models: targets that
#     use torch::nn / optim / autograd (pass TORCH to the helpers below).
# A TU that parses torch/torch.h from scratch costs 30-50 s on two cores; loading
# the ATen PCH costs ~2.5 s and the torch PCH ~10 s.

set(TESSERA_SRC_DIR ${PROJECT_SOURCE_DIR}/src)
set(TESSERA_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)

# tessera_target_defaults(TARGET [TORCH]): include dirs, warnings, PCH reuse.
function(tessera_target_defaults target)
  cmake_parse_arguments(ARG "TORCH" "" "" ${ARGN})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${TESSERA_SRC_DIR}>
    $<BUILD_INTERFACE:${TESSERA_GENERATED_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(target STREQUAL "tessera_core")
    target_precompile_headers(${target} PRIVATE ${TESSERA_SRC_DIR}/tessera/pch_aten.h)
  elseif(target STREQUAL "tessera_models")
    target_precompile_headers(${target} PRIVATE ${TESSERA_SRC_DIR}/tessera/pch_torch.h)
  elseif(ARG_TORCH)
    target_precompile_headers(${target} REUSE_FROM tessera_models)
  else()
    target_precompile_headers(${target} REUSE_FROM tessera_core)
  endif()
endfunction()

# tessera_library(NAME SOURCES ... DEPS ... [TORCH] [STATIC])
# Shared or static per BUILD_SHARED_LIBS unless STATIC (internal libraries). Every
# layer is exported as Tessera::<name without "tessera_"> (tessera_comm -> Tessera::comm)
# and has that alias in the build tree too.
function(tessera_library name)
  cmake_parse_arguments(ARG "TORCH;STATIC" "" "SOURCES;DEPS" ${ARGN})
  if(ARG_STATIC)
    add_library(${name} STATIC ${ARG_SOURCES})
  else()
    add_library(${name} ${ARG_SOURCES})
  endif()
  string(REGEX REPLACE "^tessera_" "" export_name ${name})
  # No <target>_EXPORTS define: every target keeps the flags the shared PCH was built with.
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${export_name} DEFINE_SYMBOL ""
                                           VERSION ${PROJECT_VERSION}
                                           SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  add_library(Tessera::${export_name} ALIAS ${name})
  if(TESSERA_UNITY_BUILD)
    # Files with their own flags or include folders set SKIP_UNITY_BUILD_INCLUSION.
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON
                                             UNITY_BUILD_BATCH_SIZE ${TESSERA_UNITY_BATCH_SIZE})
    # A class with a member from a file-local (anonymous namespace) type is fine in
    # its own file; GCC warns once the file is #included into a batch.
    target_compile_options(${name} PRIVATE -Wno-subobject-linkage)
  endif()
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  if(ARG_TORCH)
    tessera_target_defaults(${name} TORCH)
  else()
    tessera_target_defaults(${name})
  endif()
endfunction()

# tessera_test(NAME SOURCES ... [DEPS ...] [LABELS ...] [TIMEOUT s] [TORCH])
# Builds a GoogleTest binary and registers it with CTest under the given labels
# (unit, dist, slow, gpu). TESSERA_BIN points tests at the built `tessera`.
function(tessera_test name)
  cmake_parse_arguments(ARG "TORCH" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} tessera_testing GTest::gtest GTest::gtest_main)
  if(ARG_TORCH)
    tessera_target_defaults(${name} TORCH)
  else()
    tessera_target_defaults(${name})
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "TESSERA_BIN=$<TARGET_FILE:tessera>;TESSERA_BUILD_DIR=${CMAKE_BINARY_DIR};TESSERA_SOURCE_DIR=${PROJECT_SOURCE_DIR};TESSERA_PYTHON=${TESSERA_PYTHON}")
  # No build dependency on the `tessera` binary: tests that drive it run after a
  # full build (make test); a unit-test binary must not wait for every layer.
endfunction()
