# `cpack -G DEB` in the build directory: a Debian package of what `cmake --install`
# installs, into /usr, with the Debian packages it needs declared as dependencies
# (the headers a user's build includes, the BLAS the models call, and the backends
# this build was made with). LibTorch 2.x is no Debian package: the binaries find
# the LibTorch they were built against at its path (the install RPATH carries it),
# so the package serves machines set up alike (scripts/install-deps.sh puts
# PyTorch 2.11 under /opt/tessera-deps); docs/install.md says so. Gloo is inside
# the Gloo backend library. scripts/check-deb-package.sh builds it,
# installs it with apt-get and builds examples/ddp_mlp against it.
set(CPACK_PACKAGE_NAME tessera)
set(CPACK_PACKAGE_VENDOR "Tessera")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Distributed deep-learning training for LibTorch")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "Tessera developers <tessera@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# libprotobuf32: Debian 12's runtime of the protobuf the runtime layer writes
# TensorBoard files with.
set(tessera_deb_depends "nlohmann-json3-dev" "libopenblas0-pthread | libblas3"
  "zlib1g" "libprotobuf32")
if(TESSERA_WITH_MPI)
  list(APPEND tessera_deb_depends "libopenmpi-dev" "openmpi-bin")
endif()
if(TESSERA_WITH_URING)
  list(APPEND tessera_deb_depends "liburing2")
endif()
# The tokenizers' libraries, when the build found them (src/tessera/CMakeLists.txt).
if(TESSERA_PCRE2_LIBRARY)
  list(APPEND tessera_deb_depends "libpcre2-8-0")
endif()
if(TESSERA_SENTENCEPIECE_LIBRARY)
  list(APPEND tessera_deb_depends "libsentencepiece0")
endif()
list(JOIN tessera_deb_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "cmake, g++, pkg-config")
include(CPack)
