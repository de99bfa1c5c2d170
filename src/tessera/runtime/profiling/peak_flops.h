// The peak FLOP/s that MFU is measured against: `tessera doctor` times float32
// GEMM on one core of this host and records the result; `tessera train` reads
// the record.
//
// The record is a small JSON file, by default $XDG_CACHE_HOME/tessera/peak.json
// (~/.cache/tessera/peak.json without XDG_CACHE_HOME):
//   {"fp32_gemm_flops_per_core": 5.8e10, "gemm_size": 1024, "runs": 7,
//    "host": "node1", "cpu": "AMD EPYC ...", "measured_at": "2026-12-05T07:40:00Z"}
// TESSERA_PEAK_FLOPS (FLOP/s per core) overrides it, e.g. with a vendor's
// datasheet number. A measured GEMM peak is what a CPU really sustains on a
// large matmul, not the theoretical FMA peak (cores × clock × SIMD width × 2):
// MFU against it says how much of the reachable compute the training uses.
//
// A rank's peak is the per-core peak times the intra-op threads the rank runs
// (at::get_num_threads(); `tessera train` sets 1 per rank): ranks are assumed
// to have cores of their own.
//
// Not thread-safe with respect to at::set_num_threads (measure() changes and
// restores it); the rest is pure or file I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::runtime::profiling {

struct PeakRecord {
  double flops_per_core = 0;  // median FLOP/s of an n×n×n float32 GEMM on one thread
  int64_t gemm_size = 0;      // n
  int64_t runs = 0;           // timed runs (after warm-up) the median is taken over
  std::string host;           // gethostname(): a record from another host is suspect
  std::string cpu;            // /proc/cpuinfo's model name
  std::string measured_at;    // UTC, ISO 8601

  // Times `runs` GEMMs of size n on one thread after two warm-up runs (about
  // 0.3 s for n = 1024 at 50 GFLOP/s) and fills every field.
  static PeakRecord measure(int64_t gemm_size = 1024, int64_t runs = 7);
};

// Where the record lives (see above).
std::string peak_record_path();

// Writes the record atomically, creating the directory; ConfigError when it
// cannot be written.
void save_peak_record(const PeakRecord& record, const std::string& path);

// The record at `path`; nullopt when there is none. ConfigError when the file
// exists but is not a record (names the path and says to rerun `tessera doctor`).
std::optional<PeakRecord> load_peak_record(const std::string& path);

// The per-core peak MFU divides by: TESSERA_PEAK_FLOPS if set (ConfigError
// unless positive), else the record; nullopt when neither exists.
struct PeakFlops {
  double flops_per_core = 0;
  std::string source;  // "TESSERA_PEAK_FLOPS" or the record's path
  std::string host;    // the record's host ("" for the variable)
};
std::optional<PeakFlops> find_peak_flops();

// This host's name (gethostname), for comparing with a record's.
std::string this_host();

}  // namespace tessera::runtime::profiling
