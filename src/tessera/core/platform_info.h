// What this process runs on: the LibTorch it was built against, whether that
// LibTorch and this build have CUDA, the CUDA runtime's version, and the GPUs the
// driver shows. Used by `tessera doctor`.
//
// Every function is safe on a machine with no GPU and no driver (the CUDA build
// included): it returns "" or 0 instead of needing the driver.
// Thread safety: all functions may be called from any thread.
#pragma once

#include <string>

namespace tessera::platform {

// LibTorch's version at build time, "2.11.0".
std::string torch_version();

// True when this build compiled its CUDA paths (a CUDA LibTorch and a toolkit).
bool built_with_cuda();

// The CUDA runtime version this build links, "13.0", or "" without CUDA.
std::string cuda_runtime_version();

// GPUs the driver shows to this process (0 without a driver or a CUDA build).
int gpu_count();

}  // namespace tessera::platform
