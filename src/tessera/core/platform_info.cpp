#include "tessera/core/platform_info.h"

#include <ATen/Context.h>
#include <torch/version.h>

#include "tessera/config.h"

#if TESSERA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tessera::platform {

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

bool built_with_cuda() { return TESSERA_WITH_CUDA != 0; }

std::string cuda_runtime_version() {
#if TESSERA_WITH_CUDA
  // The runtime's own version needs no driver (cudaDriverGetVersion would).
  int version = 0;
  if (cudaRuntimeGetVersion(&version) != cudaSuccess) return "";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
#else
  return "";
#endif
}

int gpu_count() {
  // at::hasCUDA() asks LibTorch's CUDA hooks, which answer false without a driver.
  return at::hasCUDA() ? static_cast<int>(at::getNumGPUs()) : 0;
}

}  // namespace tessera::platform
