#include "tessera/cli/plan/cluster_spec.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include "tessera/core/check.h"

namespace tessera::cli::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// MemTotal of /proc/meminfo in bytes (0 if unreadable).
double host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (in >> key) {
    if (key == "MemTotal:") {
      in >> kb;
      return kb * 1024.0;
    }
    std::getline(in, key);
  }
  return 0;
}

// Whether the CPU multiplies bf16 natively (AVX512-BF16): then LibTorch's bf16
// GEMMs run about 7x faster than fp32 here (docs/precision.md); otherwise the
// operands are upcast and bf16 runs at the fp32 rate.
bool host_has_avx512_bf16() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) return line.find("avx512_bf16") != std::string::npos;
  }
  return false;
}

ClusterSpec host_preset() {
  ClusterSpec c;
  c.name = "host";
  const double cores = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  // Measured on the development machines (reference numbers in docs/plan.md):
  // fp32 GEMM 58 GFLOP/s per core, bf16 399 with AVX512-BF16; memcpy 6.7-8.7
  // GB/s; shm all_reduce 6-9.5 GB/s busbw from 1 MB on, ~5 us per step;
  // gloo over TCP ~1.2 GB/s and ~0.3 ms.
  c.peak_flops_fp32 = kHostCoreGemmFlops;
  c.peak_flops_16 = host_has_avx512_bf16() ? 399e9 : kHostCoreGemmFlops;
  c.node_peak_flops = cores * kHostCoreGemmFlops;
  c.memory_bw = 8e9;
  c.node_memory_bw = 8e9;
  c.intra_busbw = 6e9;
  c.intra_alpha = 5e-6;
  c.inter_busbw = 1.2e9;
  c.inter_alpha = 300e-6;
  c.offload_bw = 1e9;
  c.mfu = 0.5;
  c.overlap = 0.0;
  c.memory_bytes = host_memory_bytes();
  c.devices_per_node = static_cast<int>(cores);  // one rank per core unless told
  c.cores_per_node = static_cast<int>(cores);
  // Linux's default time slice: 0.75 ms x (1 + log2 cores) (sched_base_slice,
  // logarithmic tunable scaling). Measured on 2 cores with 4 ranks: tensor
  // parallelism's all-reduces cost 1.5-2.1 ms more each (docs/plan.md).
  c.oversubscribed_sync = 0.75e-3 * (1.0 + std::floor(std::log2(cores)));
  return c;
}

// NVIDIA datasheet peaks (dense, no sparsity), nccl-tests bus bandwidths from
// reference/performance.md: A100 NVLink capped at 235 GB/s by NCCL, H100
// ~370 GB/s; network: one 200 Gb/s (A100) or 400 Gb/s (H100/H200) NIC per GPU
// at ~85% of line rate.
ClusterSpec gpu_preset(const std::string& name) {
  ClusterSpec c;
  c.name = name;
  c.devices_per_node = 8;
  c.intra_alpha = 10e-6;
  c.inter_alpha = 20e-6;
  c.mfu = 0.4;
  c.overlap = 1.0;
  if (name == "a100-80g") {
    c.memory_bytes = 80 * kGiB;
    c.peak_flops_fp32 = 19.5e12;
    c.peak_flops_16 = 312e12;
    c.memory_bw = 2.0e12;
    c.intra_busbw = 235e9;
    c.inter_busbw = 21e9;
    c.offload_bw = 25e9;
  } else {
    c.memory_bytes = name == "h200" ? 141e9 : 80 * kGiB;
    c.peak_flops_fp32 = 67e12;
    c.peak_flops_16 = 989e12;
    c.memory_bw = name == "h200" ? 4.8e12 : 3.35e12;
    c.intra_busbw = 370e9;
    c.inter_busbw = 42e9;
    c.offload_bw = 50e9;
  }
  return c;
}

}  // namespace

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  TS_THROW(ConfigError, "unknown precision '", name, "'; use fp32, bf16 or fp16");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

double ClusterSpec::device_flops(Precision p) const {
  const double peak = p == Precision::kFp32 ? peak_flops_fp32 : peak_flops_16;
  if (node_peak_flops <= 0) return peak;
  // A node's cores shared by its ranks; 16-bit scales like fp32 does.
  const double share = node_peak_flops / devices_per_node;
  return std::min(peak, share * peak / peak_flops_fp32);
}

double ClusterSpec::device_memory_bw() const {
  if (node_memory_bw <= 0) return memory_bw;
  return std::min(memory_bw, node_memory_bw / devices_per_node);
}

double ClusterSpec::busbw(int group, int per_node) const {
  if (group <= 1) return intra_busbw;
  if (per_node >= group) return intra_busbw;
  return std::min(intra_busbw, per_node * inter_busbw);
}

double ClusterSpec::sync_penalty() const {
  return cores_per_node > 0 && devices_per_node > cores_per_node ? oversubscribed_sync : 0.0;
}

double ClusterSpec::alpha(int group, int per_node) const {
  return per_node >= group ? intra_alpha : inter_alpha;
}

void ClusterSpec::validate() const {
  TS_CHECK_T(ConfigError, devices_per_node > 0 && nodes > 0, "--gpus-per-node (",
             devices_per_node, ") and --nodes (", nodes, ") must be positive");
  TS_CHECK_T(ConfigError, memory_bytes > 0,
             "memory per device unknown: pass --memory-gb for cluster '", name, "'");
  TS_CHECK_T(ConfigError, peak_flops_fp32 > 0 && peak_flops_16 > 0,
             "peak FLOP/s unknown: pass --peak-tflops for cluster '", name, "'");
  TS_CHECK_T(ConfigError, intra_busbw > 0 && inter_busbw > 0,
             "--intra-gbps and --inter-gbps must be positive");
  TS_CHECK_T(ConfigError, mfu > 0 && mfu <= 1, "--mfu ", mfu, " must be in (0, 1]");
  TS_CHECK_T(ConfigError, overlap >= 0 && overlap <= 1, "--overlap ", overlap,
             " must be in [0, 1]");
}

ClusterSpec cluster_preset(const std::string& name, int devices_per_node) {
  ClusterSpec c;
  if (name == "host") {
    c = host_preset();
  } else if (name == "a100-80g" || name == "h100" || name == "h200") {
    c = gpu_preset(name);
  } else {
    TS_THROW(ConfigError, "unknown cluster '", name, "'; known: host, a100-80g, h100, h200");
  }
  if (devices_per_node > 0) c.devices_per_node = devices_per_node;
  // On the host every rank is a process sharing the node's memory.
  if (c.name == "host") c.memory_bytes /= c.devices_per_node;
  return c;
}

std::vector<std::string> cluster_preset_names() { return {"host", "a100-80g", "h100", "h200"}; }

}  // namespace tessera::cli::plan
