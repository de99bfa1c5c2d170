// tessera doctor: what this build contains, which environment it reads, and
// this host's peak float32 GEMM FLOP/s per core, which it measures and records
// for `tessera train`'s MFU (runtime/profiling/peak_flops.h).
#include <cstdio>

#include "tessera/cli/commands/command.h"
#include "tessera/comm/backend_registry.h"
#include "tessera/config.h"
#include "tessera/core/env.h"
#include "tessera/core/error.h"
#include "tessera/runtime/profiling/peak_flops.h"

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

}  // namespace

int doctor_command(const Args& args) {
  std::printf("tessera %s\n\nbackends:", TESSERA_VERSION);
  for (const auto& b : comm::available_backends()) std::printf(" %s", b.c_str());
  std::printf("\n\nenvironment variables read:\n");
  for (const auto& v : env::registry()) {
    auto value = env::get(v.name);
    std::printf("  %-30s %-14s %s\n", v.name, value ? value->c_str() : "(unset)", v.description);
  }
  record_peak_flops();
  return 0;
}

}  // namespace tessera::cli
