#include "tessera/runtime/profiling/peak_flops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "tessera/core/atomic_file.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"

namespace tessera::runtime::profiling {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "unknown";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string this_host() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

PeakRecord PeakRecord::measure(int64_t n, int64_t runs) {
  TS_CHECK(n > 0 && runs > 0, "PeakRecord::measure: size and runs must be positive");
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  at::NoGradGuard no_grad;
  const auto a = at::randn({n, n}), b = at::randn({n, n});
  auto c = at::empty({n, n});
  std::vector<double> seconds;
  for (int64_t i = 0; i < runs + 2; ++i) {  // two warm-up runs: page faults, BLAS buffers
    const auto start = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= 2) seconds.push_back(s);
  }
  at::set_num_threads(threads);
  // The median ignores a run slowed by a neighbour on a shared host.
  std::nth_element(seconds.begin(), seconds.begin() + runs / 2, seconds.end());
  const double median = seconds[static_cast<size_t>(runs / 2)];
  PeakRecord r;
  r.flops_per_core =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / median;
  r.gemm_size = n;
  r.runs = runs;
  r.host = this_host();
  r.cpu = cpu_model();
  r.measured_at = utc_now();
  return r;
}

std::string peak_record_path() {
  if (auto cache = env::get("XDG_CACHE_HOME")) return *cache + "/tessera/peak.json";
  const auto home = env::get("HOME");
  return (home ? *home : std::string(".")) + "/.cache/tessera/peak.json";
}

void save_peak_record(const PeakRecord& r, const std::string& path) {
  const nlohmann::json j = {{"fp32_gemm_flops_per_core", r.flops_per_core},
                            {"gemm_size", r.gemm_size},
                            {"runs", r.runs},
                            {"host", r.host},
                            {"cpu", r.cpu},
                            {"measured_at", r.measured_at}};
  const std::string text = j.dump(2) + "\n";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  core::replace_file_atomically<ConfigError>(
      path, "peak FLOP/s record", /*do_fsync=*/false,
      [&](const auto& write) { write(text.data(), text.size()); });
}

std::optional<PeakRecord> load_peak_record(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    const auto j = nlohmann::json::parse(ss.str());
    PeakRecord r;
    r.flops_per_core = j.at("fp32_gemm_flops_per_core").get<double>();
    r.gemm_size = j.value("gemm_size", int64_t{0});
    r.runs = j.value("runs", int64_t{0});
    r.host = j.value("host", std::string());
    r.cpu = j.value("cpu", std::string());
    r.measured_at = j.value("measured_at", std::string());
    TS_CHECK_T(ConfigError, r.flops_per_core > 0, "non-positive peak");
    return r;
  } catch (const std::exception& e) {
    TS_THROW(ConfigError, "peak FLOP/s record ", path, " is unreadable (", e.what(),
             "); run `tessera doctor` to measure it again");
  }
}

std::optional<PeakFlops> find_peak_flops() {
  if (env::get("TESSERA_PEAK_FLOPS")) {
    const double v = env::get_double("TESSERA_PEAK_FLOPS");
    TS_CHECK_T(ConfigError, v > 0, "TESSERA_PEAK_FLOPS must be a positive FLOP/s per core, got ",
               v);
    return PeakFlops{v, "TESSERA_PEAK_FLOPS", ""};
  }
  const std::string path = peak_record_path();
  auto record = load_peak_record(path);
  if (!record) return std::nullopt;
  return PeakFlops{record->flops_per_core, path, record->host};
}

}  // namespace tessera::runtime::profiling
