# LibTorch 2.x for Tessera's build and for the standalone fuzz project
# (tests/fuzz/standalone), found and linked the same way in both.
#
# A Torch_DIR or CMAKE_PREFIX_PATH the user gives wins (a libtorch archive, another
# PyTorch's torch.utils.cmake_prefix_path); otherwise the PyTorch wheel
# scripts/install-deps.sh puts under TESSERA_DEPS_DIR.
set(TESSERA_DEPS_DIR "/opt/tessera-deps" CACHE PATH
    "Where scripts/install-deps.sh installs LibTorch 2.x (venv/) and the static Gloo (gloo/)")
file(GLOB TESSERA_VENV_TORCH_DIR "${TESSERA_DEPS_DIR}/venv/lib/python3*/site-packages/torch/share/cmake/Torch")
find_package(Torch 2.0 REQUIRED HINTS ${TESSERA_VENV_TORCH_DIR})
message(STATUS "Tessera: LibTorch ${Torch_VERSION} from ${Torch_DIR}")
# The PyTorch wheels' libtorch.so defines and exports unversioned copies of part of
# libstdc++ (std::filesystem among them). libtorch.so comes before libstdc++.so.6 in
# a program's library search order, so a program's std::filesystem::remove_all
# would land in libtorch's copy, which crashes. Making libstdc++ the first library
# every binary and library needs puts the real one first. Tessera::core passes
# TESSERA_LIBSTDCXX_FIRST on to users' programs too.
set(TESSERA_LIBSTDCXX_FIRST "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
add_link_options(${TESSERA_LIBSTDCXX_FIRST})
