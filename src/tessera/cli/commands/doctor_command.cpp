// tessera doctor: what this build contains, which environment it reads, and
// this host's peak float32 GEMM FLOP/s per core, which it measures and records
// for `tessera train`'s MFU (runtime/profiling/peak_flops.h).
#include <cstdio>

#include "tessera/cli/commands/command.h"
#include "tessera/comm/backend_registry.h"
#include "tessera/config.h"
#include "tessera/core/env.h"
#include "tessera/core/error.h"
#include "tessera/core/platform_info.h"
#include "tessera/runtime/profiling/peak_flops.h"
#if TESSERA_WITH_NCCL
#include "tessera/comm/nccl/nccl_version.h"
#endif

namespace tessera::cli {
namespace {

// Half a second of GEMMs: cheap enough to run on every `tessera doctor`, so the
// record follows the host (a new CPU, another machine sharing the home).
void record_peak_flops() {
  namespace prof = runtime::profiling;
  std::printf("\npeak FLOP/s (fp32 GEMM, one core, for MFU): ");
  std::fflush(stdout);
  const prof::PeakRecord r = prof::PeakRecord::measure();
  std::printf("%.1f GFLOP/s per core (%lldx%lld matmul, median of %lld runs, %s)\n",
              r.flops_per_core / 1e9, static_cast<long long>(r.gemm_size),
              static_cast<long long>(r.gemm_size), static_cast<long long>(r.runs), r.cpu.c_str());
  const std::string path = prof::peak_record_path();
  try {
    prof::save_peak_record(r, path);
    std::printf("  recorded in %s (tessera train reads it; TESSERA_PEAK_FLOPS overrides it)\n",
                path.c_str());
  } catch (const Error& e) {
    std::printf("  warning: not recorded: %s\n", e.what());
  }
}

// LibTorch, CUDA, NCCL and the GPUs: what this build can run on here.
void print_platform() {
  std::printf("\nLibTorch %s, %s\n", platform::torch_version().c_str(),
              platform::built_with_cuda() ? "with CUDA" : "CPU only");
  if (platform::built_with_cuda()) {
    std::printf("CUDA runtime %s", platform::cuda_runtime_version().c_str());
#if TESSERA_WITH_NCCL
    std::printf(", NCCL %s", comm::nccl_version().c_str());
#endif
    std::printf("\n");
  }
  const int gpus = platform::gpu_count();
  if (gpus == 0) {
    std::printf("GPUs: no GPU\n");
  } else {
    std::printf("GPUs: %d\n", gpus);
  }
}

}  // namespace

int doctor_command(const Args& args) {
  std::printf("tessera %s\n\nbackends:", TESSERA_VERSION);
  for (const auto& b : comm::available_backends()) std::printf(" %s", b.c_str());
  std::printf("\n");
  print_platform();
  std::printf("\nenvironment variables read:\n");
  for (const auto& v : env::registry()) {
    auto value = env::get(v.name);
    std::printf("  %-30s %-14s %s\n", v.name, value ? value->c_str() : "(unset)", v.description);
  }
  record_peak_flops();
  return 0;
}

}  // namespace tessera::cli
