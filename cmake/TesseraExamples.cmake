# Builds examples/ inside this tree. Each example's CMakeLists.txt is what a user
# writes against an installed Tessera (find_package(Tessera REQUIRED) and
# Tessera::tessera); here find_package finds a stub package that only checks the
# in-tree targets exist, so the very same files build in both places. In-tree
# examples reuse the torch precompiled header (seconds instead of a minute each).
set(Tessera_DIR ${CMAKE_BINARY_DIR}/in-tree-package)
file(WRITE ${Tessera_DIR}/TesseraConfig.cmake
  "# Tessera inside its own build tree: the targets already exist.\n"
  "if(NOT TARGET Tessera::tessera)\n"
  "  message(FATAL_ERROR \"in-tree Tessera package used outside the Tessera build\")\n"
  "endif()\n")
add_subdirectory(examples)
get_property(tessera_example_dirs DIRECTORY ${PROJECT_SOURCE_DIR}/examples PROPERTY SUBDIRECTORIES)
foreach(dir ${tessera_example_dirs})
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_precompile_headers(${target} REUSE_FROM tessera_models)
    endif()
  endforeach()
endforeach()
